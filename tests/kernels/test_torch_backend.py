"""TorchBackend (kernels/native.py) against the float64 reference `moe`.

Error measure: relative Frobenius error ||y - ref|| / ||ref|| of the whole output.

Bounds, and how they were measured (every case below with seeds 0..3, CPU, torch 2.13; the
maximum over seeds and cases of the relative error):
  * 16-bit activations (and mxfp8 activations, whose power-of-two scales are exact): the
    backend returns the act dtype, the reference float64, so rounding the output alone costs
    up to the unit roundoff u (bf16 2^-8 = 3.9e-3, fp16 2^-11 = 4.9e-4) per element; the
    float32 GEMMs and a rare one-ulp difference where h or act(h) is rounded to the act dtype
    are orders of magnitude below. Measured: bf16 1.8e-3, fp16 2.2e-4 (0.46 u), the same for
    every scheme (GPTQ, AWQ, compressed-tensors, int8, fp8, mxfp8, 16-bit). Bound: u.
  * e4m3 activations (fp8-w8a8: dynamic 1x128 groups, per token, static): the same
    rounding of the same float32 quotients as the reference's; a moved amax would re-round
    a row (at most an e4m3 step, 2^-3 relative, per element), none did. Measured (seeds 0,
    1, every strategy x mode, K=256/N=128 bf16 and K=160/N=96 fp16): bf16 1.8e-3, fp16
    2.2e-4, as 16-bit activations. Bound: u.
  * int8 activations (dynamic-token, dynamic-tensor, static-tensor; w4a8): a float32 vs
    float64 difference that rounds one element of h or act(h) to the neighbouring act-dtype
    value can move a row's (or the whole tensor's) amax, hence its int8 scale, and then codes
    of that row may land one int8 step (1/127 of the amax) elsewhere. Measured: bf16 3.9e-3,
    fp16 1.9e-3 (5.1e-3 in an exploratory run at M=33, K=256, N=128, E=8).
    Bound: 1/127 = 7.9e-3, one int8 step.
The planted-bug tests show that the bounds are tight enough: a w1/w3 scale swap (measured
8.6e-2), a zero point off by one (3.7e-2), a missing w2 bias (4.2e-2) and a wrong group
index (7.1e-1) each exceed 3x the bound.
"""

from __future__ import annotations

import pytest
import torch
from moecert.kernels import BackendError, NoBackendError, native, select_backend
from moecert.kernels.native import TorchBackend
from moecert.kernels.platform import Platform
from moecert.reference import (
    MoEProblem,
    canonicalize,
    make_batched_inputs,
    make_inputs,
    moe,
    synthesize,
)

UNIT_ROUNDOFF = {"bf16": 2.0**-8, "fp16": 2.0**-11}
INT8_STEP = 1 / 127
INT8_ACTIVATION_MODES = ("dynamic-token", "dynamic-tensor", "static-tensor")

BACKEND = TorchBackend()


def error_bound(problem: MoEProblem, ckpt) -> float:
    if ckpt.activation in INT8_ACTIVATION_MODES:
        return INT8_STEP
    return UNIT_ROUNDOFF[problem.dtype]


def relative_error(y: torch.Tensor, ref: torch.Tensor) -> float:
    ref_norm = ref.norm().item()
    return (y.double() - ref).norm().item() / (ref_norm if ref_norm else 1.0)


def build(scheme, problem, seed=0, **attrs):
    ckpt = synthesize(scheme, problem, seed=seed, **attrs)
    layer = BACKEND.create_layer(ckpt, problem)
    BACKEND.process_weights_after_loading(layer)
    return ckpt, layer


def run_case(scheme, problem, seed=0, **attrs) -> tuple[float, float]:
    """(relative error, bound) of the backend against the reference on random inputs."""
    ckpt, layer = build(scheme, problem, seed, **attrs)
    if problem.activation_format == "batched":
        x, counts = make_batched_inputs(problem, seed=seed + 1)
        y = BACKEND.apply(layer, x, None, None, expert_num_tokens=counts)
        ref = moe(ckpt, x, None, None, problem, expert_num_tokens=counts)
        padding = torch.arange(x.shape[1]) >= counts.unsqueeze(1)
        assert not y[padding].any(), "padding rows must come back zero"
    else:
        x, w, ids = make_inputs(problem, seed=seed + 1)
        y = BACKEND.apply(layer, x, w, ids)
        ref = moe(ckpt, x, w, ids, problem)
    assert y.dtype == problem.torch_dtype
    return relative_error(y, ref), error_bound(problem, ckpt)


