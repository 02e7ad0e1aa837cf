"""A kernel that runs gemm_kernel's MXFP8 word decodes alone (`_e4m3_words`,
`_e4m3_scaled_words`) on a vector of 16-bit words, for test_e4m3_words_cuda.py. Imported
only there, inside its tests: this module binds the compiled kernel module (the PTX does not
run under the interpreter)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from moecert.kernels.triton_moe import gemm_kernel

BLOCK = 256


@triton.jit
def _decode(words_ptr, e_ptr, lo_ptr, hi_ptr, MODE: tl.constexpr, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    w = tl.load(words_ptr + i)
    if MODE == gemm_kernel.E4M3_SCALED_WORDS:
        lo, hi = gemm_kernel._e4m3_scaled_words(w, tl.load(e_ptr + i))
    else:
        lo, hi = gemm_kernel._e4m3_words(w, tl.bfloat16)
    tl.store(lo_ptr + i, lo)
    tl.store(hi_ptr + i, hi)


def decoded(words: torch.Tensor, mode: int, e8m0: torch.Tensor | None = None):
    """Each int16 word's two values (its low byte's, its high byte's) in bf16 by
    `_e4m3_words` (E4M3_CVT_WORDS), or by `_e4m3_scaled_words` with the E8M0 bytes `e8m0`
    (one a word; E4M3_SCALED_WORDS); words.numel() a multiple of BLOCK."""
    assert words.dtype == torch.int16 and words.numel() % BLOCK == 0
    lo = torch.empty(words.shape, dtype=torch.bfloat16, device=words.device)
    hi = torch.empty_like(lo)
    e = e8m0 if e8m0 is not None else torch.zeros_like(words, dtype=torch.uint8)
    _decode[(words.numel() // BLOCK,)](words, e, lo, hi, MODE=mode, BLOCK=BLOCK)
    return lo, hi
