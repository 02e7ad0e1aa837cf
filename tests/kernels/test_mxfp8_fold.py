"""Issue 44's MXFP8 candidate (MOECERT_TRITON_MXFP8_FOLD=1, default off, not yet timed on a
GPU): in bf16 layers whose E8M0 scale bytes all lie in fused_moe.E4M3_FOLD_BYTES, each
32-column tile's weights are multiplied by their scale (exact: an e4m3 value times a power of
two inside bf16's normal range) and the dot accumulates (ACC_DOT), with no fp32 partial sum to
scale per tile. Under the interpreter both sums are fp32 in the same order and a power of two
commutes with their roundings, so the fold must give the tile-scaled path's bits; on a GPU the
MMA's accumulation order may differ (the `ci` suite judges it there)."""

from __future__ import annotations

import sys

import pytest
import torch
from moecert.kernels.triton_moe.interpret import load_interpreted_kernels

load_interpreted_kernels()  # before the kernel modules are bound below

from _gemm import run_moe_gemm  # noqa: E402
from moecert.kernels.triton_moe import configs, kinds  # noqa: E402
from moecert.kernels.triton_moe import fused_moe as fm  # noqa: E402

E, N, TOPK = 3, 64, 2


@pytest.fixture(autouse=True)
def _interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.delenv(configs.MXFP8_FOLD_ENV, raising=False)
    assert "moecert.kernels.triton_moe.fused_moe" in sys.modules


def _weights(K: int, gen, lo: int = 118, hi: int = 134):
    """e4m3 codes over the finite range (no NaN byte) and E8M0 bytes in [lo, hi]."""
    codes = torch.randint(0, 256, (E, N, K), dtype=torch.uint8, generator=gen)
    codes[(codes & 0x7F) == 0x7F] = 0x3C  # NaN bytes -> 1.5
    s = torch.randint(lo, hi + 1, (E, N, K // 32), dtype=torch.uint8, generator=gen)
    return codes.view(torch.float8_e4m3fn), s


def _describe(q, s, compute=torch.bfloat16):
    return fm.describe_weights(kinds.W_MXFP8, q, compute, s=s, scale_cols=32,
                               scale_kind=kinds.S_E8M0)


@pytest.mark.parametrize(("K", "unroll", "split_k", "swap"), [
    (192, 1, 1, False), (192, 4, 1, False), (256, 2, 2, True)],
    ids=["even", "unrolled-past-K", "split-swapped"])
def test_the_fold_gives_the_tile_scaled_bits(K, unroll, split_k, swap, monkeypatch):
    gen = torch.Generator().manual_seed(K + unroll + 7 * split_k)
    q, s = _weights(K, gen)
    a = torch.randn(7, K, generator=gen).to(torch.bfloat16)
    ids = torch.stack([torch.randperm(E, generator=gen)[:TOPK] for _ in range(7)]).reshape(-1)
    config = {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 32, "num_warps": 4, "num_stages": 2,
              "K_UNROLL": unroll, "SPLIT_K": split_k, "SWAP_AB": swap}
    plain = _describe(q, s)
    monkeypatch.setenv(configs.MXFP8_FOLD_ENV, "1")
    folded = _describe(q, s)
    assert not plain["e8m0_fold"] and folded["e8m0_fold"]
    assert not fm.acc_dot_applies(plain, kinds.A16, K)
    assert fm.acc_dot_applies(folded, kinds.A16, K)
    assert not fm.acc_dot_applies(folded, kinds.A_MX, K)  # MX activations: tile scales
    want = run_moe_gemm(plain, a, ids, config, E, TOPK)
    got = run_moe_gemm(folded, a, ids, config, E, TOPK)
    assert torch.isfinite(want).all() and want.abs().max() > 1
    assert torch.equal(got.view(torch.int32), want.view(torch.int32))


def test_a_wrong_scale_column_would_show():
    """The check above can fail: the same layer with one scale column changed moves the
    output (so a fold reading the wrong column is caught)."""
    gen = torch.Generator().manual_seed(3)
    q, s = _weights(128, gen)
    a = torch.randn(5, 128, generator=gen).to(torch.bfloat16)
    ids = torch.stack([torch.randperm(E, generator=gen)[:TOPK] for _ in range(5)]).reshape(-1)
    config = {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 32, "num_warps": 4, "num_stages": 2}
    shifted = s.clone()
    shifted[..., 1] += 1
    assert not torch.equal(run_moe_gemm(_describe(q, s), a, ids, config, E, TOPK),
                           run_moe_gemm(_describe(q, shifted), a, ids, config, E, TOPK))


@pytest.mark.parametrize(("lo", "hi", "folds"), [(10, 246, True), (9, 130, False),
                                                 (120, 247, False), (120, 255, False)])
def test_only_scales_whose_products_stay_normal_bf16_fold(lo, hi, folds, monkeypatch):
    monkeypatch.setenv(configs.MXFP8_FOLD_ENV, "1")
    q, s = _weights(64, torch.Generator().manual_seed(1), lo, lo)
    s[0, 0, 0], s[-1, -1, -1] = lo, hi
    assert _describe(q, s)["e8m0_fold"] == folds
    # e4m3's extremes times the extreme bytes: exact and normal in bf16 exactly when they fold
    for byte in (lo, hi):
        for v in (2.0**-9, 448.0):
            x = torch.tensor(v * 2.0 ** (byte - 127), dtype=torch.float64)
            normal = 2.0**-126 <= float(x) < 2.0**128
            assert not folds or (normal and float(x.to(torch.bfloat16)) == float(x))


def test_fp16_layers_and_the_default_keep_the_tile_scales(monkeypatch):
    q, s = _weights(64, torch.Generator().manual_seed(2))
    assert not _describe(q, s)["e8m0_fold"]  # unset: off
    monkeypatch.setenv(configs.MXFP8_FOLD_ENV, "1")
    assert not _describe(q, s, torch.float16)["e8m0_fold"]
    assert configs.mxfp8_fold({configs.MXFP8_FOLD_ENV: "1"})
    assert not configs.mxfp8_fold({configs.MXFP8_FOLD_ENV: "0"})
    with pytest.raises(ValueError, match="MOECERT_TRITON_MXFP8_FOLD='yes'"):
        configs.mxfp8_fold({configs.MXFP8_FOLD_ENV: "yes"})
