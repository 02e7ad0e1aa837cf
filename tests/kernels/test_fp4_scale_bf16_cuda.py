"""Issue 44's SCALE_BF16 candidate compiled on a CUDA sm80+ GPU (skips elsewhere; the
interpreter side is test_fp4_scale_bf16.py, which this file must not share a process with:
test_fp4_planes.py says why): the GEMM on block scales decoded into bf16 at load (loaded as
the PTX decode's operands, no e4m3 conversion or E8M0 selects in the loop) against the current
path on scale words (the default CARRY + LEAN, NVFP4's scales by the hardware e4m3 conversion
on sm89+), the prefill decode, and a layer through the backend with the variable on and off:
bit for bit."""

from __future__ import annotations

import os

import pytest
import torch


def _sm80() -> bool:
    return (torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1"
            and torch.cuda.get_device_capability() >= (8, 0))


pytestmark = pytest.mark.skipif(not _sm80(), reason="needs a CUDA sm80+ GPU, compiled Triton")
E, TOPK = 4, 2
# (scale, CARRY, LEAN, K_UNROLL, SWAP_AB, dtype): 20 kernels to compile
CASES = [("nvfp4", True, "1", 1, False, "bf16"), ("nvfp4", True, "1", 2, False, "bf16"),
         ("nvfp4", True, "1", 1, True, "bf16"), ("nvfp4", True, "0", 1, False, "bf16"),
         ("nvfp4", False, "1", 1, False, "bf16"), ("mxfp4-folded", True, "1", 1, False, "bf16"),
         ("mxfp4-folded", True, "1", 2, True, "bf16"), ("mxfp4-pairs", True, "1", 1, False, "bf16"),
         ("mxfp4-folded", False, "0", 1, False, "bf16"),
         ("mxfp4-folded", False, "1", 1, False, "fp16")]
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def _scales(scale, N, K, gen):
    """(kind, cols, element, codes): NVFP4 every finite e4m3 byte (subnormals, both signs);
    MXFP4 folded E8M0 2 (the fold's smallest) and 118-135, pairs 0 and 1 (2^-127, 2^-126:
    outside the fold) among 118-135: products inside fp32's range."""
    from moecert.kernels.triton_moe import kinds

    if scale == "nvfp4":
        codes = torch.tensor([c for c in range(256) if c & 0x7F != 0x7F])
        kind, cols, element = kinds.S_E4M3, 16, "e4m3"
    else:
        extra = [2] if scale == "mxfp4-folded" else [0, 1]
        codes = torch.tensor(extra + list(range(118, 136)))
        kind, cols, element = kinds.S_E8M0, 32, "e8m0"
    n = E * N * K // cols
    codes = codes.repeat(n // len(codes) + 1)[:n]
    s = codes[torch.randperm(n, generator=gen)].to(torch.uint8).view(E, N, K // cols)
    return kind, cols, element, s


def _described(scale, N, K, carry, bf16, dtype=torch.bfloat16, seed=7):
    from moecert.kernels.triton_moe import configs, fused_moe, layout
    from moecert.kernels.triton_moe.kinds import W_FP4

    gen = torch.Generator().manual_seed(seed)
    q = torch.randint(0, 256, (E, N, K // 2), dtype=torch.uint8, generator=gen)
    kind, cols, element, s = _scales(scale, N, K, gen)
    codes = layout.plane_nibbles(q, layout.FP4_SPAN)
    if carry:
        codes = layout.carry_bits(codes)
    if N % layout.FP4_TILE[0] == 0:
        codes = layout.tile_weights(codes, *layout.FP4_TILE)
    fold = fused_moe.lean_scale_fold(kind, dtype, configs.fp4_lean()) if bf16 else 0
    packed = (layout.scale_bf16(s, cols, element, fold) if bf16
              else layout.scale_words(s, cols))
    return fused_moe.describe_weights(W_FP4, codes.cuda(), dtype, s=packed.cuda(),
                                      scale_cols=cols, scale_kind=kind,
                                      nib_span=layout.FP4_SPAN, carry=carry, scale_fold=fold)


@pytest.mark.parametrize(("scale", "carry", "lean", "unroll", "swap", "dtype"), CASES,
                         ids=[f"{s}{'-carry' if c else ''}-lean{le}-unroll{u}"
                              f"{'-swapped' if w else ''}-{d}" for s, c, le, u, w, d in CASES])
def test_bf16_scales_give_the_current_paths_bits_compiled(scale, carry, lean, unroll, swap,
                                                          dtype, monkeypatch):
    """K = 2880 (45 steps of 64: an unrolled pair runs past K), a ragged M: bf16 scales
    through the PTX against the scale words, the same CARRY and LEAN in both."""
    from moecert.kernels.triton_moe import configs, fused_moe, kinds
    from moecert.kernels.triton_moe.align import align_assignments

    monkeypatch.setenv(configs.FP4_LEAN_ENV, lean)
    N, K, M = 512, 2880, 37
    gen = torch.Generator().manual_seed(17)
    a = torch.randn(M, K, generator=gen).to(DTYPES[dtype]).cuda()
    ids = torch.stack([torch.randperm(E, generator=gen)[:TOPK] for _ in range(M)]).reshape(-1)
    ids = ids.cuda()
    config = {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 64, "num_warps": 4, "num_stages": 3,
              "K_UNROLL": unroll, "SWAP_AB": swap}
    sorted_ids, block_expert, num_padded = align_assignments(ids, E, 16, n=ids.numel())
    outs = {}
    for bf16 in (False, True):
        w = _described(scale, N, K, carry, bf16, DTYPES[dtype])
        assert w["constexprs"]["SCALE_BF16"] == bf16
        assert w["e8m0_fold"] == (scale == "mxfp4-folded" and dtype == "bf16")
        c = torch.empty(ids.numel(), N, dtype=torch.float32, device="cuda")
        fused_moe.moe_gemm(a, None, None, w, c, sorted_ids, block_expert, num_padded, None,
                           a_row_div=TOPK, act=kinds.A16, config=config)
        outs[bf16] = c
    assert torch.isfinite(outs[False]).all() and outs[False].abs().max() > 1
    assert torch.equal(outs[True].view(torch.int32), outs[False].view(torch.int32))


@pytest.mark.parametrize("scale", ["nvfp4", "mxfp4-folded"])
def test_the_prefill_decode_of_bf16_scales_gives_the_same_weights(scale):
    from moecert.kernels.triton_moe import dequant, fused_moe

    N, K = 200, 1024  # a last row block past N
    dense = {}
    for bf16 in (False, True):
        w = _described(scale, N, K, True, bf16)
        assert dequant.exact_in(w)
        out = torch.empty(E * N * K, dtype=torch.bfloat16, device="cuda")
        dequant.dequantize(w, out, fused_moe.int4_pairs_run_on(out.device))
        dense[bf16] = out
    assert torch.isfinite(dense[False].float()).all() and dense[False].abs().max() > 0
    assert torch.equal(dense[True].view(torch.int16), dense[False].view(torch.int16))


@pytest.mark.parametrize("scheme", ["nvfp4", "mxfp4"])
def test_the_backend_gives_the_defaults_output_with_bf16_scales(scheme, monkeypatch):
    """A layer through the backend (its own tile, the default CARRY + LEAN), the variable off
    and on: backend_detail says which, the output bit for bit."""
    from moecert.kernels.triton_moe import configs
    from moecert.kernels.triton_moe.backend import TritonBackend
    from moecert.reference import MoEProblem, make_inputs, synthesize

    P = MoEProblem(M=21, K=512, N=256, E=4, topk=2, bias=True, dtype="bf16")
    ckpt = synthesize(scheme, P, seed=3).to("cuda")
    x, w, ids = (t.cuda() for t in make_inputs(P, seed=4))
    backend = TritonBackend()
    outs = {}
    for flag in ("0", "1"):
        monkeypatch.setenv(configs.FP4_SCALE_BF16_ENV, flag)
        layer = backend.create_layer(ckpt, P)
        backend.process_weights_after_loading(layer)
        assert ("pre-decoded to bf16" in backend.describe(layer)) == (flag == "1")
        outs[flag] = backend.apply(layer, x, w, ids)
    assert torch.isfinite(outs["0"]).all()
    assert torch.equal(outs["1"], outs["0"])
