"""GroupedBackend (kernels/grouped.py): bit for bit the reference on the exact tier's structured
inputs, the harness's accuracy check on random ones, its claims and reasons, and the pieces
a wrong grouping would break (offsets, the top-k sum, the bias split)."""

from __future__ import annotations

import pytest
import torch
from moecert.conformance.harness.cases import Case
from moecert.conformance.harness.exact import structured_inputs
from moecert.conformance.harness.execute import run_case
from moecert.kernels import get_backend, grouped
from moecert.kernels.quant_config import Variant
from moecert.reference import MoEProblem, moe
from moecert.reference.schemes import SCHEMES

BACKEND = get_backend("grouped")
BASE = {"M": 9, "K": 64, "N": 32, "E": 4, "topk": 2}


pytestmark = pytest.mark.usefixtures("one_thread")


def _q(scheme: str, **kw) -> Variant:
    return Variant(**{**Variant.defaults(scheme).__dict__, **kw})


def _attrs(q: Variant) -> dict:
    return {k: v for k, v in q.__dict__.items() if k != "scheme" and v is not None}


def _run(q: Variant, P: MoEProblem, seed: int, routing: str):
    """(structured inputs, the backend's output on them)."""
    s = structured_inputs(Case("grouped", q, P, seed=seed, routing=routing))
    layer = BACKEND.create_layer(s.checkpoint, P)
    BACKEND.process_weights_after_loading(layer)
    opts = {} if s.expert_num_tokens is None else {"expert_num_tokens": s.expert_num_tokens}
    return s, BACKEND.apply(layer, s.x, s.topk_weights, s.topk_ids, **opts)


def _first_difference(out: torch.Tensor, want: torch.Tensor) -> str | None:
    differs = out.view(torch.int16) != want.view(torch.int16)
    if not differs.any():
        return None
    i = tuple(differs.nonzero()[0].tolist())
    return f"{int(differs.sum())} of {differs.numel()} differ; out{list(i)} = {out[i].item()}, " \
           f"expected {want[i].item()}"


def _bit_difference(q: Variant, P: MoEProblem, seed: int = 3, routing: str = "random"
                    ) -> str | None:
    """Where the backend's output on structured inputs differs from the reference's, or None."""
    s, out = _run(q, P, seed, routing)
    want = moe(s.checkpoint, s.x, s.topk_weights, s.topk_ids, P,
               expert_num_tokens=s.expert_num_tokens).to(P.torch_dtype)
    return _first_difference(out, want)


# Every weight family the backend dequantizes, with the options the routing loop and the bias
# columns touch. With top-k > 1 the backend rounds each assignment's output to the act dtype
# before the weighted sum (vLLM's fused MoE rounds there too): the structure keeps every expert
# output exact in the act dtype, so that rounding is a no-op (a bias, relu2, swigluoai).
EXACT = [
    (_q("bf16"), {}),
    (_q("fp16"), {"dtype": "fp16", "activation": "gelu"}),
    (_q("bf16"), {"K": 36, "N": 20}),  # K, N off 16 bytes: padded
    (_q("bf16"), {"activation_format": "batched", "activation": "relu2", "bias": True}),
    (_q("gptq-int4", sym=False, act_order=True, group_size=32),
     {"topk": 1, "apply_router_weight_on_input": True, "activation": "swigluoai"}),
    (_q("awq-int4", group_size=32), {"expert_map": (0, -1, 1, -1, 2, 3)}),
    (_q("ct-int8", group_size=-1), {"dtype": "fp16", "activation": "swigluoai-split"}),
    (_q("int8-w8a16", weight_strategy="tensor"), {"topk": 1, "bias": True,
                                                  "apply_router_weight_on_input": True}),
    (_q("fp8-w8a16", weight_strategy="block"), {"K": 256, "N": 256}),
    (_q("fp8-w8a16", weight_strategy="channel"), {"activation_format": "batched",
                                                  "bias": True}),
    (_q("mxfp8"), {"topk": 1, "bias": True, "apply_router_weight_on_input": True,
                   "dtype": "fp16"}),
    # top-k > 1 with outputs the old structure gave more bits than the act dtype holds
    (_q("bf16"), {"bias": True}),
    (_q("awq-int4", group_size=32), {"activation": "relu2", "bias": True, "topk": 4}),
    (_q("fp8-w8a16"), {"activation": "swigluoai", "bias": True,
                       "expert_map": (0, -1, 1, -1, 2, 3)}),
    (_q("mxfp4"), {"activation": "swigluoai", "bias": True, "topk": 4}),
    (_q("gptq-int4", group_size=32), {"activation": "relu2", "bias": True, "dtype": "fp16"}),
    (_q("bf16"), {"activation": "swigluoai", "bias": True, "dtype": "fp16", "topk": 4}),
]


@pytest.mark.parametrize("q, options", [pytest.param(q, o, id=f"{q.describe()}-{i}")
                                        for i, (q, o) in enumerate(EXACT)])
def test_structured_inputs_bit_for_bit(q, options):
    P = MoEProblem(**{**BASE, **options})
    assert BACKEND.supports(q, P) is None
    assert _bit_difference(q, P) is None


