"""Issue 44's FP4 paths compiled on a CUDA sm80+ GPU (they skip elsewhere; the interpreter
side is test_fp4_prefill.py and test_fp4_scale_words.py, which this file must not share a
process with: test_fp4_planes.py says why). The prefill decode's PTX (`_fp4_planes_scaled`)
against its bit-field decode, bit for bit; the GEMM on plane scales in words against bytes,
bit for bit, through the PTX decode, and the LEAN step against the current one; the FP4
prefill dispatch against the fused path and the float64 reference at a layer large enough
for the W16 tile's wgmma."""

from __future__ import annotations

import os

import pytest
import torch
from _dispatch import outputs_by_threshold


def _sm80() -> bool:
    return (torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1"
            and torch.cuda.get_device_capability() >= (8, 0))


pytestmark = pytest.mark.skipif(not _sm80(), reason="needs a CUDA sm80+ GPU, compiled Triton")
E, TOPK = 4, 2


def _fp4(kind, N, K, gen):
    from moecert.kernels.triton_moe import kinds

    q = torch.randint(0, 256, (E, N, K // 2), dtype=torch.uint8, generator=gen)
    if kind == kinds.S_E8M0:
        return q, torch.randint(118, 136, (E, N, K // 32), dtype=torch.uint8, generator=gen), 32
    s = torch.randint(0x20, 0x58, (E, N, K // 16), dtype=torch.uint8, generator=gen)
    s |= (torch.rand(s.shape, generator=gen) < 0.2).to(torch.uint8) << 7
    return q, s, 16


def _described(kind, dtype, N, K, words, seed=5):
    from moecert.kernels.triton_moe import fused_moe, kinds, layout

    gen = torch.Generator().manual_seed(seed)
    q, s, cols = _fp4(kind, N, K, gen)
    codes = layout.plane_nibbles(q, layout.FP4_SPAN)
    if N % 16 == 0:
        codes = layout.tile_weights(codes, *layout.FP4_TILE)
    s = layout.scale_words(s, cols) if words else s.transpose(1, 2).contiguous().transpose(1, 2)
    return fused_moe.describe_weights(kinds.W_FP4, codes.cuda(), dtype, s=s.cuda(),
                                      scale_cols=cols, scale_kind=kind,
                                      nib_span=layout.FP4_SPAN)


CASES = [("e4m3", torch.bfloat16), ("e4m3", torch.float16), ("e8m0", torch.bfloat16)]


@pytest.mark.parametrize(("scale", "dtype"), CASES, ids=["nvfp4-bf16", "nvfp4-fp16",
                                                          "mxfp4-bf16"])
@pytest.mark.parametrize("words", [False, True], ids=["bytes", "words"])
@pytest.mark.parametrize(("N", "K"), [(2880, 2880), (200, 1024)], ids=["gpt-oss", "ragged"])
def test_ptx_prefill_decode_matches_the_bit_fields(scale, dtype, words, N, K):
    from moecert.kernels.triton_moe import dequant, kinds

    kind = kinds.S_E8M0 if scale == "e8m0" else kinds.S_E4M3
    w = _described(kind, dtype, N, K, words)
    assert dequant.exact_in(w)
    outs = {}
    for fast in (False, True):
        ws = torch.full((E * N * K,), float("nan"), dtype=dtype, device="cuda")
        outs[fast] = dequant.dequantize(w, ws, fast)["q"]
    assert not outs[False].isnan().any() and outs[False].abs().max() > 1
    assert torch.equal(outs[True].view(torch.int16), outs[False].view(torch.int16))


@pytest.mark.parametrize(("scale", "dtype"), [*CASES, ("e8m0", torch.float16)],
                         ids=["nvfp4-bf16", "nvfp4-fp16", "mxfp4-folded", "mxfp4-pair-sums"])
@pytest.mark.parametrize("unroll", [1, 2])
def test_scale_words_give_the_byte_layouts_bits_compiled(scale, dtype, unroll):
    from moecert.kernels.triton_moe import fused_moe, kinds
    from moecert.kernels.triton_moe.align import align_assignments

    kind = kinds.S_E8M0 if scale == "e8m0" else kinds.S_E4M3
    N, K, M = 512, 2880, 37
    gen = torch.Generator().manual_seed(11)
    a = torch.randn(M, K, generator=gen).to(dtype).cuda()
    ids = torch.stack([torch.randperm(E, generator=gen)[:TOPK] for _ in range(M)]).reshape(-1)
    ids = ids.cuda()
    config = {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 64, "num_warps": 4, "num_stages": 3,
              "K_UNROLL": unroll}
    sorted_ids, block_expert, num_padded = align_assignments(ids, E, 16, n=ids.numel())
    outs = {}
    for words in (False, True):
        w = _described(kind, dtype, N, K, words)
        c = torch.empty(ids.numel(), N, dtype=torch.float32, device="cuda")
        fused_moe.moe_gemm(a, None, None, w, c, sorted_ids, block_expert, num_padded, None,
                           a_row_div=TOPK, act=kinds.A16, config=config)
        outs[words] = c
    assert torch.isfinite(outs[False]).all() and outs[False].abs().max() > 1
    assert torch.equal(outs[True].view(torch.int32), outs[False].view(torch.int32))


@pytest.mark.parametrize(("scale", "dtype"), CASES, ids=["nvfp4-bf16", "nvfp4-fp16",
                                                          "mxfp4-folded"])
@pytest.mark.parametrize("unroll", [1, 2])
def test_lean_gives_the_current_paths_bits_compiled(scale, dtype, unroll, monkeypatch):
    """Issue 44's LEAN step through the PTX decode (`_fp4_planes_folded` for NVFP4 in bf16,
    the unmasked activation loads where K is a whole number of steps: 2880 = 45 x 64, not of
    two-tile steps) against the current path, on words: bit for bit."""
    from moecert.kernels.triton_moe import configs, fused_moe, kinds
    from moecert.kernels.triton_moe.align import align_assignments

    kind = kinds.S_E8M0 if scale == "e8m0" else kinds.S_E4M3
    N, K, M = 512, 2880, 37
    gen = torch.Generator().manual_seed(13)
    a = torch.randn(M, K, generator=gen).to(dtype).cuda()
    ids = torch.stack([torch.randperm(E, generator=gen)[:TOPK] for _ in range(M)]).reshape(-1)
    ids = ids.cuda()
    config = {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 64, "num_warps": 4, "num_stages": 3,
              "K_UNROLL": unroll}
    sorted_ids, block_expert, num_padded = align_assignments(ids, E, 16, n=ids.numel())
    outs = {}
    for lean in ("0", "1"):
        monkeypatch.setenv(configs.FP4_LEAN_ENV, lean)
        w = _described(kind, dtype, N, K, True)
        assert w["constexprs"]["LEAN"] == (lean == "1")
        c = torch.empty(ids.numel(), N, dtype=torch.float32, device="cuda")
        fused_moe.moe_gemm(a, None, None, w, c, sorted_ids, block_expert, num_padded, None,
                           a_row_div=TOPK, act=kinds.A16, config=config)
        outs[lean] = c
    assert torch.isfinite(outs["0"]).all() and outs["0"].abs().max() > 1
    assert torch.equal(outs["1"].view(torch.int32), outs["0"].view(torch.int32))


@pytest.mark.parametrize("scheme", ["mxfp4", "nvfp4"])
@pytest.mark.parametrize("words", ["0", "1"])
def test_the_prefill_dispatch_computes_the_reference_on_the_gpu(scheme, words, monkeypatch):
    """topk 2 over 8 experts, DEQUANT_ROWS rows per expert (512: 2048 tokens): the W16 prefill
    tile (wgmma on sm90) at the default threshold, against the fused path (threshold off: the
    swapped nibble prefill tile) and float64."""
    from moecert.kernels.triton_moe import configs, heuristics
    from moecert.kernels.triton_moe.backend import TritonBackend, _plan
    from moecert.reference import MoEProblem, make_inputs, moe, synthesize

    monkeypatch.setenv(configs.FP4_SCALE_WORDS_ENV, words)
    P = MoEProblem(M=heuristics.DEQUANT_ROWS * 8 // 2, K=1024, N=512, E=8, topk=2,
                   bias=scheme == "mxfp4")
    ckpt = synthesize(scheme, P, seed=3)
    backend = TritonBackend()
    layer = backend.create_layer(ckpt.to("cuda"), P)
    backend.process_weights_after_loading(layer)
    assert _plan(layer)["dense_bytes"] is not None
    assert heuristics.dequantizes(P.M * P.topk, P.E, _plan(layer)["w13"])
    x, w, ids = make_inputs(P, seed=4)
    ref = moe(ckpt, x, w, ids, P).cuda()
    outs = outputs_by_threshold(backend, layer, (x.cuda(), w.cuda(), ids.cuda()), ref,
                                monkeypatch, {"off": None, "": None}, 2.0**-8)
    torch.testing.assert_close(outs[""], outs["off"], rtol=2.0**-7, atol=1e-2)


def test_the_prefill_dispatch_replays_from_a_cuda_graph(monkeypatch):
    """The bench times graph replay: the per-call workspace and decode must capture, and a
    replay must give the eager call's bits."""
    from moecert.conformance.performance.timing import graph_replays
    from moecert.kernels.triton_moe import configs
    from moecert.kernels.triton_moe.backend import TritonBackend
    from moecert.reference import MoEProblem, make_inputs, synthesize

    monkeypatch.setenv(configs.DEQUANT_ROWS_ENV, "0")
    P = MoEProblem(M=256, K=512, N=256, E=8, topk=2)
    backend = TritonBackend()
    layer = backend.create_layer(synthesize("nvfp4", P, seed=3).to("cuda"), P)
    backend.process_weights_after_loading(layer)
    x, w, ids = (t.cuda() for t in make_inputs(P, seed=4))
    eager = backend.apply(layer, x, w, ids)
    out = torch.full_like(eager, float("nan"))
    (replay,) = graph_replays([lambda: backend.forward(layer, x, w, ids, out, None)],
                              x.device)
    out.fill_(float("nan"))
    replay()
    torch.cuda.synchronize()
    assert torch.equal(out, eager)
