"""Malformed checkpoints raise CheckpointError naming the tensor (or attribute) at fault.

Each case starts from a well-formed synthesized checkpoint (which must dequantize) and breaks
one thing in it.
"""

from __future__ import annotations

import math
import re
from dataclasses import replace

import pytest
import torch
from moecert.reference.canonical import CanonicalLinear
from moecert.reference.checkpoint import Checkpoint
from moecert.reference.dequantize import dequantize
from moecert.reference.errors import CheckpointError
from moecert.reference.layouts import write_linear
from moecert.reference.problem import MoEProblem
from moecert.reference.synthesize import synthesize

P = MoEProblem(M=1, K=64, N=32, E=2, topk=1)

# name -> (scheme, attrs); every one of these dequantizes as synthesized
BASES = {
    "gptq": ("gptq-int4", dict(group_size=32, sym=False, checkpoint_format="gptq")),
    "gptq-sym": ("gptq-int4", dict(group_size=32, sym=True, checkpoint_format="gptq_v2")),
    "gptq-act": ("gptq-int4", dict(group_size=32, sym=True, act_order=True)),
    "gptq8": ("gptq-int8", dict(group_size=32, sym=False, checkpoint_format="gptq")),
    "awq": ("awq-int4", dict(group_size=32)),
    "awq-sym": ("awq-int4", dict(group_size=32, sym=True)),
    "ct": ("ct-int4", dict(group_size=32, sym=False)),
    "ct-sym": ("ct-int4", dict(group_size=32, sym=True, checkpoint_format="ct-0.18")),
    "ct-act": ("ct-int8", dict(group_size=32, sym=True, act_order=True)),
    "int8": ("int8-w8a16", dict(weight_strategy="channel")),
    "int8-tensor": ("int8-w8a16", dict(weight_strategy="tensor")),
    "fp8": ("fp8-w8a16", dict(weight_strategy="block")),
    "fp8-tensor": ("fp8-w8a16", dict(weight_strategy="tensor")),
    "mxfp8": ("mxfp8", {}),
    "bf16": ("bf16", {}),
}


def base(name: str, problem: MoEProblem = P) -> Checkpoint:
    scheme, attrs = BASES[name]
    return synthesize(scheme, problem, seed=7, **attrs)


def with_tensors(ckpt: Checkpoint, **changes) -> Checkpoint:
    """The checkpoint with tensors replaced (a value of None removes the tensor)."""
    tensors = dict(ckpt.tensors)
    for name, t in changes.items():
        if t is None:
            tensors.pop(name)
        else:
            tensors[name] = t
    return replace(ckpt, tensors=tensors)


def edited(ckpt: Checkpoint, name: str, index, value) -> Checkpoint:
    t = ckpt.tensors[name].clone()
    t[index] = value
    return with_tensors(ckpt, **{name: t})


def raises_naming(tensor: str):
    """pytest.raises for a CheckpointError whose message starts with the tensor's name."""
    return pytest.raises(CheckpointError, match="^" + re.escape(tensor) + ":")


@pytest.mark.parametrize("name", list(BASES))
def test_bases_are_well_formed(name):
    w = dequantize(base(name))
    assert torch.isfinite(w["w13"]).all() and torch.isfinite(w["w2"]).all()


# --- shape, dtype, presence -------------------------------------------------------------------

SHAPE_CASES = [
    ("gptq", "w13_scales", lambda t: t[:, :1]),
    ("gptq", "w2_qzeros", lambda t: t[:, :, :-1]),
    ("gptq", "w13_qweight", lambda t: t.unsqueeze(-1)),  # not 3-D
    ("awq", "w2_scales", lambda t: t[:, :, :-8]),
    ("awq", "w13_qzeros", lambda t: t[:, :1]),
    ("ct", "w13_weight_scale", lambda t: t[:, :-1]),
    ("ct", "w2_weight_zero_point", lambda t: t[:, :, :1].repeat(1, 1, 2)),
    ("gptq-act", "w13_g_idx", lambda t: t[:, :-1]),
    ("int8", "w13_weight_scale", lambda t: t.squeeze(-1)),
    ("int8-tensor", "w2_weight_scale", lambda t: t.view(-1, 1)),
    ("fp8", "w13_weight_scale", lambda t: t[:, :, :1].repeat(1, 1, 2)),
    ("mxfp8", "w2_weight_scale", lambda t: t.repeat(1, 1, 2)),
]


