"""`python -m moecert.conformance.cli ARGS` runs `moecert ARGS` (the GPU machines run the
checkout this way, without installing it)."""

from .app import main

raise SystemExit(main())
