"""gemm_kernel's ONE_DOT, under the Triton interpreter: a nibble-plane tile's four plane
products as one dot over the whole tile (`_cat4` stacks the decoded planes in K order, the
activations one load) against the four dots of K / 4 on the same inputs.

The same products in another fp32 order: both GEMMs must stay within `tune.reorder_bound` of
the four-dot launch, every row written (the output starts NaN); int4 with 16-bit activations,
whose one dot takes the scale into the decode and rounds each weight once to the compute
dtype, within that rounding's bound too (`tune.candidate_bound`). A plane stacked at another
plane's place in `_cat4`, or the activations' quarters loaded where the whole tile belongs,
multiplies the wrong columns: far outside the bound. Then the host's side: where ONE_DOT
applies and what sets it (fused_moe.one_dot_run), and the tuner's grid and file field.
"""

from __future__ import annotations

import pytest
from _gemm import layer_stage, run_stage, tuned_file
from moecert.kernels.triton_moe.interpret import load_interpreted_kernels

load_interpreted_kernels()  # before the kernel modules are bound below

from moecert.kernels.triton_moe import (  # noqa: E402
    backend,
    configs,
    fused_moe,
    heuristics,
    tune,
)
from moecert.reference import MoEProblem  # noqa: E402

pytestmark = pytest.mark.usefixtures("interpreted")

# (scheme, its attributes, dtype): FP4 planes scaled inside the decode (NVFP4's e4m3 scales,
# MXFP4's E8M0 folded into bf16), int4 planes (GPTQ; AWQ, whose zero points four dots take
# from the activation sums and one dot from the scale words) scaled inside the decode under
# one dot and after it under four, W4A8's int8 codes on the 16-bit dot (scaled after both)
PLANES = [("nvfp4", {}, "bf16"), ("mxfp4", {}, "bf16"),
          ("gptq-int4", {"group_size": 128}, "fp16"), ("awq-int4", {"group_size": 128}, "bf16"),
          ("w4a8-int8", {}, "bf16")]


def _stage(scheme, attrs, dtype, monkeypatch, M=21, K=256, N=128, E=3):
    monkeypatch.setenv("MOECERT_TRITON_NIB_SPAN", "128")  # int4 in planes (a GPU's layout)
    monkeypatch.delenv("MOECERT_TRITON_ONE_DOT", raising=False)
    P = MoEProblem(M=M, K=K, N=N, E=E, topk=2, bias=True, dtype=dtype)
    return layer_stage(scheme, P, attrs, seed=5)



@pytest.mark.parametrize("swap", [True, False], ids=["swapped", "unswapped"])
@pytest.mark.parametrize(("scheme", "attrs", "dtype"), PLANES, ids=[p[0] for p in PLANES])
def test_one_dot_is_another_order_of_the_four_plane_products(scheme, attrs, dtype, swap,
                                                              monkeypatch, spy_launches):
    stage = _stage(scheme, attrs, dtype, monkeypatch)
    launches = spy_launches("ONE_DOT")
    tile = {**stage.defaults[0], "BLOCK_M": 16, "BLOCK_N": 32, "SWAP_AB": swap}
    for gemm in (1, 2):
        assert fused_moe.one_dot_applies(stage.weights(gemm, tile), stage.act)
        _one_against_four(stage, gemm, tile)
    assert {seen[0] for seen in launches.seen} == {False, True}


def _one_against_four(stage, gemm, tile):
    """One dot within `tune.candidate_bound` of four on `tile`, every row written; where the
    one dot rounds the weights, to nearest: rounding toward zero (the interpreter's fp32 ->
    bf16 cast) shrinks every weight by u / 2 on average and the output with it, inside the
    bound but a systematic error, so the norms must agree within u / 8."""
    four_tile, one_tile = {**tile, "ONE_DOT": False}, {**tile, "ONE_DOT": True}
    four = run_stage(stage, gemm, four_tile)
    one = run_stage(stage, gemm, one_tile)
    assert not one.isnan().any()
    assert tune.disagreement(one, four, tune.candidate_bound(stage, gemm, four, four_tile,
                                                             one_tile)) is None
    if stage.weight_rounding(gemm, four_tile, one_tile):
        u = 2.0 ** -tune.MANTISSA_BITS[stage.plan["w13"]["compute"]]
        ratio = (one.double().norm() / four.double().norm()).item()
        assert abs(ratio - 1) < u / 8, f"norm ratio {ratio:.6f} (u = {u:.3g})"


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_one_dot_reads_zero_points_from_the_zero_tensor_too(dtype, monkeypatch):
    """AWQ without the scale words (ZERO_SUMS off: the zero points as their own tensor, which
    the one-dot decode then loads beside the scales): within the same bound of four dots."""
    stage = _stage("awq-int4", {"group_size": 128}, dtype, monkeypatch)
    tile = {**stage.defaults[0], "BLOCK_M": 16, "BLOCK_N": 32, "SWAP_AB": True,
            "ZERO_SUMS": False}
    for gemm in (1, 2):
        assert not fused_moe.zero_sums_run(stage.weights(gemm, tile), stage.act, tile)
        assert stage.weight_rounding(gemm, {**tile, "ONE_DOT": False}, {**tile, "ONE_DOT": True})
        _one_against_four(stage, gemm, tile)


