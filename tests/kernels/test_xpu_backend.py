"""XpuBackend (kernels/xpu.py): its N-first uint8 layout, bit-exact conversion, claims, and the
torch fallback's outputs against the float64 reference.

Output bound: the act dtype's unit roundoff (bf16 2^-8, fp16 2^-11), as for the torch backend
(tests/kernels/test_torch_backend.py explains it): the fallback shares its routing loop and
differs only in where the weights come from. Measured max: bf16 1.8e-3, fp16 2.2e-4.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from moecert.kernels import xpu
from moecert.kernels.errors import BackendError
from moecert.kernels.platform import Platform
from moecert.kernels.quant_config import Variant
from moecert.kernels.xpu import XpuBackend
from moecert.reference import MoEProblem, canonicalize, make_inputs, moe, synthesize
from moecert.reference.packing import pack_int32

BACKEND = XpuBackend()
UNIT_ROUNDOFF = {"bf16": 2.0**-8, "fp16": 2.0**-11}
FORMATS = [("gptq-int4", "gptq"), ("gptq-int4", "gptq_v2"), ("ct-int4", "ct-0.17"),
           ("ct-int4", "ct-0.18")]


def P(dtype="bf16", activation="silu", K=128, N=128, E=4, M=17, topk=2, **kw) -> MoEProblem:
    return MoEProblem(M=M, K=K, N=N, E=E, topk=topk, dtype=dtype, activation=activation, **kw)


def build(ckpt, problem):
    layer = BACKEND.create_layer(ckpt, problem)
    BACKEND.process_weights_after_loading(layer)
    return layer


@pytest.mark.parametrize("group_size", [-1, 32, 64, 128])
@pytest.mark.parametrize(("scheme", "fmt"), FORMATS, ids=[f for _, f in FORMATS])
def test_conversion_is_bit_exact(scheme, fmt, group_size):
    problem = P()
    ckpt = synthesize(scheme, problem, seed=5, checkpoint_format=fmt, group_size=group_size)
    layer = build(ckpt, problem)
    exported, want = BACKEND.canonical_weights(layer), canonicalize(ckpt)
    for p in ("w13", "w2"):
        assert torch.equal(exported[p].codes, want[p].codes)
        assert exported[p].zeros is None and want[p].zeros is None
        assert torch.equal(exported[p].scales, want[p].scales)
        assert tuple(exported[p].block) == tuple(want[p].block)
        assert exported[p].g_idx is None and want[p].g_idx is None


def _known_codes(E, n_out, n_in):
    e, o, k = torch.meshgrid(torch.arange(E), torch.arange(n_out), torch.arange(n_in),
                             indexing="ij")
    return ((3 * o + 5 * k + e) % 16).to(torch.int32)  # unsigned uint4b8 codes [E, out, in]


@pytest.mark.parametrize(("scheme", "fmt"), [("gptq-int4", "gptq_v2"), ("ct-int4", "ct-0.18")])
def test_layout_is_n_first_uint8_low_nibble_even_k(scheme, fmt):
    problem = P(K=64, N=32, E=2)
    ckpt = synthesize(scheme, problem, checkpoint_format=fmt, group_size=32)
    tensors = dict(ckpt.tensors)
    codes = {"w13": _known_codes(2, 64, 64), "w2": _known_codes(2, 64, 32)}
    for p, u in codes.items():
        if scheme == "gptq-int4":  # [E, in/8, out], packed along in
            tensors[f"{p}_qweight"] = pack_int32(u.transpose(1, 2), 4, dim=1)
        else:  # [E, out, in/8]
            tensors[f"{p}_weight_packed"] = pack_int32(u, 4, dim=2)
    layer = build(replace(ckpt, tensors=tensors), problem)
    for p, (n_out, n_in) in (("w13", (64, 64)), ("w2", (64, 32))):
        q = layer.get(f"{p}_xpu")
        assert q.dtype == torch.uint8 and tuple(q.shape) == (2, n_out, n_in // 2)
        assert torch.equal((q & 0xF).to(torch.int32), codes[p][:, :, 0::2])
        assert torch.equal((q >> 4).to(torch.int32), codes[p][:, :, 1::2])
        s = layer.get(f"{p}_xpu_scale")
        assert tuple(s.shape) == (2, n_out, n_in // 32)


CASES = {
    "gptq-v1-g-1-silu": ("gptq-int4", dict(checkpoint_format="gptq", group_size=-1), P()),
    "gptq-v2-g32-gelu-bias": ("gptq-int4", dict(checkpoint_format="gptq_v2", group_size=32),
                              P("fp16", "gelu", bias=True)),
    "ct17-g64-swigluoai-bias": ("ct-int4", dict(checkpoint_format="ct-0.17", group_size=64),
                                P(activation="swigluoai", bias=True)),
    "ct18-g128-fp16": ("ct-int4", dict(checkpoint_format="ct-0.18", group_size=128),
                       P("fp16")),
    "expert-map": ("gptq-int4", dict(group_size=32),
                   P(expert_map=(-1, 0, 1, -1, 2, -1, 3, -1), topk=3)),
    "router-on-input": ("ct-int4", dict(group_size=32),
                        P(topk=1, apply_router_weight_on_input=True, bias=True)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_fallback_matches_reference(case):
    scheme, attrs, problem = CASES[case]
    ckpt = synthesize(scheme, problem, seed=7, **attrs)
    layer = build(ckpt, problem)
    x, w, ids = make_inputs(problem, seed=8)
    y = BACKEND.apply(layer, x, w, ids)
    ref = moe(ckpt, x, w, ids, problem)
    err = ((y.double() - ref).norm() / ref.norm()).item()
    assert err <= UNIT_ROUNDOFF[problem.dtype], f"{case}: relative error {err:.3e}"


def test_zero_tokens():
    problem = P(M=0)
    layer = build(synthesize("gptq-int4", problem, group_size=32), problem)
    y = BACKEND.apply(layer, torch.empty(0, 128, dtype=torch.bfloat16), torch.empty(0, 2),
                      torch.empty(0, 2, dtype=torch.int32))
    assert y.shape == (0, 128)


REASONS = [
    ("awq-int4", dict(), P(),
     "scheme awq-int4 not supported (symmetric int4 GPTQ or compressed-tensors only)"),
    ("gptq-int8", dict(), P(),
     "scheme gptq-int8 not supported (symmetric int4 GPTQ or compressed-tensors only)"),
    ("fp8-w8a16", dict(), P(),
     "scheme fp8-w8a16 not supported (symmetric int4 GPTQ or compressed-tensors only)"),
    ("fp8-w8a8", dict(), P(),
     "scheme fp8-w8a8 not supported (symmetric int4 GPTQ or compressed-tensors only)"),
    ("gptq-int4", dict(sym=False), P(), "zero points not supported (symmetric int4 only)"),
    ("ct-int4", dict(act_order=True), P(), "act-order not supported"),
    ("gptq-int4", dict(), P(activation_format="batched"),
     "batched activation format not supported"),
    ("ct-int4", dict(group_size=-1), P(K=100), "int4 packing needs K % 8 == 0 and N % 8 == 0"),
    ("gptq-int4", dict(), P(activation="relu2"), "activation relu2 not supported"),
    ("gptq-int4", dict(), P(activation="swigluoai-split"),
     "activation swigluoai-split not supported"),
]


@pytest.mark.parametrize(("scheme", "attrs", "problem", "reason"), REASONS,
                         ids=[r[3] for r in REASONS])
def test_claim_reasons(scheme, attrs, problem, reason):
    quant = replace(Variant.defaults(scheme), **attrs)
    assert BACKEND.supports(quant, problem, Platform.xpu()) == reason


def test_claims_what_the_vendor_kernel_runs():
    for scheme in ("gptq-int4", "ct-int4"):
        for g in (-1, 32, 64, 128):
            for activation in ("silu", "gelu", "swigluoai"):
                for dtype in ("bf16", "fp16"):
                    quant = replace(Variant.defaults(scheme), group_size=g)
                    problem = P(dtype, activation, bias=True)
                    assert BACKEND.supports(quant, problem, Platform.xpu()) is None
    # the oracle decides where xpu is a candidate: claims do not depend on the platform
    assert BACKEND.supports("gptq-int4", P(), Platform.cuda((9, 0))) is None
    assert BACKEND.available() is None


def test_asymmetric_zeros_in_symmetric_file_rejected():
    problem = P()
    ckpt = synthesize("gptq-int4", problem, checkpoint_format="gptq_v2", group_size=32)
    z = ckpt.tensors["w2_qzeros"].clone()
    z[0, 0, 0] = (z[0, 0, 0] & ~0xF) | 3
    ckpt = replace(ckpt, tensors={**ckpt.tensors, "w2_qzeros": z})
    with pytest.raises(BackendError, match="w2_qzeros.*symmetric"):
        build(ckpt, problem)


def test_big_endian_host_rejected(monkeypatch):
    monkeypatch.setattr(xpu, "HOST_BYTE_ORDER", "big")
    problem = P()
    with pytest.raises(BackendError, match="little-endian"):
        build(synthesize("gptq-int4", problem, group_size=32), problem)
