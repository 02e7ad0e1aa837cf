"""Split-K in the grouped MoE GEMM (fused_moe, "Split-K"), under the Triton interpreter.

A split-K launch must agree with the one-launch kernel (SPLIT_K = 1) within what another
fp32 summation order can change: the tuner's own agreement test (tune.reorder_bound /
tune.disagreement), which every tuned split-K config must pass too. Shapes are chosen so
that every GEMM really splits (asserted), with a last split shorter than the others
(K = 384 at group 128: 256 + 128; K = 160 at BLOCK_K 128: 128 + 32, a partial tile).
"""

from __future__ import annotations

import sys

import pytest
import torch
from moecert.kernels.triton_moe.interpret import load_interpreted_kernels

load_interpreted_kernels()  # before the kernel modules are bound below

from moecert.kernels.triton_moe import (  # noqa: E402
    configs,
    gemm_kernel,
    heuristics,
    tune,
    tune_stages,
)
from moecert.kernels.triton_moe.backend import TritonBackend  # noqa: E402
from moecert.reference import MoEProblem, make_inputs, moe, synthesize  # noqa: E402

BACKEND = TritonBackend()


@pytest.fixture(autouse=True)
def _interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.delenv(configs.SPLIT_K_ENV, raising=False)
    assert "moecert.kernels.triton_moe.fused_moe" in sys.modules


# (id, scheme, checkpoint attributes, problem overrides)
CASES = [
    ("gptq4-g128", "gptq-int4", {"group_size": 128}, {"K": 384, "N": 256}),
    ("fp8w8a16-channel", "fp8-w8a16", {"weight_strategy": "channel"}, {"K": 160, "N": 160}),
    ("bf16", "bf16", {}, {"K": 160, "N": 160}),
]


class Launches:
    """A spy on the kernel's launches: the grid of each."""

    def __init__(self, kernel):
        self.kernel, self.grids = kernel, []

    def __getitem__(self, grid):
        self.grids.append(tuple(grid))
        return self.kernel[grid]


@pytest.fixture
def launches(monkeypatch):
    spy = Launches(gemm_kernel.moe_gemm_kernel)
    monkeypatch.setattr(gemm_kernel, "moe_gemm_kernel", spy)
    return spy


def _stage(scheme, attrs, over, M=2) -> tune_stages.LayerStage:
    """The GEMMs' stage, its default configs with 128 x 128 weight tiles: the interpreter's
    time goes by tiles (BLOCK_K 128 still splits K = 384 at group 128 as 256 + 128)."""
    P = MoEProblem(**{"M": M, "E": 2, "topk": 2, **over})
    layer = BACKEND.create_layer(synthesize(scheme, P, seed=1, **attrs), P)
    BACKEND.process_weights_after_loading(layer)
    x, w, ids = make_inputs(P, seed=2)
    stage = tune_stages.LayerStage(layer, x, w, ids)
    stage.defaults = tuple({**c, "BLOCK_N": 128, "BLOCK_K": 128} for c in stage.defaults)
    return stage


def _splits(stage, gemm, config) -> int:
    w = stage.plan["w13" if gemm == 1 else "w2"]
    return heuristics.weights_split_plan(w, config, stage.shape(gemm)[1], stage.act)[0]