@pytest.mark.parametrize("base_name,tensor,change", SHAPE_CASES,
                         ids=[f"{b}-{t}" for b, t, _ in SHAPE_CASES])
def test_wrong_shape(base_name, tensor, change):
    ckpt = base(base_name)
    with raises_naming(tensor):
        dequantize(with_tensors(ckpt, **{tensor: change(ckpt.tensors[tensor])}))


DTYPE_CASES = [
    ("gptq", "w13_qweight", torch.int64),
    ("gptq", "w13_qweight", torch.float16),
    ("gptq", "w2_qzeros", torch.int16),
    ("gptq", "w2_scales", torch.int32),
    ("awq", "w13_qweight", torch.uint8),
    ("ct", "w13_weight_packed", torch.int64),
    ("ct", "w13_weight_zero_point", torch.int8),
    ("int8", "w13_weight", torch.int16),
    ("int8", "w2_weight_scale", torch.float64),
    ("fp8", "w13_weight", torch.bfloat16),
    ("mxfp8", "w13_weight_scale", torch.int32),
    ("mxfp8", "w2_weight", torch.uint8),
    ("bf16", "w13_weight", torch.float16),
    ("gptq-act", "w2_g_idx", torch.float32),
]


@pytest.mark.parametrize("base_name,tensor,dtype", DTYPE_CASES,
                         ids=[f"{b}-{t}-{d}" for b, t, d in DTYPE_CASES])
def test_wrong_dtype(base_name, tensor, dtype):
    ckpt = base(base_name)
    t = ckpt.tensors[tensor]
    bad = t.view(torch.uint8).to(dtype) if t.dtype == torch.float8_e4m3fn else t.to(dtype)
    with raises_naming(tensor) as info:
        dequantize(with_tensors(ckpt, **{tensor: bad}))
    assert str(dtype) in str(info.value)  # says what it found


MISSING_CASES = [
    ("gptq", "w13_qweight"), ("gptq", "w2_scales"), ("gptq", "w13_qzeros"),
    ("gptq-act", "w13_g_idx"), ("awq", "w2_qzeros"), ("awq", "w13_scales"),
    ("ct", "w13_weight_zero_point"), ("ct", "w2_weight_packed"), ("ct-act", "w2_weight_g_idx"),
    ("int8", "w13_weight_scale"), ("fp8", "w2_weight"), ("mxfp8", "w13_weight_scale"),
    ("bf16", "w2_weight"),
]


@pytest.mark.parametrize("base_name,tensor", MISSING_CASES,
                         ids=[f"{b}-{t}" for b, t in MISSING_CASES])
def test_missing_tensor(base_name, tensor):
    with raises_naming(tensor) as info:
        dequantize(with_tensors(base(base_name), **{tensor: None}))
    assert "missing" in str(info.value)


# --- scales -----------------------------------------------------------------------------------

SCALE_TENSORS = [("gptq", "w13_scales"), ("gptq8", "w2_scales"), ("awq", "w2_scales"),
                 ("ct", "w13_weight_scale"), ("ct-sym", "w2_weight_scale"),
                 ("int8", "w2_weight_scale"), ("int8-tensor", "w13_weight_scale"),
                 ("fp8", "w13_weight_scale"), ("fp8-tensor", "w13_weight_scale")]


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, 0.0, -0.5],
                         ids=["nan", "inf", "-inf", "zero", "negative"])
@pytest.mark.parametrize("base_name,tensor", SCALE_TENSORS,
                         ids=[f"{b}-{t}" for b, t in SCALE_TENSORS])
def test_bad_scale_values(base_name, tensor, bad):
    ckpt = base(base_name)
    index = (1,) + (0,) * (ckpt.tensors[tensor].dim() - 1)
    with raises_naming(tensor) as info:
        dequantize(edited(ckpt, tensor, index, bad))
    assert "finite scales > 0" in str(info.value)


def test_e8m0_nan_scale():
    with raises_naming("w2_weight_scale") as info:
        dequantize(edited(base("mxfp8"), "w2_weight_scale", (0, 3, 0), 0xFF))
    assert "0xFF" in str(info.value)


