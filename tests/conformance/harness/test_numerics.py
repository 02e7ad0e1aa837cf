"""Declared numerics (conformance/harness/numerics.py): the readings a backend may declare, and the
harness judging a declared backend against that reading, tolerances unchanged: the
Marlin-style twin (every weight scale in the activation dtype, declared) passes the smoke
suite, and the planted bugs rebased onto it are still caught."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from moecert.conformance.harness.execute import run_cases
from moecert.conformance.harness.numerics import (
    NumericsError,
    declared,
    describe,
    effective,
    reading,
    reading_scheme,
)
from moecert.conformance.harness.suites import build_suite
from moecert.conformance.mutants import FLAGGED, MUTANTS, make_backend
from moecert.conformance.mutants.legit import MarlinScalesTwin
from moecert.kernels import Variant, register_backend
from moecert.kernels.registry import unregister_backend
from moecert.reference import MoEProblem, dequantize, make_inputs, moe, synthesize
from moecert.reference.schemes import get_scheme

P = MoEProblem(M=7, K=128, N=64, E=3, topk=2)


class _Declares:
    def __init__(self, value):
        self.value = value

    def numerics(self, layer):
        return self.value


@pytest.mark.parametrize("value,match", [
    ({"colour": "blue"}, "unknown keys"),
    ({"activation": "int8"}, "activation"),
    ({"weight_scale_dtype": "bf16"}, "weight_scale_dtype"),
    ({"w13_requantized": "yes"}, "w13_requantized"),
    ({"w13_requantized": 1}, "w13_requantized"),
    ({"bias_after_rounding": 1}, "bias_after_rounding"),
    (["activation"], "expected a dict"),
])
def test_a_declaration_the_harness_cannot_read_is_an_error_naming_it(value, match):
    with pytest.raises(NumericsError, match=match):
        declared(_Declares(value), None)


def test_no_hook_declares_nothing_and_what_the_scheme_says_is_dropped():
    assert declared(object(), None) == {}
    quant = Variant.of("bf16")
    # bf16 has no float weight scales, and "none" is its own activation mode
    assert effective({"activation": "none", "weight_scale_dtype": "bfloat16"}, quant) == {}
    assert describe({"weight_scale_dtype": "bfloat16", "activation": "dynamic-token"}) == \
        "activation=dynamic-token, weight_scale_dtype=bfloat16"


def test_weight_scale_dtype_rounds_the_scales_and_nothing_else():
    ckpt = synthesize("fp8-w8a16", P, seed=1, weight_strategy="channel")
    read = reading(ckpt, {"weight_scale_dtype": "bfloat16"})
    for name, t in ckpt.tensors.items():
        if name.endswith("weight_scale"):
            assert read.tensors[name].dtype == torch.bfloat16
            assert torch.equal(read.tensors[name], t.to(torch.bfloat16))
            assert not torch.equal(read.tensors[name].float(), t.float())  # really rounded
        else:
            assert read.tensors[name] is t
    assert ckpt.tensors["w13_weight_scale"].dtype == torch.float32  # not modified


@pytest.mark.parametrize("scheme,attrs", [("gptq-int4", {"group_size": 32}),
                                          ("awq-int4", {"group_size": 32}),
                                          ("ct-int4", {"sym": False, "group_size": 32})])
def test_int4_run_with_int8_activations_is_read_as_w4a8(scheme, attrs):
    ckpt = synthesize(scheme, P, seed=2, **attrs)
    numerics = {"activation": "dynamic-token"}
    assert reading_scheme(Variant.of(ckpt), numerics) == ("w4a8-int8", "dynamic-token")
    read = reading(ckpt, numerics)
    assert (read.scheme, read.activation) == ("w4a8-int8", "dynamic-token")
    # the same weights (compressed-tensors rewritten as gptq_v2 codes, scales, zeros, g_idx)
    for p in ("w13", "w2"):
        assert torch.equal(dequantize(read)[p], dequantize(ckpt)[p])
    x, w, ids = make_inputs(P, seed=3)
    w4a16, w4a8 = moe(ckpt, x, w, ids, P), moe(read, x, w, ids, P)
    assert not torch.equal(w4a16, w4a8)  # the int8 activations change the result


def test_bias_after_rounding_is_gpt_oss_definition_of_the_biased_linear():
    """gpt-oss's own MoE (OpenAI's gpt_oss/torch/model.py, MLPBlock.forward) computes each
    expert linear as a bf16 einsum and then adds the bf16 bias (`t += mlp2_bias`, after the
    tensor-parallel all-reduce): the product is rounded before the bias is added. Known
    answer: inter (4, 1) . w2 row (6, 0.0625) = 24.0625, a bf16 tie (step 0.125), rounds to
    24.0; + bias 0.0625 = 24.0625 rounds to 24.0 again. Product + bias rounded once: 24.125."""
    P1 = MoEProblem(M=1, K=32, N=32, E=1, topk=1, activation="relu2", bias=True)
    ckpt = synthesize("bf16", P1, seed=0)
    for t in ckpt.tensors.values():
        t.zero_()
    ckpt.tensors["w13_weight"][0, 0, 0] = 2.0  # h0 = 2 -> relu2 4
    ckpt.tensors["w13_weight"][0, 1, 0] = 1.0  # h1 = 1 -> relu2 1
    ckpt.tensors["w2_weight"][0, 0, :2] = torch.tensor([6.0, 0.0625])
    ckpt.tensors["w2_bias"][0, 0] = 0.0625
    x = torch.zeros(1, 32, dtype=torch.bfloat16)
    x[0, 0] = 1.0
    w, ids = torch.ones(1, 1), torch.zeros(1, 1, dtype=torch.int64)
    # OpenAI's formula in bf16 torch: einsum of the bf16 operands, then the bf16 bias added
    inter = torch.tensor([4.0, 1.0] + [0.0] * 30, dtype=torch.bfloat16)
    openai = torch.einsum("ck,k->c", ckpt.tensors["w2_weight"][0], inter)
    openai += ckpt.tensors["w2_bias"][0]
    read = reading(ckpt, {"bias_after_rounding": True})
    assert read.bias_after_rounding and not ckpt.bias_after_rounding
    assert read.tensors == ckpt.tensors  # the same tensors, read with the other arithmetic
    got = moe(read, x, w, ids, P1)
    assert float(got[0, 0]) == float(openai[0]) == 24.0
    assert float(moe(ckpt, x, w, ids, P1)[0, 0]) == 24.125  # one rounding: not gpt-oss's
    assert describe(effective({"bias_after_rounding": True}, Variant.of(ckpt))) == \
        "bias_after_rounding=True"
    # with the weights dequantized too (the transformers MXFP4 gpt-oss layer) it stays set
    assert reading(ckpt, {"bias_after_rounding": True,
                          "weights_dequantized": "float16"}).bias_after_rounding


def test_sum_in_activation_dtype_accumulates_expert_by_expert_in_bf16():
    """transformers' eager experts (every MoE model's modeling code) add each expert's
    weighted output, cast to bf16, into a bf16 buffer with index_add_, experts in increasing
    id. Known answer: expert outputs 1, 2^-8, 2^-8 (weights 1): 1 + 2^-8 is a bf16 tie and
    stays 1, twice; the exact sum 1 + 2^-7 is a bf16 value."""
    P3 = MoEProblem(M=1, K=32, N=32, E=3, topk=3, activation="relu2")
    ckpt = synthesize("bf16", P3, seed=0)
    for t in ckpt.tensors.values():
        t.zero_()
    ckpt.tensors["w13_weight"][:, 0, 0] = 1.0  # h0 = 1 -> relu2 1, every expert
    ckpt.tensors["w2_weight"][:, 0, 0] = torch.tensor([1.0, 2.0 ** -8, 2.0 ** -8])
    x = torch.zeros(1, 32, dtype=torch.bfloat16)
    x[0, 0] = 1.0
    w, ids = torch.ones(1, 3), torch.tensor([[2, 0, 1]])
    # transformers' formula: y_e (bf16) * weight (float32), cast to bf16, index_add_ in bf16
    buffer = torch.zeros(1, 32, dtype=torch.bfloat16)
    for e in range(3):
        y = (ckpt.tensors["w2_weight"][e][:, 0] * 1.0).unsqueeze(0)
        buffer.index_add_(0, torch.tensor([0]), (y * w[0, 0]).to(torch.bfloat16))
    read = reading(ckpt, {"sum_in_activation_dtype": True})
    assert read.sum_in_activation_dtype and not ckpt.sum_in_activation_dtype
    assert float(moe(read, x, w, ids, P3)[0, 0]) == float(buffer[0, 0]) == 1.0
    assert float(moe(ckpt, x, w, ids, P3)[0, 0]) == 1.0 + 2.0 ** -7  # the sum rounded once
    # a token routed twice to one expert: both terms added, one after the other
    twice = torch.tensor([[1, 1, 0]])
    assert float(moe(read, x, w, twice, P3)[0, 0]) == 1.0
    assert float(moe(ckpt, x, w, twice, P3)[0, 0]) == 1.0 + 2.0 ** -7


def test_w13_requantized_collapses_the_shard_scales_and_requantizes():
    ckpt = synthesize("fp8-w8a8", P, seed=4, weight_strategy="tensor", activation="static-tensor")
    s = ckpt.tensors["w13_weight_scale"]
    assert s.shape == (P.E, 2) and not torch.equal(s[:, 0], s[:, 1])
    read = reading(ckpt, {"w13_requantized": True})
    assert torch.equal(read.tensors["w13_weight_scale"], s.max(dim=1).values)
    before, after = dequantize(ckpt)["w13"], dequantize(read)["w13"]
    assert not torch.equal(before, after)  # a second rounding
    assert float((after - before).norm() / before.norm()) < 0.1
    with pytest.raises(NumericsError, match="w13_requantized"):
        reading(synthesize("fp8-w8a16", P, seed=4, weight_strategy="channel"),
                {"w13_requantized": True})


def _int8_shards(up_codes, up_scale, gate_scale=1.0):
    """An int8 per-tensor checkpoint whose expert 0 has the given gate scale (the larger),
    up codes (column 0, the rest 0) and up scale: a known requantization by hand."""
    ckpt = synthesize("int8-w8a8", P, seed=5, weight_strategy="tensor",
                      activation="static-tensor")
    w = torch.zeros_like(ckpt.tensors["w13_weight"])
    n = w.shape[1] // 2
    w[0, n:n + len(up_codes), 0] = torch.tensor(up_codes, dtype=w.dtype)
    s = torch.ones(P.E, 2, dtype=torch.float32)
    s[0] = torch.tensor([gate_scale, up_scale])
    return replace(ckpt, tensors={**ckpt.tensors, "w13_weight": w, "w13_weight_scale": s}), n


def test_w13_requantized_rounds_int8_codes_to_nearest_even_not_toward_zero():
    """vLLM's Quark int8 requantization (scaled_int8_quant: round to nearest even, clamped).
    The reading truncated before 2026-11-29 (a cast to int8): 26% of the real
    quark-int8-tensor folder's w13 codes one off, its vLLM rows red on the H200."""
    ckpt, n = _int8_shards([33, 35, -3, 127], 0.5)
    read = reading(ckpt, {"w13_requantized": True})
    assert read.tensors["w13_weight"][0, n:n + 4, 0].tolist() == [16, 18, -2, 64]
    ckpt, n = _int8_shards([-3, 7], 0.9)  # -2.7 and 6.3: truncation would give -2 and 6
    read = reading(ckpt, {"w13_requantized": True})
    assert read.tensors["w13_weight"][0, n:n + 2, 0].tolist() == [-3, 6]