@pytest.mark.parametrize("bias", [False, True], ids=["plain", "bias"])
@pytest.mark.parametrize(("scheme", "attrs", "over"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_split_k_agrees_with_one_launch(scheme, attrs, over, bias, launches):
    stage = _stage(scheme, attrs, {**over, "bias": bias})
    for g in (1, 2):
        one = stage.defaults[g - 1]
        reference = stage.run(g, one).clone()
        bound = tune.reorder_bound(reference, stage.magnitudes(g), stage.shape(g)[1])
        for split_k in (2, 8):  # 8: as many splits as K has units
            config = {**one, "SPLIT_K": split_k}
            splits = _splits(stage, g, config)
            assert splits >= 2, "the shape must split, or the test proves nothing"
            launches.grids.clear()
            out = stage.run(g, config)
            # a PARTIAL launch over every split, then the REDUCE launch without one
            assert [len(grid) for grid in launches.grids] == [3, 2]
            assert launches.grids[0][2] == splits
            why = tune.disagreement(out, reference, bound)
            assert why is None, f"GEMM{g} SPLIT_K={split_k} ({splits} splits): {why}"


def test_split_k_with_swapped_operands_agrees():
    stage = _stage("gptq-int4", {"group_size": 128}, {"K": 384, "N": 256, "bias": True}, M=1)
    for g in (1, 2):
        swapped = {**stage.defaults[g - 1], "SWAP_AB": True}
        reference = stage.run(g, swapped).clone()
        bound = tune.reorder_bound(reference, stage.magnitudes(g), stage.shape(g)[1])
        out = stage.run(g, {**swapped, "SPLIT_K": 2})
        assert tune.disagreement(out, reference, bound) is None


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int32 if t.element_size() == 4 else torch.int16)


def test_split_k_is_deterministic():
    """Two runs give the same bits, also after another split count left its own
    workspace contents behind."""
    stage = _stage("gptq-int4", {"group_size": 128}, {"K": 384, "N": 256, "bias": True})
    for g in (1, 2):
        config = {**stage.defaults[g - 1], "SPLIT_K": 4}
        first = _bits(stage.run(g, config).clone())
        stage.run(g, {**config, "SPLIT_K": 2})
        assert torch.equal(_bits(stage.run(g, config)), first)


@pytest.mark.parametrize(("K", "block_k", "split_k", "blocks", "want"), [
    (2048, 128, 4, (128,), (4, 512)),     # Qwen3 GEMM1, group 128
    (384, 64, 2, (128,), (2, 256)),       # aligned to the group, not only to BLOCK_K
    (384, 64, 8, (128,), (3, 128)),       # no more splits than groups
    (160, 64, 2, (160,), (2, 128)),       # per-channel scale (a block as wide as K)
    (160, 64, 4, (), (3, 64)),            # the last split is a partial tile
    (768, 128, 1, (128,), (1, 768)),      # SPLIT_K = 1: the whole K
    (192, 32, 4, (32, 128), (2, 128)),    # MX 32 columns and 1x128 activation groups
])
def test_split_plan(K, block_k, split_k, blocks, want):
    assert heuristics.split_plan(K, block_k, split_k, blocks) == want


def test_split_plan_covers_k_with_aligned_nonempty_splits():
    for K in range(16, 600, 16):
        for split_k in (1, 2, 3, 4, 8):
            splits, k_split = heuristics.split_plan(K, 32, split_k, (64,))
            assert k_split % (64 if K > 64 else 32) == 0 and splits <= split_k
            assert (splits - 1) * k_split < K <= splits * k_split
    with pytest.raises(ValueError, match="SPLIT_K must be >= 1"):
        heuristics.split_plan(128, 64, 0)


# --- forcing it: MOECERT_TRITON_SPLIT_K ----------------------------------------------------

def test_forced_split_k_reads_the_variable():
    assert configs.forced_split_k({}) is None
    assert configs.forced_split_k({configs.SPLIT_K_ENV: ""}) is None
    assert configs.forced_split_k({configs.SPLIT_K_ENV: "4"}) == 4
    for bad in ("3", "0", "two", "-2"):
        with pytest.raises(ValueError, match=rf"MOECERT_TRITON_SPLIT_K='{bad}': expected a "
                                             "power of two"):
            configs.forced_split_k({configs.SPLIT_K_ENV: bad})


def test_forced_split_k_runs_the_backend_split(monkeypatch, launches):
    """The harness's path: the whole layer with split-K forced on both GEMMs (a bias, GEMM2
    times the router weight) against the float64 reference, the triton backend tests'
    bound (bf16 unit roundoff, test_triton_backend's docstring)."""
    monkeypatch.setenv(configs.SPLIT_K_ENV, "2")
    P = MoEProblem(M=3, K=384, N=256, E=4, topk=2, bias=True)
    ckpt = synthesize("gptq-int4", P, seed=1, group_size=128)
    layer = BACKEND.create_layer(ckpt, P)
    BACKEND.process_weights_after_loading(layer)
    x, w, ids = make_inputs(P, seed=2)
    out = BACKEND.apply(layer, x, w, ids)
    assert [len(grid) for grid in launches.grids] == [3, 2, 3, 2]
    ref = moe(ckpt, x, w, ids, P)
    err = ((out.double() - ref).norm() / ref.norm()).item()
    assert err <= 2.0**-8, f"relative error {err:.3e}"


# --- the tuner --------------------------------------------------------------------------------

def test_split_k_grid_only_for_small_grids():
    grid = {"BLOCK_N": (64, 128), "SPLIT_K": (1, 2, 4, 8)}
    assert tune.split_k_grid(grid, programs=192, sm_count=132) == grid  # Qwen3 M=1 GEMM1
    assert tune.split_k_grid(grid, programs=264, sm_count=132)["SPLIT_K"] == (1,)
    assert tune.split_k_grid(grid, programs=8, sm_count=None)["SPLIT_K"] == (1,)  # no GPU


def test_split_k_grid_for_a_short_grid_with_a_thin_last_wave():
    """Mixtral-8x7B's GEMM2 at M = 1024 on its tuned 256-column tile: 304-320 programs, 2.3-2.4
    waves of an H200's 132 SMs (tools/i44_waves.py); split, the idle SMs of the last wave
    may work. A full last wave, or many waves, keep SPLIT_K 1."""
    grid = {"BLOCK_N": (128, 256), "SPLIT_K": (1, 2, 4)}
    assert tune.split_k_grid(grid, programs=320, sm_count=132) == grid  # 2.42 waves
    assert tune.split_k_grid(grid, programs=396, sm_count=132)["SPLIT_K"] == (1,)  # 3 full
    assert tune.split_k_grid(grid, programs=390, sm_count=132)["SPLIT_K"] == (1,)  # last 0.95
    assert tune.split_k_grid(grid, programs=1104, sm_count=132)["SPLIT_K"] == (1,)  # 8.4 waves
    assert tune.split_k_grid({"SPLIT_K": (1,)}, programs=320, sm_count=132) == {"SPLIT_K": (1,)}


def test_tuner_picks_a_split_that_agrees():
    """The real kernel on a 2-row stage (M = 1): with SMs to spare the climb tries SPLIT_K
    and keeps the (fake-)fastest; every split-K candidate passed the agreement test."""
    stage = _stage("gptq-int4", {"group_size": 128}, {"K": 384, "N": 256}, M=1)

    def timer(run, config):  # the agreement check has run the kernel already
        return 100.0 - 10 * config.get("SPLIT_K", 1)

    choice = tune.tune_layer(stage, timer, {"SPLIT_K": (1, 2, 4, 8)}, sm_count=132)
    tried = [t for g in choice.gemms for t in g.tried]
    assert all(t.us is not None for t in tried), [t.why for t in tried]
    assert {t.config.get("SPLIT_K", 1) for t in tried} >= {1, 2, 4}
    # GEMM1 (K 384): 3 groups, so 4 and 8 are one kernel; GEMM2 (K 256): 2 groups
    assert [c["SPLIT_K"] for c in choice.configs] == [4, 2]
    big = tune.tune_layer(stage, timer, {"SPLIT_K": (1, 2, 4, 8)}, sm_count=1)
    assert [c["SPLIT_K"] for c in big.configs] == [1, 1]
