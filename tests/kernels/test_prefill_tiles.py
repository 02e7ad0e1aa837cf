"""The prefill paths of the grouped GEMM (gemm_kernel's GROUP_M and ACC_DOT), under the Triton
interpreter, against the launch without them on the same inputs.

GROUP_M only remaps which program computes which tile: every tile is the same sum, so the
output must be the same bits, also with a last group narrower than GROUP_M and blocks past the
padded rows. ACC_DOT accumulates inside the dot and applies a one-column weight scale once at
the end instead of per tile: another fp32 order of the same products, so the output must stay
within `tune.reorder_bound` of the per-tile launch (and it is a planted bug, a scale left out,
that the comparison catches).
"""

from __future__ import annotations

import pytest
import torch
from _gemm import layer_stage, run_stage
from moecert.kernels.triton_moe.interpret import load_interpreted_kernels

load_interpreted_kernels()  # before the kernel modules are bound below

from moecert.kernels.triton_moe import fused_moe, gemm_kernel, tune  # noqa: E402
from moecert.reference import MoEProblem  # noqa: E402

pytestmark = pytest.mark.usefixtures("interpreted")


@pytest.fixture
def launches(spy_launches):
    """The kernel's launches: the ACC_DOT and GROUP_M of each."""
    return spy_launches("ACC_DOT", "GROUP_M")


def _stage(scheme, attrs=None, M=13, K=64, N=96, E=3):
    return layer_stage(scheme, MoEProblem(M=M, K=K, N=N, E=E, topk=2, bias=True), attrs)



def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int32 if t.element_size() == 4 else torch.int16)


@pytest.mark.parametrize("group_m", [2, 3, 8])
@pytest.mark.parametrize("scheme", ["bf16", "gptq-int4"])
def test_grouped_program_order_gives_the_same_bits(scheme, group_m, launches):
    """26 rows over 3 experts in 16-row blocks: 5-7 row blocks (the grid has room for 4
    more, which return), 3-6 column blocks of 32: groups of 2 and 3 leave a narrower last
    group, 8 is wider than the grid."""
    stage = _stage(scheme, {"group_size": 32} if scheme == "gptq-int4" else None)
    for gemm in (1, 2):
        config = {**stage.defaults[gemm - 1], "BLOCK_N": 32, "BLOCK_K": 32}
        launches.seen.clear()
        plain = run_stage(stage, gemm, config)
        grouped = run_stage(stage, gemm, {**config, "GROUP_M": group_m})
        assert [g for _, g in launches.seen] == [1, group_m]
        assert not plain.isnan().any()
        assert torch.equal(_bits(grouped), _bits(plain))


# (id, scheme, attributes, ACC_DOT expected)
CASES = [
    ("bf16", "bf16", {}, True),
    ("fp8-w8a16-channel", "fp8-w8a16", {"weight_strategy": "channel"}, True),
    ("fp8-w8a8-channel", "fp8-w8a8", {"weight_strategy": "channel",
                                      "activation": "dynamic-token"}, True),
    ("fp8-w8a8-block", "fp8-w8a8", {}, False),  # 128x128 weight blocks, 1x128 act groups
    ("int8-w8a16", "int8-w8a16", {}, True),
    ("gptq-int4-g32", "gptq-int4", {"group_size": 32}, False),  # a scale per K tile
]