def test_w13_requantized_through_float16_rounds_the_scale_and_the_shard_first():
    """vLLM on CUDA holds each dequantized shard in float16, the float32 scale cast to it
    first (per_tensor_dequantize), then divides by the larger scale in float32: code 17 at
    up scale 6.04835e-3 beside gate's 6.63432e-3 is 15.4985 exactly (15), 15.5018 through
    float16 (16): the H200's processed Quark int8 codes moved so (gpu_reduce.py int8-layer);
    the gate shard (the larger scale) is unchanged either way."""
    gate, up = 6.634322e-03, 0.006048345472663641
    ckpt, n = _int8_shards([17], up, gate)
    exact = reading(ckpt, {"w13_requantized": True})
    half = reading(ckpt, {"w13_requantized": "float16"})
    assert exact.tensors["w13_weight"][0, n, 0] == 15
    assert half.tensors["w13_weight"][0, n, 0] == 16
    assert torch.equal(half.tensors["w13_weight"][:, :n], ckpt.tensors["w13_weight"][:, :n])
    with pytest.raises(NumericsError, match="w13_requantized"):
        declared(_Declares({"w13_requantized": "float8"}), None)


def test_w13_requantized_leaves_one_scale_per_expert_as_it_is():
    """The exact tier's structured checkpoints hold one w13 scale per expert: a folder layer's
    declaration (its shards collapsed) reads them unchanged instead of refusing them (found by
    tox -e vllm on quark-int8-tensor-qwen3moe's exact rows)."""
    ckpt = synthesize("int8-w8a8", P, seed=5, weight_strategy="tensor",
                      activation="static-tensor")
    s = ckpt.tensors["w13_weight_scale"]
    if s.dim() == 2:
        s = s.max(dim=1).values
    one = replace(ckpt, tensors={**ckpt.tensors, "w13_weight_scale": s})
    assert one.tensors["w13_weight_scale"].shape == (P.E,)
    read = reading(one, {"w13_requantized": True})
    assert torch.equal(read.tensors["w13_weight"], one.tensors["w13_weight"])
    assert torch.equal(read.tensors["w13_weight_scale"], one.tensors["w13_weight_scale"])


