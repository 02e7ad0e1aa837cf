"""GEMM1's activation in its epilogue (gemm_kernel's EPI_ACT) against GEMM1 then the
activation kernel, under the Triton interpreter: the same bits, every activation, weight
format, tile shape, split-K and routing format. The reference comparisons of every scheme
(test_triton_backend.py) run the fused path, the default; these pin that it is the unfused
path's arithmetic, so the fusion moves no verdict."""

from __future__ import annotations

import pytest
import torch
from moecert.kernels.triton_moe.interpret import load_interpreted_kernels

load_interpreted_kernels()  # before the kernel modules are bound below

from moecert.kernels.triton_moe import align, configs, fused_moe, kinds, quant  # noqa: E402
from moecert.kernels.triton_moe.backend import TritonBackend  # noqa: E402
from moecert.reference import (  # noqa: E402
    MoEProblem,
    make_batched_inputs,
    make_inputs,
    synthesize,
)

BACKEND = TritonBackend()
ACTIVATIONS = tuple(quant.ACTIVATIONS)


pytestmark = pytest.mark.usefixtures("interpreted")


def _run_layer(scheme, attrs, problem, fused: str, monkeypatch):
    monkeypatch.setenv(configs.FUSED_ACT_ENV, fused)
    ckpt = synthesize(scheme, problem, seed=1, **attrs)
    layer = BACKEND.create_layer(ckpt, problem)
    BACKEND.process_weights_after_loading(layer)
    if problem.activation_format == "batched":
        x, counts = make_batched_inputs(problem, seed=2)
        return BACKEND.apply(layer, x, None, None, expert_num_tokens=counts)
    x, w, ids = make_inputs(problem, seed=2)
    return BACKEND.apply(layer, x, w, ids)


SCHEMES = [
    ("bf16", "bf16", {}),
    ("gptq4-g64-asym", "gptq-int4", {"group_size": 64, "sym": False}),
    ("fp8w8a8-group", "fp8-w8a8", {}),
    ("int8w8a8-dyn-tensor", "int8-w8a8", {"activation": "dynamic-tensor"}),
    ("mxfp4", "mxfp4", {}),
    ("nvfp4-a4", "nvfp4", {"activation": "nvfp4"}),  # the w1 / w3 global multipliers
]
FORMATS = [
    ("standard", {}),
    ("expert-map", {"expert_map": (-1, 0, -1, 1, 2, -1, 3, -1), "topk": 3}),
    ("batched", {"activation_format": "batched", "M": 5}),
]


@pytest.mark.parametrize(("scheme", "attrs"), [c[1:] for c in SCHEMES],
                         ids=[c[0] for c in SCHEMES])
@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("over", [f[1] for f in FORMATS], ids=[f[0] for f in FORMATS])
def test_the_layer_gives_the_unfused_bits(scheme, attrs, activation, over, monkeypatch):
    problem = MoEProblem(**{"M": 7, "K": 128, "N": 192, "E": 4, "topk": 2, "bias": True,
                            "activation": activation, **over})
    unfused = _run_layer(scheme, attrs, problem, "0", monkeypatch)
    for order in configs.FUSED_ACT_ORDERS:
        fused = _run_layer(scheme, attrs, problem, order, monkeypatch)
        assert torch.isfinite(fused).all()
        assert torch.equal(fused, unfused), order


def _gemm1(weights, a, ids, config, activation, out_cols, pairs="halves"):
    sorted_ids, block_expert, num_padded = align.align_assignments(
        ids, weights["q"].shape[0], config["BLOCK_M"], n=ids.numel())
    c = torch.full((ids.numel(), out_cols), float("nan"), dtype=a.dtype)
    fused_moe.moe_gemm(a, None, None, weights, c, sorted_ids, block_expert, num_padded, None,
                       a_row_div=2, act=kinds.A16, config=config, activation=activation,
                       pairs=pairs)
    return c


TILES = {
    "plain": {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 32},
    "swapped": {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 32, "SWAP_AB": True},
    "split-k": {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 32, "SPLIT_K": 2},
    "wide": {"BLOCK_M": 32, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 4},
}


