"""Issue 44's CARRY candidate compiled on a CUDA sm80+ GPU (skips elsewhere; the interpreter
side is test_fp4_carry.py, which this file must not share a process with: test_fp4_planes.py
says why): the GEMM on sign-carrying words (`_fp4_carry*` PTX, NVFP4's scales by the
hardware e4m3 conversion on sm89+) against the current path on words (with LEAN: LEAN's), and
the prefill decode on them against the current decode: bit for bit."""

from __future__ import annotations

import os

import pytest
import torch


def _sm80() -> bool:
    return (torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1"
            and torch.cuda.get_device_capability() >= (8, 0))


pytestmark = pytest.mark.skipif(not _sm80(), reason="needs a CUDA sm80+ GPU, compiled Triton")
E, TOPK = 4, 2
# (scale, LEAN, K_UNROLL, SWAP_AB): 18 kernels to compile
CASES = [("nvfp4", "0", 1, False), ("nvfp4", "0", 2, False), ("nvfp4", "0", 1, True),
         ("nvfp4", "1", 1, False), ("nvfp4", "1", 2, False), ("nvfp4", "1", 1, True),
         ("mxfp4-folded", "0", 1, False), ("mxfp4-folded", "1", 2, False),
         ("mxfp4-pairs", "0", 1, False)]


def _described(scale, N, K, carry, seed=7):
    from moecert.kernels.triton_moe import fused_moe, kinds, layout

    gen = torch.Generator().manual_seed(seed)
    q = torch.randint(0, 256, (E, N, K // 2), dtype=torch.uint8, generator=gen)
    if scale.startswith("mxfp4"):  # byte 1 does not fold into bf16: per-pair scales
        kind, cols = kinds.S_E8M0, 32
        lo = 118 if scale == "mxfp4-folded" else 1
        s = torch.randint(lo, 136, (E, N, K // cols), dtype=torch.uint8, generator=gen)
    else:  # e4m3: normal and subnormal bytes, a fifth negative
        kind, cols = kinds.S_E4M3, 16
        s = torch.randint(0x01, 0x58, (E, N, K // cols), dtype=torch.uint8, generator=gen)
        s |= (torch.rand(s.shape, generator=gen) < 0.2).to(torch.uint8) << 7
    codes = layout.plane_nibbles(q, layout.FP4_SPAN)
    if carry:
        codes = layout.carry_bits(codes)
    if N % layout.FP4_TILE[0] == 0:
        codes = layout.tile_weights(codes, *layout.FP4_TILE)
    return fused_moe.describe_weights(kinds.W_FP4, codes.cuda(), torch.bfloat16,
                                      s=layout.scale_words(s, cols).cuda(), scale_cols=cols,
                                      scale_kind=kind, nib_span=layout.FP4_SPAN, carry=carry)


@pytest.mark.parametrize(("scale", "lean", "unroll", "swap"), CASES,
                         ids=[f"{s}-lean{le}-unroll{u}{'-swapped' if w else ''}"
                              for s, le, u, w in CASES])
def test_carry_gives_the_current_paths_bits_compiled(scale, lean, unroll, swap, monkeypatch):
    """K = 2880 (45 steps of 64: an unrolled pair runs past K), a ragged M: the carried words
    through the PTX against the current path's output on words, LEAN on or off in both."""
    from moecert.kernels.triton_moe import configs, fused_moe, kinds

    monkeypatch.setenv(configs.FP4_LEAN_ENV, lean)
    from moecert.kernels.triton_moe.align import align_assignments

    N, K, M = 512, 2880, 37
    gen = torch.Generator().manual_seed(17)
    a = torch.randn(M, K, generator=gen).to(torch.bfloat16).cuda()
    ids = torch.stack([torch.randperm(E, generator=gen)[:TOPK] for _ in range(M)]).reshape(-1)
    ids = ids.cuda()
    config = {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 64, "num_warps": 4, "num_stages": 3,
              "K_UNROLL": unroll, "SWAP_AB": swap}
    sorted_ids, block_expert, num_padded = align_assignments(ids, E, 16, n=ids.numel())
    outs = {}
    for carry in (False, True):
        w = _described(scale, N, K, carry)
        assert w["e8m0_fold"] == (scale == "mxfp4-folded")
        c = torch.empty(ids.numel(), N, dtype=torch.float32, device="cuda")
        fused_moe.moe_gemm(a, None, None, w, c, sorted_ids, block_expert, num_padded, None,
                           a_row_div=TOPK, act=kinds.A16, config=config)
        outs[carry] = c
    assert torch.isfinite(outs[False]).all() and outs[False].abs().max() > 1
    assert torch.equal(outs[True].view(torch.int32), outs[False].view(torch.int32))


def test_the_e4m3_conversion_is_taken_on_sm89():
    """Where the device has it, the candidate's NVFP4 launch asks for the hardware e4m3
    conversion (else the test above would not have run it)."""
    from moecert.kernels.triton_moe import fused_moe

    dev = torch.device("cuda")
    assert fused_moe.e4m3_cvt_runs_on(dev) == (torch.cuda.get_device_capability() >= (8, 9))


@pytest.mark.parametrize("scale", ["nvfp4", "mxfp4-folded"])
def test_the_prefill_decode_of_carried_words_gives_the_same_weights(scale):
    from moecert.kernels.triton_moe import dequant, fused_moe

    N, K = 200, 1024  # a last row block past N
    dense = {}
    for carry in (False, True):
        w = _described(scale, N, K, carry)
        assert dequant.exact_in(w)
        out = torch.empty(E * N * K, dtype=torch.bfloat16, device="cuda")
        dequant.dequantize(w, out, fused_moe.int4_pairs_run_on(out.device))
        dense[carry] = out
    assert torch.isfinite(dense[False].float()).all() and dense[False].abs().max() > 0
    assert torch.equal(dense[True].view(torch.int16), dense[False].view(torch.int16))