# --- the harness on the twin ---------------------------------------------------------------

_FLOAT_SCALED = ("gptq-int4", "ct-int8", "int8-w8a16", "fp8-w8a16", "int8-w8a8")


def _on_twin(mutant_name: str):
    """The planted bug `mutant_name` rebased onto the declared twin."""
    cls = type(make_backend(MUTANTS[mutant_name]))
    twin = type(f"Twin{cls.__name__}", (cls, MarlinScalesTwin),
                {"name": f"twin+{mutant_name}"})
    return twin()


# torch-based mutants whose bug lives in a scheme with float weight scales
_REBASED = sorted(n for n, m in MUTANTS.items() if m.base == "torch" and any(
    get_scheme(s).scale_encoding == "float" for s in m.targets))


@pytest.fixture(scope="module")
def registered():
    names = []

    def add(backend):
        register_backend(backend)
        names.append(backend.name)
        return backend.name
    yield add
    for name in names:
        unregister_backend(name)


def _rows(backend: str, schemes, checks) -> list[dict]:
    return run_cases(build_suite("smoke", backends=[backend], schemes=list(schemes)),
                     checks=checks)


@pytest.fixture(scope="module")
def twin_rows(registered):
    registered(MarlinScalesTwin())
    # accuracy and canonical (its export holds the declared scales); every check of the
    # whole smoke suite passes on it in test_mutants.py (a LEGIT twin)
    return _rows(MarlinScalesTwin.name, _FLOAT_SCALED, ("accuracy", "canonical"))


