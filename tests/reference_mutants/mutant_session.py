"""pytest plugin of a run on a mutated copy of the reference (`-p mutant_session`), in place
of tests/conftest.py: the same Hypothesis profile as CI (derandomized: a mutant is caught, or
not, the same way every run), a private cache folder, one torch thread."""

import os
import tempfile

import torch
from hypothesis import settings

os.environ.setdefault("MOECERT_CACHE_DIR", tempfile.mkdtemp(prefix="moecert-mutant-cache-"))
torch.set_num_threads(1)
settings.register_profile("mutant", derandomize=True, deadline=None, print_blob=True)
settings.load_profile("mutant")
