"""Properties of the reference MoE: each one is a way a kernel (or the oracle) can be wrong."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from moecert.reference import (
    CheckpointError,
    MoEProblem,
    dequantize,
    make_batched_inputs,
    make_inputs,
    moe,
    synthesize,
)
from moecert.reference.activations import apply_activation

SCHEMES = [
    ("bf16", {}),
    ("gptq-int4", {"group_size": 32, "sym": False}),
    ("awq-int4", {"group_size": 64}),
    ("int8-w8a8", {"activation": "dynamic-token"}),
    ("int8-w8a8", {"activation": "static-tensor"}),
    ("mxfp8", {"activation": "mxfp8"}),
]
IDS = [s + "-" + "-".join(f"{k}={v}" for k, v in kw.items()) for s, kw in SCHEMES]


def _problem(**kw) -> MoEProblem:
    base = dict(M=9, K=128, N=64, E=4, topk=2, bias=True)
    base.update(kw)
    return MoEProblem(**base)


def _loop_reference(ckpt, x, topk_weights, topk_ids, P):
    """A deliberately naive per-token, per-slot loop over dequantized weights (16-bit
    activation schemes only), to check the vectorized code's indexing and bias placement."""
    w = dequantize(ckpt)
    emap = P.expert_map
    out = torch.zeros(P.M, P.K, dtype=torch.float64)
    for t in range(P.M):
        for j in range(P.topk):
            e = int(topk_ids[t, j])
            e = emap[e] if emap is not None else e
            if e < 0:
                continue
            h = w["w13"][e] @ x[t].double() + w.get("w13_bias", torch.zeros(1, 1))[e]
            h = h.to(P.torch_dtype).double()
            a = apply_activation(h, P.activation).to(P.torch_dtype).double()
            y = w["w2"][e] @ a + w.get("w2_bias", torch.zeros(1, 1))[e]
            out[t] += float(topk_weights[t, j]) * y
    return out