def test_the_declared_twin_passes_and_its_rows_say_what_it_declared(twin_rows):
    flagged = [(r["case_id"], r["check"], r["message"][:120]) for r in twin_rows
               if r["status"] in FLAGGED]
    assert not flagged
    claimed = [r for r in twin_rows if r["check"] == "accuracy" and r["status"] == "pass"]
    declared_dtypes = {r["numerics"] for r in claimed}
    assert claimed and declared_dtypes <= {"weight_scale_dtype=bfloat16",
                                           "weight_scale_dtype=float16"}
    assert all("declared reading" in r["message"] for r in claimed)


@pytest.mark.parametrize("mutant", _REBASED)
def test_planted_bugs_rebased_on_the_declared_twin_are_still_caught(mutant, registered,
                                                                     twin_rows):
    m = MUTANTS[mutant]
    name = registered(_on_twin(mutant))
    schemes = [s for s in m.targets if get_scheme(s).scale_encoding == "float"]
    # the checks expected to catch the bug (the twin itself flags nothing on the whole
    # suite: test_mutants.py)
    # (exact builds structured checkpoints: seconds per case; the others see these bugs)
    checks = tuple(c for c in m.expected_checks if c != "exact")
    rows = _rows(name, schemes, checks)
    caught = [r for r in rows if r["status"] in FLAGGED]
    assert caught, f"{mutant} on the declared twin passed every check on {schemes}"
    # e.g. the all-scales x1.005 bug (half a percent, near the bf16 scale rounding the twin
    # declares) must still be caught by accuracy itself
    assert {r["check"] for r in caught} & set(checks)


