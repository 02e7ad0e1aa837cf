"""Mutants of the triton backend, for bugs that live only in its kernel format."""

from __future__ import annotations

from moecert.kernels.triton_moe.backend import TritonBackend


class W4A8GlobalScaleDropped(TritonBackend):
    """W4A8: the a1 global scale (the power of two moved out of GEMM1's group scales onto
    the activation side, Marlin's a1_gscale) left out of the kernel's arguments; GEMM1
    comes out divided by it."""

    name = "mutant-w4a8-a1-gscale-dropped"

    def convert(self, layer):
        super().convert(layer)
        layer.meta["triton_plan"]["a1_gscale"] = None
