"""Fixtures for backend tests: the Triton backend on a CPU, through the interpreter; a guard
that refuses host synchronization (the CPU stand-in for a CUDA graph capture). The folder is
put on sys.path, so that the test modules import what they share (`_gemm`: a helper module,
no tests) by name."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import pytest
import torch
from moecert.kernels.triton_moe.interpret import load_interpreted_kernels

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(scope="module")
def one_thread():
    """Tiny tensors: intra-op threads only cost on CI's two shared cores."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def interpreted(monkeypatch):
    """For a module that bound the interpreted kernels at import (`load_interpreted_kernels()`
    above its kernel imports): the backend runs them (`pytestmark = pytest.mark.usefixtures(
    "interpreted")`)."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert "moecert.kernels.triton_moe.fused_moe" in sys.modules


@pytest.fixture
def triton_runs_here(monkeypatch):
    """Make the triton backend runnable in this test: the GPU when there is one, else the
    interpreter (backend.available() and claims() read the variable at call time)."""
    if not torch.cuda.is_available():
        load_interpreted_kernels()
        monkeypatch.setenv("TRITON_INTERPRET", "1")


class Launches:
    """A spy on the Triton GEMM kernel's launches: the named launch arguments of each."""

    def __init__(self, kernel, keys):
        self.kernel, self.keys, self.seen = kernel, keys, []

    def __getitem__(self, grid):
        def launch(*args, **kw):
            self.seen.append(tuple(kw[k] for k in self.keys))
            return self.kernel[grid](*args, **kw)
        return launch


@pytest.fixture
def spy_launches(monkeypatch):
    """`spy_launches("K_UNROLL", "EVEN_K")`: a `Launches` in place of moe_gemm_kernel for the
    test (the module's kernels must already be bound: interpreted ones on a CPU)."""
    def spy(*keys):
        from moecert.kernels.triton_moe import gemm_kernel

        launches = Launches(gemm_kernel.moe_gemm_kernel, keys)
        monkeypatch.setattr(gemm_kernel, "moe_gemm_kernel", launches)
        return launches
    return spy


class HostSync(AssertionError):
    """A call that reads a device tensor's values on the host, or copies host data to the
    device: under CUDA graph capture it fails (or syncs the stream)."""


# Tensor methods and torch functions that read values on the host (a device-to-host copy and
# a stream sync on CUDA), or whose output size depends on values (nonzero inside), or that
# copy host data to the device (torch.tensor(list, device=cuda): pageable memory).
SYNC_METHODS = ("item", "tolist", "cpu", "cuda", "numpy", "nonzero", "argwhere", "unique",
                "unique_consecutive", "bincount", "masked_select", "__bool__", "__int__",
                "__float__", "__index__")
SYNC_FUNCTIONS = ("nonzero", "argwhere", "unique", "unique_consecutive", "bincount",
                  "masked_select", "tensor", "as_tensor", "from_numpy")


class HostSyncGuard:
    """While `armed()`, the calls above raise HostSync, and so do boolean-mask indexing and
    repeat_interleave with tensor repeats but no output_size (both sized by values). The
    CPU's stand-in for a capture: a CPU tensor cannot tell a host read from a device one, so
    the calls themselves are refused. `paused()` lets an emulated device kernel run."""

    error = HostSync

    def __init__(self, monkeypatch):
        self.on = False
        for name in SYNC_METHODS:
            monkeypatch.setattr(torch.Tensor, name, self._refuse(f"Tensor.{name}",
                                                                 getattr(torch.Tensor, name)))
        for name in SYNC_FUNCTIONS:
            monkeypatch.setattr(torch, name, self._refuse(f"torch.{name}", getattr(torch, name)))
        for owner, name in ((torch.Tensor, "__getitem__"), (torch.Tensor, "__setitem__")):
            monkeypatch.setattr(owner, name, self._no_mask(name, getattr(owner, name)))
        for owner in (torch.Tensor, torch):
            monkeypatch.setattr(owner, "repeat_interleave",
                                self._sized_repeats(owner.repeat_interleave))

    @contextlib.contextmanager
    def armed(self):
        self.on = True
        try:
            yield self
        finally:
            self.on = False

    @contextlib.contextmanager
    def paused(self):
        on, self.on = self.on, False
        try:
            yield
        finally:
            self.on = on

    def _refuse(self, what, original):
        def call(*args, **kwargs):
            if self.on:
                raise HostSync(f"{what} in a forward that must run under graph capture")
            return original(*args, **kwargs)
        return call

    def _no_mask(self, what, original):
        def call(t, index, *rest):
            items = index if isinstance(index, tuple) else (index,)
            if self.on and any(isinstance(i, torch.Tensor) and i.dtype == torch.bool
                               for i in items):
                raise HostSync(f"boolean-mask {what} (sized by the mask's count: nonzero)")
            return original(t, index, *rest)
        return call

    def _sized_repeats(self, original):
        def call(*args, **kwargs):
            repeats = args[1] if len(args) > 1 else kwargs.get("repeats")
            if (self.on and isinstance(repeats, torch.Tensor)
                    and kwargs.get("output_size") is None):
                raise HostSync("repeat_interleave with tensor repeats and no output_size")
            return original(*args, **kwargs)
        return call


@pytest.fixture
def host_sync_guard(monkeypatch) -> HostSyncGuard:
    return HostSyncGuard(monkeypatch)