@pytest.mark.parametrize("scheme,attrs", [("mxfp8", {"activation": "mxfp8"}),
                                          ("mxfp4", {"activation": "mxfp8"})])
def test_a_scheme_run_with_16_bit_activations_is_read_as_itself(scheme, attrs):
    """An MX checkpoint with MX activations that an engine runs with 16-bit activations is its
    own scheme with activation "none", never another scheme storing e4m3 / e2m1 codes with
    float scales (vLLM's Marlin on a GPU ran llm-compressor's MXFP8 folder so, and the reading
    was taken as fp8-w8a16's: "weight_strategy ... found 'group'")."""
    ckpt = synthesize(scheme, P, seed=2, **attrs)
    numerics = {"activation": "none"}
    assert reading_scheme(Variant.of(ckpt), numerics) == (scheme, "none")
    read = reading(ckpt, numerics)
    assert (read.scheme, read.activation) == (scheme, "none")
    for p in ("w13", "w2"):
        assert torch.equal(dequantize(read)[p], dequantize(ckpt)[p])


def test_activation_scale_pow2_quantizes_groups_with_scales_rounded_up_to_powers_of_two():
    """vLLM's per_token_group_quant_fp8 with DeepGEMM's UE8M0 (an H200, vLLM 0.25.1): each
    1 x 128 group's scale amax / 448 rounded up to a power of two. Known answer, computed here
    apart from the reference: the exponent from frexp, the codes by torch's e4m3 cast (RNE;
    |x / s| <= 448 needs no saturation)."""
    from moecert.reference.quantize import qdq_per_group

    g = torch.Generator().manual_seed(7)
    x = (torch.randn(5, 256, generator=g) * 3).to(torch.bfloat16).double()
    x[0, :128] *= 7 / x[0, :128].abs().max()  # amax 7: amax / 448 = 2^-6 exactly
    groups = x.view(5, 2, 128)
    mant, exp = torch.frexp(groups.abs().amax(-1, keepdim=True) / 448)
    s = torch.ldexp(torch.ones_like(mant), exp - (mant == 0.5).long())  # 2^ceil(log2)
    want = ((groups / s).to(torch.float8_e4m3fn).double() * s).view(5, 256)
    got = qdq_per_group(x, "e4m3", pow2=True)
    assert torch.equal(got, want)
    assert not torch.equal(got, qdq_per_group(x, "e4m3"))  # another reading than amax / 448
    # as a declared reading of a block-fp8 checkpoint: the moe of it is the pow2 one
    P2 = MoEProblem(M=6, K=256, N=256, E=3, topk=2)
    ckpt = synthesize("fp8-w8a8", P2, seed=1)
    assert ckpt.activation == "dynamic-group"
    read = reading(ckpt, {"activation": "dynamic-group", "activation_scale_pow2": True})
    assert read.activation_scale_pow2 and not ckpt.activation_scale_pow2
    xs, w, ids = make_inputs(P2, seed=1)
    assert not torch.equal(moe(read, xs, w, ids, P2), moe(ckpt, xs, w, ids, P2))