@pytest.mark.parametrize("base_name", ["fp8", "mxfp8"])
@pytest.mark.parametrize("byte", [0x7F, 0xFF])
def test_fp8_nan_code(base_name, byte):
    ckpt = base(base_name)
    raw = ckpt.tensors["w13_weight"].view(torch.uint8).clone()
    raw[1, 2, 3] = byte
    with raises_naming("w13_weight") as info:
        dequantize(with_tensors(ckpt, w13_weight=raw.view(torch.float8_e4m3fn)))
    assert "NaN" in str(info.value)


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_non_finite_dense_weight_and_bias(bad):
    ckpt = base("bf16")
    with raises_naming("w2_weight"):
        dequantize(edited(ckpt, "w2_weight", (0, 0, 0), bad))
    biased = base("gptq", replace(P, bias=True))
    with raises_naming("w13_bias"):
        dequantize(edited(biased, "w13_bias", (1, 0), bad))


def test_bias_wrong_shape():
    biased = base("awq", replace(P, bias=True))
    with raises_naming("w2_bias"):
        dequantize(with_tensors(biased, w2_bias=biased.tensors["w2_bias"][:, :-1]))


def test_w13_shard_scales_need_even_rows():
    # [E, 2] per-tensor scales split w13 into w1 and w3 halves: an odd row count cannot split
    ckpt = base("fp8-tensor")
    w13 = ckpt.tensors["w13_weight"]
    odd = with_tensors(ckpt, w13_weight=w13[:, :-1])
    with raises_naming("w13_weight_scale"):
        dequantize(odd)


# --- zero points --------------------------------------------------------------------------------

@pytest.mark.parametrize("base_name,word", [("gptq", 0xFFFFFFFF), ("gptq", 0x7777777F),
                                            ("gptq8", 0x7F7F7FFF)])
def test_gptq_v1_stored_zero_overflows(base_name, word):
    # v1 stores z - 1: a stored 15 (int4) / 255 (int8) is a true zero 16 / 256, out of range
    word = word - (1 << 32) if word >= 1 << 31 else word
    with raises_naming("w13_qzeros") as info:
        dequantize(edited(base(base_name), "w13_qzeros", (0, 0, 0), word))
    assert "stored z-1" in str(info.value)


def test_gptq_v1_writer_rejects_true_zero_of_zero():
    ckpt = Checkpoint("gptq-int4", {}, group_size=-1, sym=False, checkpoint_format="gptq")
    c = CanonicalLinear(codes=torch.zeros(1, 8, 8, dtype=torch.int32),
                        scales=torch.ones(1, 8, 1, dtype=torch.float64), block=(1, 8),
                        zeros=torch.full((1, 8, 1), -8, dtype=torch.int32))  # unsigned 0
    with raises_naming("w13_qzeros"):
        write_linear(c, "w13", ckpt, torch.bfloat16)


