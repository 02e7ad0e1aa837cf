"""Hypothesis profiles: "ci" (derandomized, reproducible) when CI is set, else "dev" (random).
Under pytest-xdist each worker gets its share of the cores: two workers with full torch thread
pools on two cores spend more time contending than computing on the tests' small tensors.
Without a GPU every Triton kernel runs interpreted, so the kernel modules (and triton.language
with them) are defined for the interpreter before any test module imports them: a module
collected first that imported them compiled left triton.language's own jit helpers compiled,
which the interpreter cannot call (`interpret.CompiledLanguageError`), and which tests failed
depended on the collection order. The cache of synthesized checkpoints goes to a temporary
folder (MOECERT_CACHE_DIR), never the user's."""

import os
import tempfile

import pytest
import torch

# runs the tests start (`moecert run`, certify) keep synthesized checkpoints in a folder of this
# session's, never in the user's cache (conformance/harness/checkpoint_cache.py)
os.environ.setdefault("MOECERT_CACHE_DIR", tempfile.mkdtemp(prefix="moecert-test-cache-"))

if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    torch.set_num_threads(max(1, (os.cpu_count() or 1)
                              // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])))

if not torch.cuda.is_available():
    from moecert.kernels.triton_moe.interpret import load_interpreted_kernels

    load_interpreted_kernels()

from hypothesis import settings

settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
settings.register_profile("dev", deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")


@pytest.fixture(autouse=True)
def _backend_registry_restored():
    """A backend a test registers (a mutant, a twin) leaves with the test: left in the
    registry it joins later in-process runs' "every available backend" (13 cli and calibrate
    failures in a full run, depending on xdist's order). Registrations made by fixtures of a
    wider scope happen before this snapshot and stay."""
    from moecert.kernels.registry import backend_names, unregister_backend

    before = set(backend_names())
    yield
    for name in set(backend_names()) - before:
        unregister_backend(name)


from moecert.conformance.cli import run_command  # noqa: E402 (after the interpreter's set-up)
from moecert.conformance.harness import suites  # noqa: E402

_SUITE_BUILDERS = (suites.build_suite, run_command.build_suite)


@pytest.fixture(autouse=True)
def _suites_left_as_found():
    """A test that swaps the suite builder in for good fails itself, not the later tests of
    its worker: importing tests/conformance/helpers/small_certify_suite.py into the pytest
    process once made every later `-k`, resume and calibrate test on that worker see nine
    cases (13 failures in CI, depending on xdist's order)."""
    yield
    assert (suites.build_suite, run_command.build_suite) == _SUITE_BUILDERS, \
        "this test or a fixture of its module left moecert's suite builder patched " \
        "(use monkeypatch)"