def test_one_dot_applies_to_nibble_planes_only_and_follows_the_switch(monkeypatch):
    """Where the launch's ONE_DOT comes from: nothing outside nibble planes or on MXFP4's
    unfolded E8M0 halves (fp16: no fold); MOECERT_TRITON_ONE_DOT over any entry; else the
    entry's, else the default (FP4, and int4 with zero points and 16-bit activations, on the
    swapped prefill tile)."""
    fp4 = _stage("nvfp4", {}, "bf16", monkeypatch)
    unfolded = _stage("mxfp4", {}, "fp16", monkeypatch)
    wide = _stage("fp8-w8a8", {}, "bf16", monkeypatch)
    gptq = _stage("gptq-int4", {"group_size": 128}, "bf16", monkeypatch)
    w4a8 = _stage("w4a8-int8", {}, "bf16", monkeypatch)
    awq = _stage("awq-int4", {"group_size": 128}, "bf16", monkeypatch)
    prefill = {**heuristics.PREFILL_NIBBLE_TILE}
    decode = {**fp4.defaults[0], "BLOCK_M": 16}

    def runs(stage, config):
        return fused_moe.one_dot_run(stage.weights(1, config), stage.act, config)

    assert runs(fp4, prefill) and not runs(fp4, decode)
    assert runs(awq, prefill) and not runs(awq, {**awq.defaults[0], "BLOCK_M": 16})
    # the result column says where the weights round: AWQ's prefill tile, not GPTQ's
    assert "rounded to bfloat16 in the decode" in backend.describe(awq.layer)
    assert "in the decode" not in backend.describe(gptq.layer)
    assert not runs(gptq, prefill)  # symmetric int4: timed slower with one dot
    assert not runs(w4a8, prefill)  # int8 codes: scaled after the dot either way
    assert runs(w4a8, {**prefill, "ONE_DOT": True}) and not runs(fp4, {**prefill,
                                                                       "ONE_DOT": False})
    assert not runs(unfolded, {**prefill, "ONE_DOT": True})
    assert not runs(wide, {**wide.defaults[0], "ONE_DOT": True})
    monkeypatch.setenv("MOECERT_TRITON_ONE_DOT", "0")
    assert not runs(fp4, {**prefill, "ONE_DOT": True})
    monkeypatch.setenv("MOECERT_TRITON_ONE_DOT", "1")
    assert runs(fp4, decode) and not runs(unfolded, prefill)
    monkeypatch.setenv("MOECERT_TRITON_ONE_DOT", "yes")
    with pytest.raises(ValueError, match="MOECERT_TRITON_ONE_DOT='yes'"):
        runs(fp4, decode)


def test_the_tuner_tries_both_on_planes_from_the_default(monkeypatch):
    """The grid holds ONE_DOT for plane weights only, and the climb starts from the default's
    value: on the FP4 prefill tile (default one dot) a timer that prefers four dots steps to
    ONE_DOT false, a choice the file then records."""
    fp4 = _stage("nvfp4", {}, "bf16", monkeypatch, M=64, K=128, N=64, E=2)  # 64 rows an expert
    wide = _stage("fp8-w8a8", {}, "bf16", monkeypatch)
    assert fp4.weight_choices(1, fp4.defaults[0])["ONE_DOT"] == (False, True)
    assert "ONE_DOT" not in wide.weight_choices(1, wide.defaults[0])

    def timer(run, config):
        run()
        return 100.0 - 10.0 * (config.get("ONE_DOT") is False)

    choice = tune.tune_layer(fp4, timer, {"BLOCK_N": (64,), "num_stages": (2,)})
    assert [c.get("ONE_DOT") for c in choice.configs] == [False, False]
    assert all(configs.complete(c)["ONE_DOT"] is False for c in choice.configs)
    assert all(t.us is not None for g in choice.gemms for t in g.tried)


def _file(tmp_path, one_dot):
    return tuned_file(tmp_path, "W_FP4", 64, ONE_DOT=one_dot)


@pytest.mark.parametrize("one_dot", [False, True])
def test_a_files_one_dot_is_read_where_set(tmp_path, one_dot):
    ((_, buckets),) = configs.read_table(_file(tmp_path, one_dot)).items()
    c1, c2 = buckets[512]
    assert c1["ONE_DOT"] is one_dot and "ONE_DOT" not in c2  # absent: the default at launch
    assert configs.complete(c1)["ONE_DOT"] is one_dot and "ONE_DOT" not in configs.complete(c2)


@pytest.mark.parametrize("one_dot", [1, "true", None])
def test_a_files_one_dot_not_a_boolean_names_the_field(tmp_path, one_dot):
    with pytest.raises(configs.ConfigFileError, match="ONE_DOT"):
        configs.read_table(_file(tmp_path, one_dot))