@pytest.mark.parametrize("pairs", configs.FUSED_ACT_ORDERS)
@pytest.mark.parametrize("tile", TILES)
@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_the_kernel_pairs_each_gate_row_with_its_up_row(tile, activation, pairs):
    """16-bit weights with a bias and a global multiplier per row half (so a row read at the
    wrong place shows), N = 40 intermediate columns: no tile width divides the halves, so
    the clamped, masked last tile is in every case."""
    E, K, N, M, topk = 3, 96, 40, 9, 2
    rows = N if activation == "relu2" else 2 * N
    g = torch.Generator().manual_seed(5)
    q = torch.randn(E, rows, K, generator=g).to(torch.bfloat16)
    bias = torch.randn(E, rows, generator=g)
    gscale = torch.rand(E, 2, generator=g) + 0.5
    weights = fused_moe.describe_weights(kinds.W16, q, torch.bfloat16, bias=bias,
                                         gscale=gscale)
    a = torch.randn(M, K, generator=g).to(torch.bfloat16)
    ids = torch.randint(0, E, (M * topk,), generator=g, dtype=torch.int32)
    config = configs.complete({**TILES[tile], "num_warps": 4, "num_stages": 2})
    h = _gemm1(weights, a, ids, config, None, rows)
    want = quant.activation(h, activation, N)
    got = _gemm1(weights, a, ids, config, activation, N, pairs)
    assert torch.isfinite(got).all()
    assert torch.equal(got, want)


@pytest.mark.parametrize("pairs", configs.FUSED_ACT_ORDERS)
def test_a_swapped_pairing_is_seen(pairs):
    """The comparison above can fail: the activation of the halves exchanged (what a kernel
    pairing up row j with gate row j would store) differs from the fused output."""
    E, K, N, M = 2, 64, 32, 4
    g = torch.Generator().manual_seed(6)
    q = torch.randn(E, 2 * N, K, generator=g).to(torch.bfloat16)
    weights = fused_moe.describe_weights(kinds.W16, q, torch.bfloat16)
    a = torch.randn(M, K, generator=g).to(torch.bfloat16)
    ids = torch.randint(0, E, (2 * M,), generator=g, dtype=torch.int32)
    config = configs.complete({**TILES["plain"], "num_warps": 4, "num_stages": 2})
    h = _gemm1(weights, a, ids, config, None, 2 * N)
    exchanged = quant.activation(torch.cat([h[:, N:], h[:, :N]], 1).contiguous(), "silu", N)
    assert not torch.equal(_gemm1(weights, a, ids, config, "silu", N, pairs), exchanged)


@pytest.mark.parametrize("entry", [None, True, False])
def test_a_tiles_fused_act_field_picks_the_path(entry, monkeypatch):
    """FUSED_ACT in GEMM1's config (a tuned file's entry) picks the path: absent or true the
    epilogue, false the activation kernel after GEMM1; the output is the same either way."""
    from moecert.kernels.triton_moe import heuristics

    pick = heuristics.pick_configs

    def picked(*a):
        c1, c2 = pick(*a)
        return ({**c1, "FUSED_ACT": entry} if entry is not None else c1), c2

    monkeypatch.setattr(heuristics, "pick_configs", picked)
    calls = []
    kernel = quant.activation
    monkeypatch.setattr(quant, "activation", lambda *a: calls.append(a) or kernel(*a))
    problem = MoEProblem(M=7, K=128, N=192, E=4, topk=2)
    out = _run_layer("bf16", {}, problem, "1", monkeypatch)
    assert len(calls) == (1 if entry is False else 0)
    monkeypatch.setattr(heuristics, "pick_configs", pick)
    assert torch.equal(out, _run_layer("bf16", {}, problem, "0", monkeypatch))


