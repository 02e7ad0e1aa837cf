"""Issue 44's FP4 decode candidate, under the Triton interpreter: e2m1 plane scales stored as
one 32-bit word per weight row and span (layout.scale_words, MOECERT_TRITON_FP4_SCALE_WORDS=1)
instead of a byte per block. The kernel reads the same scale bytes from other addresses, so
the GEMM must give the byte layout's output bit for bit (every scale kind, the folded E8M0
path, an unrolled step past K, split-K, swapped operands), the backend must export the
checkpoint's scales back, and the prefill decode (dequant.py) must read the words too."""

from __future__ import annotations

import sys

import pytest
import torch
from moecert.kernels.triton_moe.interpret import load_interpreted_kernels

load_interpreted_kernels()  # before the kernel modules are bound below

from _gemm import run_moe_gemm  # noqa: E402
from moecert.kernels.triton_moe import configs, dequant, kinds, layout  # noqa: E402
from moecert.kernels.triton_moe import fused_moe as fm  # noqa: E402
from moecert.kernels.triton_moe.backend import TritonBackend, _plan  # noqa: E402
from moecert.reference import MoEProblem, make_inputs, synthesize  # noqa: E402

E, N, TOPK = 3, 64, 2


@pytest.fixture(autouse=True)
def _interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.delenv(configs.FP4_SCALE_WORDS_ENV, raising=False)
    monkeypatch.delenv(configs.DEQUANT_ROWS_ENV, raising=False)
    assert "moecert.kernels.triton_moe.fused_moe" in sys.modules


def _run(weights, a, ids, config):
    return run_moe_gemm(weights, a, ids, config, E, TOPK)


@pytest.mark.parametrize(("scale", "dtype"), [("e8m0", torch.bfloat16),
                                              ("e8m0", torch.float16),
                                              ("e4m3", torch.bfloat16)],
                         ids=["e8m0-folded", "e8m0-pair-sums", "e4m3"])
@pytest.mark.parametrize(("unroll", "split_k", "swap"), [(1, 1, False), (2, 1, False),
                                                         (1, 2, True)])
def test_scale_words_give_the_byte_layouts_bits(scale, dtype, unroll, split_k, swap):
    """K = 192: three spans, so an unrolled step's second tile runs past K (a clamped word)."""
    gen = torch.Generator().manual_seed(7 + unroll + 3 * split_k)
    K = 192
    q = torch.randint(0, 256, (E, N, K // 2), dtype=torch.uint8, generator=gen)
    if scale == "e8m0":
        kind, cols = kinds.S_E8M0, 32
        s = torch.randint(120, 134, (E, N, K // cols), dtype=torch.uint8, generator=gen)
    else:
        kind, cols = kinds.S_E4M3, 16
        s = torch.randint(0x20, 0x58, (E, N, K // cols), dtype=torch.uint8, generator=gen)
        s |= (torch.rand(s.shape, generator=gen) < 0.2).to(torch.uint8) << 7
    codes = layout.tile_weights(layout.plane_nibbles(q, layout.FP4_SPAN), *layout.FP4_TILE)
    described = {}
    for words in (False, True):
        sw = layout.scale_words(s, cols) if words else s.transpose(1, 2).contiguous(
            ).transpose(1, 2)
        described[words] = fm.describe_weights(kinds.W_FP4, codes, dtype, s=sw,
                                               scale_cols=cols, scale_kind=kind,
                                               nib_span=layout.FP4_SPAN)
    assert described[True]["constexprs"]["SCALE_WORDS"]
    assert described[True]["e8m0_fold"] == described[False]["e8m0_fold"]
    assert described[False]["e8m0_fold"] == (scale == "e8m0" and dtype == torch.bfloat16)
    a = torch.randn(7, K, generator=gen).to(dtype)
    ids = torch.stack([torch.randperm(E, generator=gen)[:TOPK] for _ in range(7)]).reshape(-1)
    config = {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 64, "num_warps": 4, "num_stages": 2,
              "K_UNROLL": unroll, "SPLIT_K": split_k, "SWAP_AB": swap}
    want = _run(described[False], a, ids, config)
    got = _run(described[True], a, ids, config)
    assert torch.isfinite(want).all() and want.abs().max() > 1
    assert torch.equal(got.view(torch.int32), want.view(torch.int32))


def test_scale_words_round_trip_and_hold_each_planes_block():
    gen = torch.Generator().manual_seed(1)
    for cols in (16, 32):
        s = torch.randint(0, 256, (2, 5, 320 // cols), dtype=torch.uint8, generator=gen)
        words = layout.scale_words(s, cols)
        assert words.shape == (2, 5, 5, 4) and words.permute(0, 2, 1, 3).is_contiguous()
        for span in range(5):
            for p in range(4):
                assert torch.equal(words[:, :, span, p], s[:, :, (span * 64 + p * 16) // cols])
        assert torch.equal(layout.unscale_words(words, cols), s)


@pytest.mark.parametrize("scheme", ["mxfp4", "nvfp4"])
def test_the_backend_stores_words_and_computes_and_exports_the_same(scheme, monkeypatch):
    P = MoEProblem(M=5, K=256, N=64, E=3, topk=2, bias=True)
    ckpt = synthesize(scheme, P, seed=1)
    backend = TritonBackend()
    outs, exports = {}, {}
    x, w, ids = make_inputs(P, seed=2)
    # the words' path (MXFP4's default since stores bf16 scales: test_fp4_scale_bf16)
    monkeypatch.setenv(configs.FP4_SCALE_BF16_ENV, "0")
    for words in ("0", "1"):
        monkeypatch.setenv(configs.FP4_SCALE_WORDS_ENV, words)
        layer = backend.create_layer(ckpt, P)
        backend.process_weights_after_loading(layer)
        assert (layer.get("w13_s").dim() == 4) == (words == "1")
        assert ("plane scales in words" in backend.describe(layer)) == (words == "1")
        outs[words] = backend.apply(layer, x, w, ids)
        exports[words] = backend.canonical_weights(layer)
        if words == "1":  # the prefill decode reads the words too
            plan = _plan(layer)
            ws = torch.empty(plan["dense_bytes"] // 2, dtype=torch.bfloat16)
            dense_words = dequant.dequantize(plan["w2"], ws, fast=False)["q"].clone()
        else:
            plan = _plan(layer)
            ws = torch.empty(plan["dense_bytes"] // 2, dtype=torch.bfloat16)
            dense_bytes = dequant.dequantize(plan["w2"], ws, fast=False)["q"].clone()
    assert torch.equal(outs["1"], outs["0"])
    assert torch.equal(dense_words, dense_bytes)
    for p in ("w13", "w2"):
        a, b = exports["1"][p], exports["0"][p]
        assert torch.equal(a.codes, b.codes) and torch.equal(a.scales, b.scales)
