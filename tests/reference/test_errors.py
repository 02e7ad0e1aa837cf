"""Malformed checkpoints raise CheckpointError naming the tensor (or attribute) at fault.

Each case starts from a well-formed synthesized checkpoint (which must dequantize) and breaks
one thing in it.
"""

from __future__ import annotations

import importlib
import math
import re
from dataclasses import replace

import pytest
import torch
from moecert.reference import make_inputs, moe
from moecert.reference.canonical import CanonicalLinear
from moecert.reference.checkpoint import Checkpoint
from moecert.reference.dequantize import dequantize
from moecert.reference.errors import CheckpointError
from moecert.reference.layouts import write_linear
from moecert.reference.problem import MoEProblem
from moecert.reference.synthesize import synthesize

moe_module = importlib.import_module("moecert.reference.moe")  # the name `moe` is the function

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


# Shapes, dtypes, presence, devices and bad values of every tensor of every scheme, through
# every entry point: tests/conformance/harness/test_corruptions.py. Here: what that generator
# does not reach.

def test_w13_shard_scales_need_even_rows():
    # [E, 2] per-tensor scales split w13 into w1 and w3 halves: an odd row count cannot split
    odd = replace(P, N=33, activation="relu2")  # w13 has N = 33 rows
    ckpt = base("fp8-tensor", odd)
    scale = ckpt.tensors["w13_weight_scale"]
    with raises_naming("w13_weight_scale"):
        dequantize(with_tensors(ckpt, w13_weight_scale=torch.stack([scale, scale], 1)))


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

@pytest.mark.parametrize("base_name", ["gptq", "ct"])
def test_group_size_not_dividing_k(base_name):
    # K = 96 is a multiple of 32 but not of 64
    ckpt = base(base_name, replace(P, K=96))
    with raises_naming("checkpoint.group_size") as info:
        dequantize(replace(ckpt, group_size=64))
    assert "K = 96" in str(info.value)


@pytest.mark.parametrize("base_name", ["gptq", "awq", "ct", "int8", "fp8", "mxfp8", "bf16"])
def test_the_problem_settles_which_linear_is_wrong(base_name):
    # every w2 tensor from a layer with K = 128: without a problem the tensors disagree (the
    # side more tensors take wins); with the problem (K = 64), the w2 tensors are wrong
    ckpt = base(base_name)
    other = base(base_name, replace(P, K=128))
    mixed = with_tensors(ckpt, **{n: t for n, t in other.tensors.items() if n.startswith("w2")})
    with pytest.raises(CheckpointError) as info:
        dequantize(mixed)
    assert "64" in str(info.value) and "128" in str(info.value)
    with pytest.raises(CheckpointError, match=r"^w2_\w+:"):
        dequantize(mixed, P)


def test_two_tensors_that_disagree_alone_are_both_named():
    # a 16-bit layer has one tensor per linear: nothing says which of the two holds the wrong K
    ckpt = base("bf16")
    w2 = ckpt.tensors["w2_weight"]
    with raises_naming("w13_weight, w2_weight") as info:
        dequantize(with_tensors(ckpt, w2_weight=torch.cat([w2, w2[:, :8]], dim=1)))
    assert "hidden size K" in str(info.value)
    w13 = ckpt.tensors["w13_weight"]
    with raises_naming("w13_weight, w2_weight") as info:
        dequantize(with_tensors(ckpt, w13_weight=torch.cat([w13, w13[:, :8]], dim=1)))
    assert "R = N or 2N" in str(info.value)
    with raises_naming("w13_weight"):  # the problem decides
        dequantize(with_tensors(ckpt, w13_weight=torch.cat([w13, w13[:, :8]], dim=1)), P)


def test_moe_reports_positions_and_shapes_of_the_whole_layer(monkeypatch):
    # moe dequantizes a chunk of experts at a time: errors still speak of the whole layer
    monkeypatch.setattr(moe_module, "CHUNK_BYTES", 1)  # one expert per chunk
    problem = replace(P, E=3, M=8, topk=3)
    ckpt = base("gptq", problem)
    x, weights, ids = make_inputs(problem, seed=1)
    with raises_naming("w13_scales") as info:
        moe(edited(ckpt, "w13_scales", (1, 0, 2), math.nan), x, weights, ids, problem)
    assert "index [1, 0, 2]" in str(info.value)
    with raises_naming("w2_scales") as info:
        moe(with_tensors(ckpt, w2_scales=ckpt.tensors["w2_scales"][:, :, 1:]), x, weights,
            ids, problem)
    assert "[3, 1, 64]" in str(info.value)


def test_ct_weight_shape_must_match_packing():
    ckpt = base("ct")
    shape = ckpt.tensors["w13_weight_shape"].clone()
    shape[:, 1] = P.K + 8  # needs one more word than the packed tensor, which fits the others
    with raises_naming("w13_weight_shape"):
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