def test_activation_scale_pow2_needs_group_scales():
    class Backend:
        def numerics(self, layer):
            return {"activation": "dynamic-token", "activation_scale_pow2": True}

    with pytest.raises(NumericsError, match="activation_scale_pow2"):
        declared(Backend(), None)


def test_router_weight_in_activation_dtype_casts_the_weight_before_scaling_the_input():
    """vLLM's prepare steps scale the input by topk_weights.to(a1.dtype): known answer, x = 3
    and r = 0.3 (bf16 0.30078125): x * r.to(bf16) = 0.90234375 exactly, where 0.9 rounds to
    0.8984375; one expert whose output is its input's first element squared."""
    P1 = MoEProblem(M=1, K=32, N=32, E=2, topk=1, activation="relu2",
                    apply_router_weight_on_input=True)
    ckpt = synthesize("bf16", P1, seed=0)
    for t in ckpt.tensors.values():
        t.zero_()
    ckpt.tensors["w13_weight"][:, 0, 0] = 1.0  # h0 = x0, relu2 -> x0^2
    ckpt.tensors["w2_weight"][:, 0, 0] = 1.0
    x = torch.zeros(1, 32, dtype=torch.bfloat16)
    x[0, 0] = 3.0
    w, ids = torch.tensor([[0.3]]), torch.tensor([[0]])
    read = reading(ckpt, {"router_weight_in_activation_dtype": True})
    assert read.router_weight_in_activation_dtype and not ckpt.router_weight_in_activation_dtype
    cast = (x * w.to(torch.bfloat16)).double()  # what vLLM hands the experts
    exact = (x.double() * w.double()).to(torch.bfloat16).double()
    assert not torch.equal(cast, exact)  # the two readings differ on this input
    assert float(moe(read, x, w, ids, P1)[0, 0]) == float((cast[0, 0] ** 2).to(torch.bfloat16))
    assert float(moe(ckpt, x, w, ids, P1)[0, 0]) == float((exact[0, 0] ** 2).to(torch.bfloat16))


def test_gate_activation_in_activation_dtype_rounds_silu_before_the_product():
    """vLLM's CUDA silu_and_mul returns silu(gate) in the element type, then multiplies up
    (csrc/activation_kernels.cu): known answer on one expert whose gate is x0 and up x1,
    against torch's own silu in float64, rounded to bf16 before (declared) or after the
    product, on a pair of bf16 values where the two differ."""
    P1 = MoEProblem(M=1, K=32, N=32, E=2, topk=1, activation="silu")
    ckpt = synthesize("bf16", P1, seed=0)
    for t in ckpt.tensors.values():
        t.zero_()
    ckpt.tensors["w13_weight"][:, 0, 0] = 1.0   # gate row 0 = x0
    ckpt.tensors["w13_weight"][:, 32, 1] = 1.0  # up row 0 = x1
    ckpt.tensors["w2_weight"][:, 0, 0] = 1.0    # output 0 = intermediate 0
    read = reading(ckpt, {"gate_activation_in_activation_dtype": True})
    assert read.gate_activation_in_activation_dtype and not ckpt.gate_activation_in_activation_dtype

    def bf16(t):
        return t.to(torch.bfloat16).double()

    g, u = -1.703125, 9.5  # bf16 values (-1.7 rounded and 9.5)
    silu = torch.nn.functional.silu(torch.tensor(g, dtype=torch.float64))
    rounded_first, once = bf16(bf16(silu) * u), bf16(silu * u)
    assert rounded_first != once  # the pair separates the readings
    w, ids = torch.tensor([[1.0]]), torch.tensor([[0]])
    x = torch.zeros(1, 32, dtype=torch.bfloat16)
    x[0, 0], x[0, 1] = g, u
    assert float(moe(read, x, w, ids, P1)[0, 0]) == float(rounded_first)
    assert float(moe(ckpt, x, w, ids, P1)[0, 0]) == float(once)