@pytest.mark.parametrize(("scheme", "attrs", "expected"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_accumulating_dot_is_another_order_of_the_same_sum(scheme, attrs, expected,
                                                           launches, monkeypatch):
    stage = _stage(scheme, attrs, K=96)  # three 32-column tiles
    for gemm in (1, 2):
        config = {**stage.defaults[gemm - 1], "BLOCK_N": 32, "BLOCK_K": 32}
        launches.seen.clear()
        acc = run_stage(stage, gemm, config)
        assert launches.seen == [(expected, 1)]
        with monkeypatch.context() as m:
            m.setattr(fused_moe, "acc_dot_applies", lambda *a: False)
            per_tile = run_stage(stage, gemm, config)
        bound = tune.reorder_bound(per_tile, stage.magnitudes(gemm), stage.shape(gemm)[1])
        assert tune.disagreement(acc, per_tile, bound) is None
        if expected and stage.weights(gemm, config)["constexprs"]["WSCALE"]:
            # planted: the weight scale left out of the epilogue is caught
            with monkeypatch.context() as m:
                m.setattr(gemm_kernel, "_S_FLOAT", gemm_kernel.tl.constexpr(-1))
                unscaled = run_stage(stage, gemm, config)
            assert tune.disagreement(unscaled, per_tile, bound) is not None


def test_split_k_with_an_accumulating_dot_scales_once(launches):
    """Split-K's partial sums are unscaled with ACC_DOT; REDUCE's epilogue scales their sum."""
    stage = _stage("fp8-w8a16", {"weight_strategy": "channel"}, K=128)
    config = {**stage.defaults[0], "BLOCK_N": 32, "BLOCK_K": 32}
    whole = run_stage(stage, 1, config)
    split = run_stage(stage, 1, {**config, "SPLIT_K": 2})
    assert launches.seen[-2:] == [(True, 1), (True, 1)]
    bound = tune.reorder_bound(whole, stage.magnitudes(1), 128)
    assert tune.disagreement(split, whole, bound) is None


# --- MXFP4: E8M0 scales folded into the bf16 weights ------------------------------------------

class Scales:
    """A spy on the launches' WSCALE."""

    def __init__(self, kernel):
        self.kernel, self.seen = kernel, []

    def __getitem__(self, grid):
        def launch(*args, **kw):
            self.seen.append(kw["WSCALE"])
            return self.kernel[grid](*args, **kw)
        return launch


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_mxfp4_scales_fold_into_bf16_weights(dtype, monkeypatch):
    """bf16: the planes' E8M0 scales multiply the decoded values (S_E8M0_W) instead of the
    pairs' fp32 partial sums: exact products (a power of two inside the range E8M0_FOLD_MAX
    allows), the four plane sums added in another association, so within the reorder bound;
    fp16 (a narrower range) keeps the per-pair scales."""
    from moecert.kernels.triton_moe import kinds

    spy = Scales(gemm_kernel.moe_gemm_kernel)
    monkeypatch.setattr(gemm_kernel, "moe_gemm_kernel", spy)
    P = MoEProblem(M=9, K=128, N=128, E=3, topk=2, dtype=dtype)
    stage = layer_stage("mxfp4", P, seed=3)
    for gemm in (1, 2):
        config = stage.defaults[gemm - 1]
        weights = stage.weights(gemm, config)
        assert weights["constexprs"]["NIB_SPAN"]  # the planes this path needs
        assert weights["e8m0_fold"] == (dtype == "bf16")
        spy.seen.clear()
        folded = run_stage(stage, gemm, config)
        assert spy.seen == [kinds.S_E8M0_W if dtype == "bf16" else kinds.S_E8M0]
        weights["e8m0_fold"] = False
        try:
            paired = run_stage(stage, gemm, config)
        finally:
            weights["e8m0_fold"] = dtype == "bf16"
        assert spy.seen[-1] == kinds.S_E8M0
        assert not paired.isnan().any()
        bound = tune.reorder_bound(paired, stage.magnitudes(gemm), stage.shape(gemm)[1])
        assert tune.disagreement(folded, paired, bound) is None


def test_only_scales_inside_bf16s_normal_range_fold():
    """0.5 * 2^(2 - 127) is bf16's smallest normal and 6 * 2^(252 - 127) a finite bf16;
    bytes 0 and 1 (subnormal products), 253 (overflow) and 255 (NaN) keep the pair scales."""
    lo, hi = fused_moe.E8M0_FOLD_MIN, fused_moe.E8M0_FOLD_MAX
    s = torch.full((2, 4, 3), 127, dtype=torch.uint8)
    assert fused_moe.e8m0_folds(s)
    s[1, 2, 0], s[0, 1, 2] = hi, lo
    assert fused_moe.e8m0_folds(s)
    bf16 = torch.bfloat16
    assert torch.tensor(0.5 * 2.0 ** (lo - 127), dtype=bf16) >= torch.finfo(bf16).tiny
    assert torch.tensor(0.5 * 2.0 ** (lo - 1 - 127), dtype=bf16) < torch.finfo(bf16).tiny
    assert torch.isfinite(torch.tensor(6.0 * 2.0 ** (hi - 127), dtype=bf16))
    assert not torch.isfinite(torch.tensor(6.0 * 2.0 ** (hi + 1 - 127), dtype=bf16))
    for byte in (0, lo - 1, hi + 1, 255):
        planted = s.clone()
        planted[0, 0, 0] = byte
        assert not fused_moe.e8m0_folds(planted)
    assert not fused_moe.e8m0_folds(s.to(torch.float32))  # decoded scales: not bytes


@pytest.mark.parametrize(("scheme", "attrs"), [
    ("bf16", {}), ("fp8-w8a8", {"weight_strategy": "channel", "activation": "dynamic-token"}),
    ("gptq-int4", {"group_size": 32}), ("awq-int4", {"group_size": 32}), ("mxfp4", {}),
    ("nvfp4", {}), ("w4a8-int8", {"group_size": 32})],
    ids=["bf16", "fp8-w8a8", "gptq-int4", "awq-int4", "mxfp4", "nvfp4", "w4a8-int8"])
def test_the_default_prefill_tiles_give_the_decode_tiles_sum(scheme, attrs):
    """The prefill defaults a GPU launches (heuristics.pick_config with the layer's kinds:
    the 128-row tiles by operand width, nibble weights swapped at 64 rows) against the
    decode tile on the same inputs: another fp32 order of the same products at most (and int4
    with 16-bit activations, whose prefill tile's ONE_DOT rounds the weights, that rounding:
    `tune.candidate_bound`)."""
    from moecert.kernels.triton_moe import heuristics

    stage = _stage(scheme, attrs, M=40, K=128, N=96, E=2)  # 80 rows, 40 per expert
    kind = stage.plan["w13"]["kind"]
    prefill = heuristics.PREFILL_TILE_WIDE[16 if kind == heuristics.W16 else 8]
    tile = ({**heuristics.PREFILL_NIBBLE_TILE} if kind in (heuristics.W_INT4, heuristics.W_FP4)
            else {"BLOCK_M": 128, **prefill})
    for gemm in (1, 2):
        decode = run_stage(stage, gemm, stage.defaults[gemm - 1])
        wide = run_stage(stage, gemm, {**stage.defaults[gemm - 1], **tile})
        bound = tune.candidate_bound(stage, gemm, decode, stage.defaults[gemm - 1],
                                     {**stage.defaults[gemm - 1], **tile})
        assert not wide.isnan().any()
        assert tune.disagreement(wide, decode, bound) is None


# Rows per expert of the tail test, 162 assignments = 81 tokens x 2: in 64-row blocks expert
# 0's last block holds 16 rows, expert 1's 33, expert 2's 17, expert 3's 32: every level of
# a 64-row tile (64, 32, 16 rows) and both edges of the middle one
TAIL_COUNTS = (80, 33, 17, 32)


def _tail_stage(scheme, attrs):
    order = [e for e, count in enumerate(TAIL_COUNTS) for _ in range(count)]
    tokens = len(order) // 2
    ids = torch.tensor([[order[t], order[t + tokens]] for t in range(tokens)], dtype=torch.int32)
    assert (ids[:, 0] != ids[:, 1]).all()  # a token's two experts differ
    P = MoEProblem(M=tokens, K=64, N=64, E=len(TAIL_COUNTS), topk=2, bias=True)
    return layer_stage(scheme, P, attrs, seed=3, ids=ids)


@pytest.mark.parametrize("tail_m", [32, 16])
@pytest.mark.parametrize(("scheme", "attrs", "swap"), [
    ("bf16", {}, False), ("gptq-int4", {"group_size": 32}, True), ("mxfp4", {}, True),
    ("fp8-w8a8", {"weight_strategy": "channel", "activation": "dynamic-token"}, False)],
    ids=["bf16", "gptq-int4-swapped", "mxfp4-swapped", "fp8-w8a8"])
def test_an_experts_last_block_on_its_tail_tile_gives_the_whole_tiles_sum(scheme, attrs, swap,
                                                                          tail_m, spy_launches):
    """TAIL_M runs each expert's last block on the rows it holds (rounded up to 64, 32 or 16
    here), the rest of the layer on the whole 64-row tile: every row must come out (the
    output starts NaN) within the reorder bound of the whole tile's launch, and with the
    activation in GEMM1's epilogue the whole tile's bits."""
    launches = spy_launches("TAIL_M")
    stage = _tail_stage(scheme, attrs)
    tile = {**stage.defaults[0], "BLOCK_M": 64, "BLOCK_N": 32, "SWAP_AB": swap}
    for gemm in (1, 2):
        whole = run_stage(stage, gemm, {**tile, "TAIL_M": 0})
        tails = run_stage(stage, gemm, {**tile, "TAIL_M": tail_m})
        bound = tune.reorder_bound(whole, stage.magnitudes(gemm), stage.shape(gemm)[1])
        assert not tails.isnan().any()
        assert tune.disagreement(tails, whole, bound) is None
    whole = stage.run_activated({**tile, "TAIL_M": 0}, True).clone()
    stage._activated.fill_(float("nan"))  # a row no program writes stays NaN
    fused = stage.run_activated({**tile, "TAIL_M": tail_m}, True)
    assert not fused.isnan().any()
    # the interpreter sums each row's products the same whatever the tile's rows (numpy per
    # row; the GEMMs above came out bit-equal too): the same bits. (Against the activation
    # kernel it may differ by a unit even without tails: numpy's exp over other shapes. The
    # GPU test checks that instead: test_tail_tiles_cuda.py.)
    assert torch.equal(_bits(fused), _bits(whole))
    assert {seen[0] for seen in launches.seen} == {0, tail_m}


def test_the_tuner_climbs_to_a_tail_at_prefill_sizes_and_checks_it(monkeypatch):
    """The kernel run by the tuner on a layer at 64 rows per expert, a timer that prefers
    64-row tiles and 16-row tails: the search reaches that tile (the tails are in its grid
    there) and checks it against the default's output as every candidate."""
    from moecert.kernels.triton_moe import heuristics

    monkeypatch.delenv("MOECERT_TRITON_TAIL_M", raising=False)
    stage = _stage("bf16", M=64, K=64, N=64, E=2)  # 128 rows, 64 per expert

    def timer(run, config):
        run()
        return (100.0 - 10.0 * (config["BLOCK_M"] == 64)
                - 10.0 * (heuristics.tail_rows(config) == 16))

    choice = tune.tune_layer(stage, timer, {"BLOCK_N": (32, 64), "TAIL_M": (0, 16, 32, 64)})
    assert [(c["BLOCK_M"], heuristics.tail_rows(c)) for c in choice.configs] == [(64, 16)] * 2
    tried = [t for g in choice.gemms for t in g.tried]
    assert all(t.us is not None for t in tried)  # every tail's output within the bound