def P(dtype="bf16", activation="silu", K=128, N=64, E=4, M=17, topk=2, **kw) -> MoEProblem:
    return MoEProblem(M=M, K=K, N=N, E=E, topk=topk, dtype=dtype, activation=activation, **kw)


# scheme, checkpoint attributes, problem: every scheme and option appears at least once, with
# activations, dtypes and biases spread over them
CASES = {
    # GPTQ v1 / v2, int4 / int8, sym / asym, every group size, act order
    "gptq-int4-v1-sym-g-1": ("gptq-int4", dict(checkpoint_format="gptq", group_size=-1),
                             P(bias=True)),
    "gptq-int4-v1-asym-g32-actorder": ("gptq-int4", dict(checkpoint_format="gptq", sym=False,
                                       group_size=32, act_order=True), P("fp16", "gelu")),
    "gptq-int4-v2-asym-g128": ("gptq-int4", dict(checkpoint_format="gptq_v2", sym=False,
                               group_size=128), P(activation="swigluoai", N=128, bias=True)),
    "gptq-int4-v2-sym-g64-actorder": ("gptq-int4", dict(checkpoint_format="gptq_v2",
                                      group_size=64, act_order=True), P("fp16", "relu2")),
    "gptq-int8-v1-asym-g64": ("gptq-int8", dict(checkpoint_format="gptq", sym=False,
                              group_size=64), P(M=33, bias=True)),
    "gptq-int8-v2-sym-g32-actorder": ("gptq-int8", dict(checkpoint_format="gptq_v2",
                                      group_size=32, act_order=True),
                                      P("fp16", "swigluoai-split")),
    # AWQ
    "awq-int4-asym-g32": ("awq-int4", dict(sym=False, group_size=32), P("fp16", bias=True)),
    "awq-int4-sym-g128": ("awq-int4", dict(sym=True, group_size=128), P(activation="gelu",
                                                                          N=128)),
    "awq-int4-asym-g-1": ("awq-int4", dict(sym=False, group_size=-1), P(activation="relu2")),
    # compressed-tensors 0.17 / 0.18
    "ct-int4-0.17-sym-g32": ("ct-int4", dict(checkpoint_format="ct-0.17", group_size=32),
                             P(bias=True)),
    "ct-int4-0.18-asym-g64-actorder": ("ct-int4", dict(checkpoint_format="ct-0.18", sym=False,
                                       group_size=64, act_order=True),
                                       P("fp16", "swigluoai")),
    "ct-int4-0.18-asym-g-1": ("ct-int4", dict(checkpoint_format="ct-0.18", sym=False,
                              group_size=-1), P(activation="gelu", bias=True)),
    "ct-int8-0.17-asym-g128-actorder": ("ct-int8", dict(checkpoint_format="ct-0.17",
                                        sym=False, group_size=128, act_order=True),
                                        P("fp16", N=128)),
    "ct-int8-0.18-sym-g64": ("ct-int8", dict(checkpoint_format="ct-0.18", group_size=64),
                             P(activation="relu2")),
    # W4A8: int4 weights, per-token int8 activations for both GEMMs
    "w4a8-awq-asym-g32": ("w4a8-int8", dict(checkpoint_format="awq", sym=False,
                          group_size=32), P(bias=True)),
    "w4a8-gptq-sym-g64": ("w4a8-int8", dict(checkpoint_format="gptq", group_size=64),
                          P("fp16", "swigluoai")),
    "w4a8-gptqv2-asym-g-1": ("w4a8-int8", dict(checkpoint_format="gptq_v2", sym=False,
                             group_size=-1), P(activation="gelu")),
    # 16-bit
    "bf16": ("bf16", {}, P(bias=True)),
    "fp16": ("fp16", {}, P("fp16", "gelu")),
    # int8 weights, 16-bit or int8 activations
    "int8-w8a16-channel": ("int8-w8a16", dict(weight_strategy="channel"), P()),
    "int8-w8a16-tensor": ("int8-w8a16", dict(weight_strategy="tensor"),
                          P("fp16", "swigluoai", bias=True)),
    "int8-w8a8-channel-token": ("int8-w8a8", dict(weight_strategy="channel",
                                activation="dynamic-token"), P(bias=True)),
    "int8-w8a8-tensor-static": ("int8-w8a8", dict(weight_strategy="tensor",
                                activation="static-tensor"), P("fp16", "gelu", bias=True)),
    "int8-w8a8-channel-dyntensor": ("int8-w8a8", dict(weight_strategy="channel",
                                    activation="dynamic-tensor"), P(activation="relu2")),
    "int8-w8a8-tensor-token": ("int8-w8a8", dict(weight_strategy="tensor",
                               activation="dynamic-token"), P("fp16", "swigluoai-split")),
    # fp8 weights: per-tensor (w1/w3 shard scales), channel, 128x128 blocks (partial ones)
    "fp8-tensor": ("fp8-w8a16", dict(weight_strategy="tensor"), P(bias=True)),
    "fp8-channel": ("fp8-w8a16", dict(weight_strategy="channel"), P("fp16", "gelu")),
    "fp8-block": ("fp8-w8a16", dict(weight_strategy="block"),
                  P(activation="swigluoai", K=192, N=96, bias=True)),
    # fp8 weights and e4m3 activations: DeepSeek blocks + 1x128 groups (a partial last
    # group at K = 160, N = 96), shard scales + static, channel + token
    "fp8-w8a8-block-group": ("fp8-w8a8", dict(weight_strategy="block",
                             activation="dynamic-group"), P(K=256, N=160, bias=True)),
    "fp8-w8a8-channel-group-partial": ("fp8-w8a8", dict(weight_strategy="channel",
                                       activation="dynamic-group"),
                                       P("fp16", "gelu", K=160, N=96)),
    "fp8-w8a8-tensor-static": ("fp8-w8a8", dict(weight_strategy="tensor",
                               activation="static-tensor"), P("fp16", "swigluoai", bias=True)),
    "fp8-w8a8-channel-token": ("fp8-w8a8", dict(weight_strategy="channel",
                               activation="dynamic-token"), P(activation="relu2")),
    # mxfp8 weights, 16-bit or mxfp8 activations with each E8M0 rule
    "mxfp8-a16": ("mxfp8", dict(activation="none"), P()),
    "mxfp8-floor": ("mxfp8", dict(activation="mxfp8", mx_scale_rule="floor"), P(bias=True)),
    "mxfp8-even": ("mxfp8", dict(activation="mxfp8", mx_scale_rule="even"), P("fp16", "gelu")),
    "mxfp8-ceil": ("mxfp8", dict(activation="mxfp8", mx_scale_rule="ceil"),
                   P(activation="swigluoai")),
    "mxfp8-rceil": ("mxfp8", dict(activation="mxfp8", mx_scale_rule="rceil"),
                    P("fp16", "relu2", bias=True)),
    # mxfp4 weights (gpt-oss: interleaved swigluoai, biases), 16-bit or mxfp8 activations
    "mxfp4-a16": ("mxfp4", dict(activation="none"), P(activation="swigluoai", bias=True)),
    "mxfp4-mxfp8": ("mxfp4", dict(activation="mxfp8"), P("fp16", "swigluoai-split")),
    # routing options
    "router-on-input-gptq": ("gptq-int4", dict(sym=False, group_size=32),
                             P(topk=1, apply_router_weight_on_input=True)),
    "router-on-input-int8": ("int8-w8a8", dict(activation="dynamic-token"),
                             P("fp16", topk=1, apply_router_weight_on_input=True, bias=True)),
    "expert-map-awq": ("awq-int4", dict(group_size=32),
                       P(expert_map=(0, -1, 1, -1, 2, -1, -1, 3), topk=3, bias=True)),
    "expert-map-fp8": ("fp8-w8a16", dict(weight_strategy="channel"),
                       P("fp16", expert_map=(-1, 3, -1, 2, 1, -1, 0, -1))),
    "expert-map-dyntensor": ("int8-w8a8", dict(activation="dynamic-tensor"),
                             P(expert_map=(0, -1, 1, -1, 2, -1, -1, 3))),
    # batched activation format (zeroed padding rows)
    "batched-gptq": ("gptq-int4", dict(sym=False, group_size=64),
                     P(activation_format="batched", M=9, bias=True)),
    "batched-dyntensor": ("int8-w8a8", dict(activation="dynamic-tensor"),
                          P("fp16", activation_format="batched", M=9)),
    "batched-fp8-group": ("fp8-w8a8", dict(activation="dynamic-group"),
                          P(activation_format="batched", M=9, K=256, N=128)),
    "batched-mxfp8": ("mxfp8", dict(activation="mxfp8"),
                      P(activation="swigluoai", activation_format="batched", M=9)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_matches_reference(case):
    scheme, attrs, problem = CASES[case]
    err, bound = run_case(scheme, problem, **attrs)
    assert err <= bound, f"{case}: relative error {err:.3e} > bound {bound:.3e}"


@pytest.mark.parametrize("fmt", ["standard", "batched"])
def test_no_tokens(fmt):
    problem = P(M=0, activation_format=fmt)
    _, layer = build("gptq-int4", problem, group_size=32)
    if fmt == "batched":  # every expert holds zero tokens
        x = torch.randn(problem.E, 3, problem.K).to(torch.bfloat16)
        out = torch.full_like(x, float("nan"))
        BACKEND.apply(layer, x, None, None, out=out,
                      expert_num_tokens=torch.zeros(problem.E, dtype=torch.int32))
        assert not out.any()
    else:
        x = torch.empty(0, problem.K, dtype=torch.bfloat16)
        y = BACKEND.apply(layer, x, torch.empty(0, 2), torch.empty(0, 2, dtype=torch.int32))
        assert y.shape == (0, problem.K)


def test_canonical_weights_match_reference():
    ckpt, layer = build("ct-int4", P(), sym=False, group_size=32, act_order=True)
    exported, want = BACKEND.canonical_weights(layer), canonicalize(ckpt)
    for p in ("w13", "w2"):
        assert torch.equal(exported[p].codes, want[p].codes)
        assert torch.equal(exported[p].zeros, want[p].zeros)
        assert torch.equal(exported[p].scales, want[p].scales)
        assert torch.equal(exported[p].g_idx, want[p].g_idx)


@pytest.mark.parametrize("platform", [Platform.cuda((7, 5)), Platform.cuda((9, 0)),
                                      Platform.rocm(), Platform.xpu(), Platform.cpu()],
                         ids=str)
def test_claims_every_scheme_everywhere(platform):
    problem = P(N=128)  # the default group size 128 divides K and N
    for scheme in ("bf16", "gptq-int8", "awq-int4", "ct-int4", "int8-w8a8", "fp8-w8a16",
                   "mxfp8", "w4a8-int8"):
        assert BACKEND.supports(scheme, problem, platform) is None, scheme


def test_impossible_shapes_are_the_oracles_to_refuse():
    """No gptq-int4 checkpoint has K = 100: the oracle says so before asking torch, and
    loading one anyway names the dimension."""
    with pytest.raises(NoBackendError, match="no checkpoint of it can hold this problem "
                       r"\(group_size: expected a group size dividing w13's input dimension"):
        select_backend("gptq-int4", P(K=100), Platform.cpu())
    ckpt = synthesize("gptq-int4", P(K=128), group_size=32)
    with pytest.raises(BackendError, match="group_size: expected a group size dividing w13's "
                       "input dimension 100, found 32"):
        BACKEND.create_layer(ckpt, P(K=100))


# --- planted bugs: each must push the error past the bound -------------------------------------

def _plant(monkeypatch, mutate):
    convert = native.convert_to_kernel_format

    def buggy(layer):
        convert(layer)
        mutate(layer)
    monkeypatch.setattr(native, "convert_to_kernel_format", buggy)


def _swap_shard_scales(layer):
    layer.put("w13_s", layer.get("w13_s").flip(1).contiguous())


def _zero_off_by_one(layer):
    layer.put("w13_zp", layer.get("w13_zp") + 1)


def _drop_w2_bias(layer):
    layer.drop("w2_bias")


def _shift_group_index(layer):
    g_idx = layer.get("w13_g_idx")
    layer.put("w13_g_idx", (g_idx + 1) % (int(g_idx.max()) + 1))


PLANTED = {
    "w1-w3-scale-swap": (_swap_shard_scales, "fp8-tensor"),
    "zero-point-off-by-one": (_zero_off_by_one, "gptq-int8-v1-asym-g64"),
    "missing-bias": (_drop_w2_bias, "ct-int4-0.17-sym-g32"),
    "wrong-group-index": (_shift_group_index, "gptq-int4-v1-asym-g32-actorder"),
}


@pytest.mark.parametrize("bug", list(PLANTED))
def test_planted_bug_exceeds_bound(bug, monkeypatch):
    mutate, case = PLANTED[bug]
    scheme, attrs, problem = CASES[case]
    _plant(monkeypatch, mutate)
    err, bound = run_case(scheme, problem, **attrs)
    assert err > 3 * bound, f"{bug}: error {err:.3e} within 3x the bound {bound:.3e}"


def test_e4m3_activation_quantizers_known_answers():
    """kernels/activations by hand: scale amax / 448 per unit, ties to even, saturation."""
    from moecert.kernels.activations import quantize_activation

    row = torch.zeros(2, 160)
    row[0, 0], row[0, 1], row[0, 128], row[0, 129] = 448.0, 17.0, 224.0, 8.5  # 2 groups
    row[1, 0], row[1, 1] = -896.0, 38.0  # scale 2: 19 is a tie, to 20
    group = quantize_activation(row, "dynamic-group", element="e4m3")
    want = row.clone()
    want[0, 1], want[0, 129], want[1, 1] = 16.0, 8.0, 40.0
    assert torch.equal(group, want)
    token = quantize_activation(row, "dynamic-token", element="e4m3")
    assert token[0, 129] == 8.0 and token[0, 1] == 16.0  # one scale for the row: 1
    static = quantize_activation(torch.tensor([[8.5, 300.0, -1e4]]), "static-tensor",
                                 torch.tensor([0.5]), element="e4m3")
    assert torch.equal(static, torch.tensor([[8.0, 224.0, -224.0]]))
    # a true tie of the ratio: x = 3/8 amax (amax = 61/64) is 168 -> 160, even
    tie = torch.zeros(1, 128)
    tie[0, 0], tie[0, 1] = 61 / 64, 3 / 8 * 61 / 64
    for mode in ("dynamic-group", "dynamic-token"):
        q = quantize_activation(tie, mode, element="e4m3")
        assert q[0, 1].item() == pytest.approx(160 * (61 / 64) / 448, rel=1e-6)


# MXFP4 activations (W4A4) by hand: e2m1 0, 0.5, 1, 1.5, 2, 3, 4, 6, ties to the even
# mantissa, saturating at 6, the exponent by the rule with e2m1's emax 2 (the numbers are
# derived in tests/kernels/test_triton_backend.py's MXFP4_KNOWN comment)
_MXFP4_BLOCKS = ([7.0, 5.0, 0.75, 0.25, 1.25, 2.5], [5.0, 1.5], [-12.5, -1.0])
_MXFP4_KNOWN = {
    "floor": ([6.0, 4.0, 1.0, 0.0, 1.0, 2.0], [4.0, 1.5], [-12.0, -1.0]),
    "even": ([8.0, 4.0, 1.0, 0.0, 1.0, 2.0], [4.0, 1.5], [-12.0, -1.0]),
    "ceil": ([8.0, 4.0, 1.0, 0.0, 1.0, 2.0], [4.0, 2.0], [-12.0, 0.0]),
    "rceil": ([8.0, 4.0, 1.0, 0.0, 1.0, 2.0], [4.0, 1.5], [-12.0, 0.0]),
}


@pytest.mark.parametrize("rule", sorted(_MXFP4_KNOWN))
def test_mxfp4_activation_quantizer_known_answers(rule):
    from moecert.kernels.activations import quantize_activation

    x = torch.zeros(1, 96)
    for b, values in enumerate(_MXFP4_BLOCKS):
        x[0, 32 * b:32 * b + len(values)] = torch.tensor(values)
    got = quantize_activation(x, "mxfp4", mx_rule=rule)
    for b, want in enumerate(_MXFP4_KNOWN[rule]):
        block = got[0, 32 * b:32 * (b + 1)]
        assert block[:len(want)].tolist() == want, (rule, b)
        assert not block[len(want):].any()