@pytest.mark.parametrize("base_name,tensor,value", [
    ("gptq-sym", "w13_qzeros", 0x88888889),  # one nibble says z = 9
    ("gptq-sym", "w2_qzeros", 0x77777777),   # v1's symmetric word in a v2 file: z = 7
    ("awq-sym", "w13_qzeros", 0x88888878),
    ("ct-sym", "w2_weight_zero_point", 0x88888898),
])
def test_sym_zero_points_must_be_the_symmetric_zero(base_name, tensor, value):
    ckpt = base(base_name)
    if tensor not in ckpt.tensors:  # AWQ / compressed-tensors sym files carry no zeros
        E = ckpt.num_experts
        n_out = (2 * P.N if tensor.startswith("w13") else P.K)
        n_in = P.K if tensor.startswith("w13") else P.N
        shape = ((E, n_in // 32, n_out // 8) if base_name.startswith("awq")
                 else (E, n_out // 8, n_in // 32))
        ckpt = with_tensors(ckpt, **{tensor: torch.full(shape, 0x88888888 - (1 << 32),
                                                        dtype=torch.int32)})
        dequantize(ckpt)  # the symmetric zero everywhere is accepted
    value = value - (1 << 32) if value >= 1 << 31 else value
    with raises_naming(tensor) as info:
        dequantize(edited(ckpt, tensor, (0, 0, 0), value))
    assert "sym" in str(info.value)


# --- g_idx ------------------------------------------------------------------------------------

@pytest.mark.parametrize("base_name,tensor", [("gptq-act", "w13_g_idx"),
                                              ("ct-act", "w2_weight_g_idx")])
@pytest.mark.parametrize("bad", [-1, "groups"])
def test_g_idx_out_of_range(base_name, tensor, bad):
    ckpt = base(base_name)
    groups = (P.K if tensor.startswith("w13") else P.N) // 32
    with raises_naming(tensor) as info:
        dequantize(edited(ckpt, tensor, (1, 5), groups if bad == "groups" else bad))
    assert "group indices" in str(info.value)


@pytest.mark.parametrize("base_name,tensor", [("gptq", "w13_g_idx"), ("ct", "w13_weight_g_idx")])
def test_permuted_g_idx_without_act_order(base_name, tensor):
    ckpt = base(base_name)
    assert not ckpt.act_order
    trivial = (torch.arange(P.K) // 32).expand(P.E, P.K).to(torch.int32)
    dequantize(with_tensors(ckpt, **{tensor: trivial}))  # k // g is fine without act order
    with raises_naming(tensor) as info:
        dequantize(with_tensors(ckpt, **{tensor: trivial.flip(-1).contiguous()}))
    assert "act_order" in str(info.value)


# --- cross-tensor consistency -----------------------------------------------------------------

@pytest.mark.parametrize("base_name,tensor", [("gptq", "w13_qweight"), ("ct", "w13_weight_packed")])
def test_group_size_not_dividing_k(base_name, tensor):
    # K = 96 is a multiple of 32 but not of 64
    ckpt = base(base_name, replace(P, K=96))
    with raises_naming(tensor) as info:
        dequantize(replace(ckpt, group_size=64))
    assert "group size 64" in str(info.value)


@pytest.mark.parametrize("base_name,tensor", [("gptq", "w2_qweight"), ("fp8", "w2_weight"),
                                              ("mxfp8", "w13_weight_scale")])
def test_expert_counts_disagree(base_name, tensor):
    ckpt = base(base_name)
    with pytest.raises(CheckpointError, match=re.escape(f"{tensor}: 1")) as info:
        dequantize(with_tensors(ckpt, **{tensor: ckpt.tensors[tensor][:1]}))
    assert info.value.tensor == "checkpoint.tensors"


@pytest.mark.parametrize("base_name", ["gptq", "awq", "ct", "int8", "fp8", "mxfp8", "bf16"])
def test_w2_k_must_match_w13_k(base_name):
    ckpt = base(base_name)
    other = base(base_name, replace(P, K=128))
    w2 = {n: t for n, t in other.tensors.items() if n.startswith("w2")}
    with raises_naming("w2") as info:
        dequantize(with_tensors(ckpt, **w2))
    assert "64" in str(info.value) and "128" in str(info.value)


def test_w13_rows_must_be_n_or_2n():
    ckpt = base("bf16")
    w13 = ckpt.tensors["w13_weight"]
    with raises_naming("w13"):
        dequantize(with_tensors(ckpt, w13_weight=torch.cat([w13, w13[:, :8]], dim=1)))


def test_ct_weight_shape_must_match_packing():
    ckpt = base("ct")
    shape = ckpt.tensors["w13_weight_shape"].clone()
    shape[:, 1] = P.K + 8  # needs one more word than stored
    with raises_naming("w13_weight_packed"):
        dequantize(with_tensors(ckpt, w13_weight_shape=shape))
    shape[:, 1] = P.K
    shape[1, 0] = 1  # rows disagree with the packed tensor
    with raises_naming("w13_weight_shape"):
        dequantize(with_tensors(ckpt, w13_weight_shape=shape))


# --- checkpoint attributes --------------------------------------------------------------------

@pytest.mark.parametrize("scheme,attrs,attribute", [
    ("gptq-int4", dict(checkpoint_format="foo"), "checkpoint.checkpoint_format"),
    ("awq-int4", dict(checkpoint_format="gptq"), "checkpoint.checkpoint_format"),
    ("ct-int4", dict(checkpoint_format="ct-0.16"), "checkpoint.checkpoint_format"),
    ("gptq-int4", dict(group_size=48), "checkpoint.group_size"),
    ("fp8-w8a16", dict(weight_strategy="group"), "checkpoint.weight_strategy"),
    ("int8-w8a16", dict(weight_strategy="block"), "checkpoint.weight_strategy"),
    ("int8-w8a8", dict(activation="mxfp8"), "checkpoint.activation"),
    ("mxfp8", dict(mx_scale_rule="nearest"), "checkpoint.mx_scale_rule"),
    ("int8-w8a16", dict(sym=False), "checkpoint.sym"),
    ("awq-int4", dict(act_order=True), "checkpoint.act_order"),
])
def test_unknown_attribute_values(scheme, attrs, attribute):
    with raises_naming(attribute):
        Checkpoint(scheme, {}, **attrs)