@pytest.mark.parametrize("activation", ["silu", "gelu", "swigluoai", "swigluoai-split", "relu2"])
@pytest.mark.parametrize("scheme,kw", SCHEMES[:3], ids=IDS[:3])
def test_matches_naive_loop(scheme, kw, activation):
    P = _problem(activation=activation)
    ckpt = synthesize(scheme, P, seed=3, **kw)
    x, w, ids = make_inputs(P, seed=4, scale=3.0)  # scale 3: swigluoai's clamp is reached
    torch.testing.assert_close(moe(ckpt, x, w, ids, P), _loop_reference(ckpt, x, w, ids, P),
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("scheme,kw", SCHEMES, ids=IDS)
def test_expert_map_holes_contribute_nothing(scheme, kw):
    # 6 global experts, this rank holds 4 of them; tokens routed only to the 2 foreign
    # experts must come back exactly zero, and the rest equal a run on the local ids.
    emap = (2, -1, 0, 3, -1, 1)
    P = _problem(expert_map=emap)
    ckpt = synthesize(scheme, P, seed=5, **kw)
    x, w, ids = make_inputs(P, seed=6)
    ids[0] = torch.tensor([1, 4])  # token 0: foreign experts only
    y = moe(ckpt, x, w, ids, P)
    assert torch.equal(y[0], torch.zeros_like(y[0]))
    assert y[1:].abs().sum() > 0
    local = torch.tensor(emap)[ids.long()]
    keep = local >= 0
    P_local = dataclasses.replace(P, expert_map=None)
    w_local = torch.where(keep, w, torch.zeros_like(w))
    y_local = moe(ckpt, x, w_local, torch.where(keep, local, torch.zeros_like(local)), P_local)
    # not bitwise: the zero-weight stand-in rows change the GEMM's row count and BLAS blocking
    torch.testing.assert_close(y, y_local, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("scheme,kw", SCHEMES, ids=IDS)
def test_router_weight_on_input_equals_prescaling(scheme, kw):
    P = _problem(topk=1, apply_router_weight_on_input=True)
    ckpt = synthesize(scheme, P, seed=7, **kw)
    x, w, ids = make_inputs(P, seed=8)
    w = torch.rand(P.M, 1, generator=torch.Generator().manual_seed(1)) + 0.25  # not all 1
    scaled = (x.double() * w.double()).to(P.torch_dtype)
    plain = dataclasses.replace(P, apply_router_weight_on_input=False)
    expected = moe(ckpt, scaled, torch.ones_like(w), ids, plain)
    torch.testing.assert_close(moe(ckpt, x, w, ids, P), expected, rtol=0, atol=0)
    # and it is not the same as weighting the output (bias and nonlinearity see the scale)
    assert not torch.allclose(moe(ckpt, x, w, ids, plain), expected)


def test_router_weight_on_gemm1_output_scales_the_product_before_bias_and_rounding():
    """`router_weight_on_gemm1_output` (vLLM's fused_experts: GEMM1's MUL_ROUTED_WEIGHT
    epilogue): h = (x W13^T) r + b13 rounded, x itself neither scaled nor rounded, the output
    unweighted. Known answer written out for one expert route; it differs from x * r rounded
    first (the default reading of the router weight on the input)."""
    P = _problem(topk=1, apply_router_weight_on_input=True)
    ckpt = synthesize("bf16", P, seed=7)
    x, _, _ = make_inputs(P, seed=8)
    ids = torch.full((P.M, 1), 2, dtype=torch.int32)
    r = torch.rand(P.M, 1, generator=torch.Generator().manual_seed(1)) + 0.25
    w = dequantize(ckpt)
    h = ((x.double() @ w["w13"][2].T) * r.double() + w["w13_bias"][2]).to(P.torch_dtype)
    a = apply_activation(h.double(), P.activation).to(P.torch_dtype).double()
    dense = a @ w["w2"][2].T + w["w2_bias"][2]
    read = dataclasses.replace(ckpt, router_weight_on_gemm1_output=True)
    torch.testing.assert_close(moe(read, x, r, ids, P), dense, rtol=1e-12, atol=1e-12)
    assert not torch.allclose(moe(ckpt, x, r, ids, P), dense, rtol=1e-6, atol=0)


@pytest.mark.parametrize("scheme,kw", [s for s in SCHEMES if "dynamic-tensor" not in str(s)],
                         ids=[i for i in IDS if "dynamic-tensor" not in i])
def test_token_permutation_permutes_output(scheme, kw):
    P = _problem(M=17)
    ckpt = synthesize(scheme, P, seed=9, **kw)
    x, w, ids = make_inputs(P, seed=10)
    perm = torch.randperm(P.M, generator=torch.Generator().manual_seed(2))
    y = moe(ckpt, x, w, ids, P)
    torch.testing.assert_close(moe(ckpt, x[perm], w[perm], ids[perm], P), y[perm],
                               rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("scheme,kw", SCHEMES[:3], ids=IDS[:3])
def test_single_expert_route_is_dense_layer(scheme, kw):
    P = _problem(topk=1)
    ckpt = synthesize(scheme, P, seed=11, **kw)
    x, _, _ = make_inputs(P, seed=12)
    ids = torch.full((P.M, 1), 2, dtype=torch.int32)
    r = torch.full((P.M, 1), 0.75)
    w = dequantize(ckpt)
    h = (x.double() @ w["w13"][2].T + w["w13_bias"][2]).to(P.torch_dtype).double()
    a = apply_activation(h, P.activation).to(P.torch_dtype).double()
    dense = 0.75 * (a @ w["w2"][2].T + w["w2_bias"][2])
    torch.testing.assert_close(moe(ckpt, x, r, ids, P), dense, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("scheme,kw", [s for s in SCHEMES if "dynamic-tensor" not in str(s)],
                         ids=[i for i in IDS if "dynamic-tensor" not in i])
def test_batched_format_equals_standard_per_expert(scheme, kw):
    P = _problem(activation_format="batched", M=6)
    ckpt = synthesize(scheme, P, seed=13, **kw)
    xb, counts = make_batched_inputs(P, seed=14)
    counts[1] = 0  # an expert with no tokens
    yb = moe(ckpt, xb, None, None, P, expert_num_tokens=counts)
    std = dataclasses.replace(P, activation_format="standard", topk=1)
    for e in range(P.E):
        c = int(counts[e])
        assert torch.equal(yb[e, c:], torch.zeros_like(yb[e, c:]))
        if c == 0:
            continue
        Pe = dataclasses.replace(std, M=c)
        ids = torch.full((c, 1), e, dtype=torch.int32)
        ye = moe(ckpt, xb[e, :c], torch.ones(c, 1), ids, Pe)
        torch.testing.assert_close(yb[e, :c], ye, rtol=0, atol=0)


def test_quantized_activations_change_the_result():
    # q1/q2 must actually run: the W8A8 result differs from the same weights run as W8A16.
    P = _problem()
    a8 = synthesize("int8-w8a8", P, seed=15, activation="dynamic-token")
    a16 = dataclasses.replace(a8, scheme="int8-w8a16", activation="none")
    x, w, ids = make_inputs(P, seed=16)
    y8, y16 = moe(a8, x, w, ids, P), moe(a16, x, w, ids, P)
    rel = ((y8 - y16).norm() / y16.norm()).item()
    assert 1e-4 < rel < 5e-2


def test_m_zero():
    P = _problem(M=0)
    ckpt = synthesize("gptq-int4", P, seed=17, group_size=32)
    x, w, ids = make_inputs(P, seed=18)
    assert moe(ckpt, x, w, ids, P).shape == (0, P.K)


@pytest.mark.parametrize("bad,match", [
    (lambda x, w, i: (x[:, :-1], w, i), "hidden_states"),
    (lambda x, w, i: (x, w, i + 100), "topk_ids"),
    (lambda x, w, i: (x, w[:, :1], i), "topk_weights"),
    (lambda x, w, i: (x, w * float("nan"), i), "topk_weights"),
])
def test_bad_inputs_raise(bad, match):
    P = _problem()
    ckpt = synthesize("bf16", P, seed=19)
    with pytest.raises(CheckpointError, match=match):
        moe(ckpt, *bad(*make_inputs(P, seed=20)), P)


def test_problem_checkpoint_mismatch_raises():
    ckpt = synthesize("bf16", _problem(), seed=21)
    P = _problem(N=128)
    with pytest.raises(CheckpointError, match="w13"):
        moe(ckpt, *make_inputs(P), P)
    P = _problem(E=5)
    with pytest.raises(CheckpointError, match=r"w13_weight: expected shape \[5,"):
        moe(ckpt, *make_inputs(P), P)


def test_gate_activation_rounding_reads_act_gate_rounded_before_the_product():
    """`gate_activation_in_activation_dtype`: silu(gate) rounded to bf16, then times up, the
    product rounded (vLLM's CUDA silu_and_mul, csrc/activation_kernels.cu: its activation
    returns the element type); without it, silu(gate) * up rounded once. Known answer from
    torch's own silu in float64 on a pair of bf16 values where the two differ."""
    g, u = -1.703125, 9.5  # bf16 values (-1.7 rounded and 9.5)
    silu = torch.nn.functional.silu(torch.tensor(g, dtype=torch.float64))
    rounded_first, once = _bf16(_bf16(silu) * u), _bf16(silu * u)
    assert rounded_first != once  # the pair separates the readings
    h = torch.tensor([[g, u]], dtype=torch.float64)
    assert _bf16(apply_activation(h, "silu", round_gate=_bf16)[0, 0]) == rounded_first
    assert _bf16(apply_activation(h, "silu")[0, 0]) == once


def _bf16(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.bfloat16).to(torch.float64)
