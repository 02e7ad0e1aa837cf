"""`--import MODULE`: modules a front end imports before it looks names up (a module may
register backends, `kernels.register_backend`); a missing one is one `UsageError` line."""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterable

from .option_values import UsageError


def import_modules(modules: Iterable[str], flag: str = "--import") -> tuple[str, ...]:
    """Import each module (it may register backends); a missing one is a usage error."""
    for module in modules:
        if not re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*", module):
            raise UsageError(f"{flag} {module}: expected a module name (pkg.module, importable "
                             "from sys.path), not a file path")
        try:
            importlib.import_module(module)
        except ImportError as e:
            raise UsageError(f"{flag} {module}: {type(e).__name__}: {e}") from None
    return tuple(modules)


__all__ = ["import_modules"]
