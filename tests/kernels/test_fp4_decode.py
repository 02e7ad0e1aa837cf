"""The kernels' own FP4 E2M1 decoders (torch in kernels/convert.py, Triton in
triton_moe/fused_moe.py) against values worked out by hand from OCP MX v1.0 §5.3.3.
They are written apart from the reference's decoder on purpose; these tests hold them to the
format, not to each other."""

from __future__ import annotations

import math

import pytest
import torch
from moecert.kernels.convert import decode_e2m1, unpack_nibbles
from moecert.kernels.triton_moe.interpret import load_interpreted_kernels

# code -> value, by hand: 1 sign bit, 2 exponent bits (bias 1), 1 mantissa bit
BY_HAND = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
           -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


def _same(got: list[float]) -> bool:
    return got == BY_HAND and all(math.copysign(1, a) == math.copysign(1, b)
                                  for a, b in zip(got, BY_HAND, strict=True))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_torch_decode_e2m1(dtype):
    got = decode_e2m1(torch.arange(16), dtype)
    assert got.dtype == dtype and _same(got.tolist())


def test_unpack_nibbles_even_index_low_nibble():
    packed = torch.tensor([[0x21, 0xF0]], dtype=torch.uint8)
    assert unpack_nibbles(packed, 4).tolist() == [[1, 2, 0, 15]]


def test_triton_decode_e2m1(monkeypatch):
    if not torch.cuda.is_available():
        load_interpreted_kernels()
        monkeypatch.setenv("TRITON_INTERPRET", "1")
    import triton
    import triton.language as tl

    global gemm_kernel
    from moecert.kernels.triton_moe import gemm_kernel

    @triton.jit
    def kernel(out_ptr):
        nib = tl.arange(0, 16)
        tl.store(out_ptr + nib, gemm_kernel._decode_e2m1(nib))

    device = "cuda" if torch.cuda.is_available() else "cpu"
    out = torch.empty(16, dtype=torch.float32, device=device)
    kernel[(1,)](out)
    assert _same(out.cpu().tolist())
