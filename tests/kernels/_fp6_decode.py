"""A kernel that runs gemm_kernel's six-bit plane decode alone (`_fp6_planes`) on vectors of
the two halves' words, their words of top bits and signs, and per-plane multipliers, for
test_fp6_planes_cuda.py. Imported only there, inside its tests (the PTX does not run under
the interpreter)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from moecert.kernels.triton_moe import gemm_kernel

BLOCK = 512


@triton.jit
def _decode(lo_ptr, hi_ptr, high_ptr, mul_ptr, out_ptr, n, FP6_EXP: tl.constexpr,
            BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    lo = tl.load(lo_ptr + i)
    hi = tl.load(hi_ptr + i)
    h = tl.load(high_ptr + i)
    m0 = tl.load(mul_ptr + i)
    m1 = tl.load(mul_ptr + n + i)
    m2 = tl.load(mul_ptr + 2 * n + i)
    m3 = tl.load(mul_ptr + 3 * n + i)
    b0, b1, b2, b3, c0, c1, c2, c3 = gemm_kernel._fp6_planes(lo, hi, h, m0, m1, m2, m3,
                                                             FP6_EXP)
    tl.store(out_ptr + i, b0)
    tl.store(out_ptr + n + i, b1)
    tl.store(out_ptr + 2 * n + i, b2)
    tl.store(out_ptr + 3 * n + i, b3)
    tl.store(out_ptr + 4 * n + i, c0)
    tl.store(out_ptr + 5 * n + i, c1)
    tl.store(out_ptr + 6 * n + i, c2)
    tl.store(out_ptr + 7 * n + i, c3)


def decoded(lo: torch.Tensor, hi: torch.Tensor, high: torch.Tensor, e8m0: torch.Tensor,
            exp_bits: int, bias: int) -> torch.Tensor:
    """bf16 [2, 4, n]: [half][plane p] the weight of each element (lo / hi: int16 words of
    the two halves, high: int16 words of their top bits and signs, lo's in the low byte),
    the plane's E8M0 byte e8m0[p, i] giving the multiplier 2^(E - bias); n a multiple of
    BLOCK."""
    n = lo.numel()
    assert n % BLOCK == 0 and hi.shape == high.shape == (n,) and e8m0.shape == (4, n)
    mul = ((e8m0.to(torch.int32) + (127 - bias)) << 7).to(torch.int16).view(torch.bfloat16)
    out = torch.empty(2, 4, n, dtype=torch.bfloat16, device=lo.device)
    _decode[(n // BLOCK,)](lo, hi, high, mul.contiguous(), out, n, FP6_EXP=exp_bits,
                           BLOCK=BLOCK)
    return out