def test_activation_fp8_float32_codes_e4m3_as_vllms_cuda_quantizers():
    """vLLM's scaled_fp8_quant computes the ratio in float32 from s = fl(amax / 448): per
    tensor x * fl(1 / s), per token x / s. Known answers where the exact ratio is the e4m3
    tie 168 (160 or 176) or 84 (80 or 88) and goes to even: amax 4.75, x = 3/8 amax lands
    above the tie by the reciprocal (176) and on it by the quotient (160); amax 7.75,
    x = 1.453125 lands above it by the quotient (88)."""
    from moecert.reference.moe import quantize_activation
    from moecert.reference.quantize import qdq_per_tensor, qdq_per_token

    def codes(q, amax):
        return (q / (torch.tensor(amax, dtype=torch.float32) / 448).double()).round().tolist()

    t = torch.tensor([[4.75, 1.78125, -1.78125]], dtype=torch.float64)
    assert (qdq_per_tensor(t, None, "e4m3") * 448 / 4.75).round().tolist() == [[448, 160, -160]]
    assert codes(qdq_per_tensor(t, None, "e4m3", fp8_float32=True), 4.75) == [[448, 176, -176]]
    assert codes(qdq_per_token(t, "e4m3", fp8_float32=True), 4.75) == [[448, 160, -160]]
    u = torch.tensor([[7.75, 1.453125]], dtype=torch.float64)
    assert (qdq_per_token(u, "e4m3") * 448 / 7.75).round().tolist() == [[448, 80]]
    assert codes(qdq_per_token(u, "e4m3", fp8_float32=True), 7.75) == [[448, 88]]
    assert qdq_per_token(u, fp8_float32=True).equal(qdq_per_token(u))  # int8: not this rule
    zero = torch.zeros(2, 3, dtype=torch.float64)
    assert not qdq_per_tensor(zero, None, "e4m3", fp8_float32=True).any()
    assert not qdq_per_token(zero, "e4m3", fp8_float32=True).any()
    ckpt = synthesize("fp8-w8a8", P, seed=6, activation="dynamic-tensor")
    read = reading(ckpt, {"activation_fp8_float32": True})
    assert read.activation_fp8_float32 and not ckpt.activation_fp8_float32
    assert quantize_activation(read, t, "w13").equal(
        qdq_per_tensor(t, None, "e4m3", fp8_float32=True))
    assert quantize_activation(ckpt, t, "w13").equal(qdq_per_tensor(t, None, "e4m3"))


def test_activation_round_half_away_codes_int8_tokens_as_vllms_quantizer():
    """vLLM's per_token_quant_int8 computes x * (127 / amax) in float32 and rounds half away
    from zero. Known answer: amax 254 makes the scale 2 and x = 1, 5, -1 exact ties 0.5, 2.5,
    -0.5 (half to even: 0, 2, 0; half away: 1, 3, -1)."""
    from moecert.reference.moe import quantize_activation
    from moecert.reference.quantize import qdq_per_token

    t = torch.tensor([[254.0, 1.0, 5.0, -1.0, 3.0]], dtype=torch.float64)
    assert qdq_per_token(t).tolist() == [[254.0, 0.0, 4.0, 0.0, 4.0]]
    assert qdq_per_token(t, half_away=True).tolist() == [[254.0, 2.0, 6.0, -2.0, 4.0]]
    assert qdq_per_token(t, "e4m3", half_away=True).equal(qdq_per_token(t, "e4m3"))
    ckpt = synthesize("int8-w8a8", P, seed=6)
    read = reading(ckpt, {"activation_round_half_away": True})
    assert read.activation_round_half_away and not ckpt.activation_round_half_away
    assert quantize_activation(read, t, "w13").equal(qdq_per_token(t, half_away=True))
    assert quantize_activation(ckpt, t, "w13").equal(qdq_per_token(t))