def test_offsets_one_expert_off_are_caught(monkeypatch):
    """The grouping itself is checked: offsets shifted by one expert (each expert's rows end
    where the previous one's did) change the output."""
    q, P = _q("bf16"), MoEProblem(**BASE)
    assert _bit_difference(q, P, routing="skewed") is None
    real = grouped.expert_offsets

    def one_expert_off(expert_sorted, E):
        offs = real(expert_sorted, E)
        return torch.cat([offs.new_zeros(1), offs[:-1]]) if E > 1 else offs

    monkeypatch.setattr(grouped, "expert_offsets", one_expert_off)
    assert _bit_difference(q, P, routing="skewed") is not None


def test_expert_offsets():
    experts = torch.tensor([0, 0, 2, 2, 2, 3])
    assert grouped.expert_offsets(experts, 5).tolist() == [2, 2, 5, 6, 6]
    assert grouped.expert_offsets(experts, 5).dtype == torch.int32


def test_topk_sum_adds_each_tokens_assignments():
    gen = torch.Generator().manual_seed(0)
    token = torch.tensor([3, 0, 3, 1, 0, 3])  # token 2 has none, token 3 three
    y = torch.randn(6, 5, generator=gen)
    want = torch.zeros(4, 5, dtype=torch.float64).index_add_(0, token, y.double())
    got = grouped.topk_sum(y, token, rows=4, slots=3)
    assert torch.allclose(got.double(), want, rtol=0, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_bias_parts_sum_to_the_bias(dtype):
    """The GEMM adds the parts in float32: they must hold the float32 bias (bf16 exactly; fp16,
    with its narrow exponent, to float32's last bits at this magnitude)."""
    bias = torch.randn(1000, generator=torch.Generator().manual_seed(1)) * 3
    parts = grouped.split_bias(bias, dtype)
    assert parts.shape == (1000, grouped.BIAS_PARTS) and parts.dtype == dtype
    total = parts.double().sum(-1)
    err = float((total - bias.double()).abs().max())
    assert err == 0 if dtype == torch.bfloat16 else err <= 2.0**-24


@pytest.mark.parametrize("scheme, options", [
    ("gptq-int4", {"bias": True}),
    ("fp8-w8a16", {"bias": True, "activation": "swigluoai", "dtype": "fp16"}),
    ("bf16", {"expert_map": (0, -1, 1, -1, 2, -1, 3, -1), "bias": True}),
])
def test_harness_accuracy_on_random_inputs(scheme, options):
    """Random weights and inputs, judged by the harness's own accuracy check and table."""
    P = MoEProblem(**{"M": 17, "K": 128, "N": 128, "E": 4, "topk": 2, **options})
    rows = run_case(Case("grouped", scheme, P, seed=5), checks=["accuracy"])
    accuracy = [r for r in rows if r["check"] == "accuracy"]
    assert accuracy and all(r["status"] == "pass" for r in accuracy), accuracy


@pytest.mark.parametrize("q, reason", [
    (_q("int8-w8a8"), "activation quantization dynamic-token not supported"),
    (_q("int8-w8a8", activation="static-tensor"), "static-tensor not supported"),
    (_q("w4a8-int8"), "dynamic-token not supported"),
    (_q("mxfp8", activation="mxfp8"), "activation quantization mxfp8 not supported"),
])
def test_declines_quantized_activations(q, reason):
    why = BACKEND.supports(q, MoEProblem(**BASE))
    assert why is not None and reason in why and "torch._scaled_grouped_mm" in why


def test_claims_every_16_bit_activation_variant():
    P = MoEProblem(**{**BASE, "activation_format": "batched", "bias": True})
    from moecert.reference.schemes.tensors import tensor_name

    claimed = [s for s in SCHEMES if BACKEND.supports(_q(s), P) is None]
    # but a format whose layer scales its GEMM input (ModelOpt INT4 AWQ's pre_quant_scale),
    # which this backend does not apply: declined, saying so
    pre_scaled = [s for s in SCHEMES if tensor_name(_q(s), "w13", "pre_quant_scale")]
    assert claimed == [s for s in SCHEMES if Variant.defaults(s).activation == "none"
                       and s not in pre_scaled]
    for s in pre_scaled:
        assert "pre_quant_scale" in BACKEND.supports(_q(s), P)


def test_16_bit_weights_are_read_in_place():
    """No second copy of a 16-bit layer whose weights already are the GEMM operand; a bias or
    a dtype change makes one."""
    from moecert.reference import synthesize

    for options, copied in (({}, False), ({"bias": True}, True), ({"dtype": "fp16"}, True)):
        P = MoEProblem(**{**BASE, **options})
        layer = BACKEND.create_layer(synthesize("bf16", P, seed=0), P)
        BACKEND.process_weights_after_loading(layer)
        assert layer.has("w13_mm") is copied, options
        assert grouped.gemm_weight(layer, "w13").dtype == P.torch_dtype


def test_weights_beyond_the_act_dtype_are_refused():
    """A bf16 weight past fp16's range under fp16 activations would be inf in the operand."""
    from moecert.kernels import BackendError
    from moecert.reference import synthesize

    P = MoEProblem(**{**BASE, "dtype": "fp16"})
    ckpt = synthesize("bf16", P, seed=0)
    ckpt.tensors["w2_weight"][1, 3, 5] = 1e6
    layer = BACKEND.create_layer(ckpt, P)
    with pytest.raises(BackendError, match="w2 weights of expert 1: expected values that fit "
                                           "torch.float16"):
        BACKEND.process_weights_after_loading(layer)