def test_the_fused_act_field_is_read_and_written_only_where_set(tmp_path):
    """A file's FUSED_ACT is read as a bool (another type is an error naming it), a config
    without it stays without it when completed for writing (the tuner's entries)."""
    import json

    base = {"BLOCK_N": 64, "BLOCK_K": 64, "num_warps": 4, "num_stages": 3, "SWAP_AB": False,
            "FAST_I4": False}
    layer = {"weight": "W16", "act": "A16", "experts": 4, "gemm1": [384, 128],
             "gemm2": [128, 192],
             "buckets": {"16": {"BLOCK_M": 16, "gemm1": {**base, "FUSED_ACT": False},
                                "gemm2": base}}}
    path = tmp_path / "dev.json"
    path.write_text(json.dumps({"format": 1, "device": "dev", "layers": [layer]}))
    ((_, buckets),) = configs.read_table(path).items()
    c1, c2 = buckets[16]
    assert c1["FUSED_ACT"] is False and "FUSED_ACT" not in c2
    assert "FUSED_ACT" not in configs.complete({"BLOCK_M": 16, **base})
    assert configs.complete(c1)["FUSED_ACT"] is False
    layer["buckets"]["16"]["gemm1"]["FUSED_ACT"] = "no"
    path.write_text(json.dumps({"format": 1, "device": "dev", "layers": [layer]}))
    with pytest.raises(configs.ConfigFileError, match="FUSED_ACT"):
        configs.read_table(path)


def _stage():
    from moecert.kernels.triton_moe import tune_stages

    problem = MoEProblem(M=7, K=128, N=192, E=4, topk=2)
    layer = BACKEND.create_layer(synthesize("gptq-int4", problem, seed=1, group_size=64),
                                 problem)
    BACKEND.process_weights_after_loading(layer)
    x, w, ids = make_inputs(problem, seed=2)
    return tune_stages.LayerStage(layer, x, w, ids)


@pytest.mark.parametrize(("fused_us", "want"), [(90.0, True), (100.0, True), (110.0, False)])
def test_the_tuner_fuses_the_activation_where_it_times_no_slower(fused_us, want):
    from moecert.kernels.triton_moe import tune

    stage = _stage()
    timed = []

    def timer(run, config):
        run()
        timed.append(config["FUSED_ACT"])
        return fused_us if config["FUSED_ACT"] else 100.0

    config = stage.defaults[0]
    assert tune.fused_act_choice(stage, config, timer) == {**config, "FUSED_ACT": want}
    assert sorted(timed) == [False, True]


def test_the_tuner_keeps_the_kernel_where_the_fused_bits_differ(monkeypatch):
    from moecert.kernels.triton_moe import tune

    stage = _stage()
    run = stage.run_activated

    def planted(config, fused):
        out = run(config, fused).clone()
        if fused:
            out[0, 0] += 1.0
        return out

    monkeypatch.setattr(stage, "run_activated", planted)
    config = stage.defaults[0]
    choice = tune.fused_act_choice(stage, config, lambda run, c: 50.0 if c["FUSED_ACT"] else 100.0)
    assert choice["FUSED_ACT"] is False


@pytest.mark.parametrize("block_n", [32, 64])
def test_block_scaled_rows_read_per_half_give_the_unfused_bits(block_n):
    """fp8 weights with 32 x 32 scale blocks: with the tile's halves each inside one block
    of scale rows the kernel reads each half's scale row once (SCALE_RUNS); the output is
    the unfused GEMM1's activation, bit for bit, in every tile of a 3-block-wide half."""
    E, K, N, M = 2, 64, 96, 6
    g = torch.Generator().manual_seed(7)
    q = (torch.randn(E, 2 * N, K, generator=g) * 4).to(torch.float8_e4m3fn)
    s = torch.rand(E, 2 * N // 32, K // 32, generator=g) + 0.25
    weights = fused_moe.describe_weights(kinds.W_FP8, q, torch.bfloat16, s=s, scale_rows=32,
                                         scale_cols=32)
    a = torch.randn(M, K, generator=g).to(torch.bfloat16)
    ids = torch.randint(0, E, (2 * M,), generator=g, dtype=torch.int32)
    config = configs.complete({"BLOCK_M": 16, "BLOCK_N": block_n, "BLOCK_K": 32,
                               "num_warps": 4, "num_stages": 2})
    assert fused_moe.scale_runs(weights, block_n, "silu", "halves")
    assert not fused_moe.scale_runs(weights, block_n, "silu", "adjacent")
    h = _gemm1(weights, a, ids, config, None, 2 * N)
    want = quant.activation(h, "silu", N)
    assert torch.equal(_gemm1(weights, a, ids, config, "silu", N), want)
