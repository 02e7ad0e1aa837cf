"""Backends that misbehave in the ways the runner must survive, registered on import (the
runner's workers import this module with --import)."""

from __future__ import annotations

import os
import time

from moecert.kernels import register_backend
from moecert.kernels.native import TorchBackend


class _Base(TorchBackend):
    def claims(self, quant, problem, platform):
        return None if quant.scheme == "bf16" else "bf16 only"


class Dies(_Base):
    name = "test-dies"

    def forward(self, layer, x, *args):
        os._exit(3)  # as a segfault or an abort in a native kernel would


class Hangs(_Base):
    name = "test-hangs"

    def forward(self, layer, x, *args):
        time.sleep(3600)


class Raises(_Base):
    name = "test-raises"

    def forward(self, layer, x, *args):
        raise RuntimeError("kernel launch failed")


class ReturnsNaN(_Base):
    name = "test-nan"

    def forward(self, layer, x, topk_weights, topk_ids, out, expert_num_tokens):
        super().forward(layer, x, topk_weights, topk_ids, out, expert_num_tokens)
        out[0, 0] = float("nan")


class Slow(_Base):
    """Correct, and slow while MOECERT_TEST_SLOW_S is set (seconds per call): a run of it
    is still going when a test interrupts it, and its resume (unset) is quick."""
    name = "test-slow"

    def forward(self, layer, x, *args):
        time.sleep(float(os.environ.get("MOECERT_TEST_SLOW_S", "0")))
        return super().forward(layer, x, *args)


class OutOfMemoryOnce(_Base):
    """Runs out of device memory on its first call of the run (a file in
    MOECERT_TEST_OOM_DIR marks it), as a case beside too many others does, and not again."""
    name = "test-oom-once"

    def forward(self, layer, x, *args):
        import torch

        mark = os.path.join(os.environ["MOECERT_TEST_OOM_DIR"], "ran-out")
        try:
            with open(mark, "x"):
                pass
        except FileExistsError:
            return super().forward(layer, x, *args)
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")


class OutOfMemoryAlways(_Base):
    name = "test-oom-always"

    def forward(self, layer, x, *args):
        import torch

        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")


class KilledForMemoryOnce(_Base):
    """Its worker is killed with SIGKILL on its first call of the run (a file in
    MOECERT_TEST_OOM_DIR marks it), as the kernel's OOM killer kills a worker beside too many
    others, and not again."""
    name = "test-oom-killed-once"

    def forward(self, layer, x, *args):
        import signal

        mark = os.path.join(os.environ["MOECERT_TEST_OOM_DIR"], "killed")
        try:
            with open(mark, "x"):
                pass
        except FileExistsError:
            return super().forward(layer, x, *args)
        os.kill(os.getpid(), signal.SIGKILL)


class CudaErrorOutOfMemoryOnce(_Base):
    """The driver's out-of-memory error (not torch's OutOfMemoryError: a launch or a cuBLAS
    workspace that fails to allocate) on its first call of the run, and not again."""
    name = "test-cuda-oom-once"

    def forward(self, layer, x, *args):
        mark = os.path.join(os.environ["MOECERT_TEST_OOM_DIR"], "cuda-error")
        try:
            with open(mark, "x"):
                pass
        except FileExistsError:
            return super().forward(layer, x, *args)
        raise RuntimeError("CUDA error: out of memory\nCUDA kernel errors might be "
                           "asynchronously reported at some other API call")


class MpsBystander(_Base):
    """Fails with a CUDA error while it runs under an MPS daemon (CUDA_MPS_PIPE_DIRECTORY
    set), as every client on a GPU does when another client faults there; correct outside."""
    name = "test-mps-bystander"

    def forward(self, layer, x, *args):
        if os.environ.get("CUDA_MPS_PIPE_DIRECTORY"):
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return super().forward(layer, x, *args)


class CudaFault(_Base):
    """Fails with a CUDA error wherever it runs: its own fault."""
    name = "test-cuda-fault"

    def forward(self, layer, x, *args):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")


class GpuFault(_Base):
    """A real fatal fault on a GPU: a device-side assert (an index out of bounds), which
    leaves the process's CUDA context unusable, and under MPS every client's on that GPU."""
    name = "test-gpu-fault"

    def forward(self, layer, x, *args):
        import torch

        probe = torch.zeros(4, device=x.device)
        probe[torch.full((1,), 1 << 30, device=x.device)] += 1
        torch.cuda.synchronize(x.device)
        return super().forward(layer, x, *args)


for backend in (Dies(), Hangs(), Raises(), ReturnsNaN(), Slow(), OutOfMemoryOnce(),
                OutOfMemoryAlways(), KilledForMemoryOnce(), CudaErrorOutOfMemoryOnce(),
                MpsBystander(), CudaFault(), GpuFault()):
    register_backend(backend)
