"""kernels/convert.py: every seed checkpoint format -> common kernel format -> canonical form,
bit for bit against the reference's `canonicalize`, plus the checkpoints it must reject."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from moecert.kernels.convert import (
    convert_to_kernel_format,
    export_canonical,
    pack_nibbles,
    unpack_nibbles,
)
from moecert.kernels.errors import BackendError
from moecert.kernels.layer import MoELayer
from moecert.kernels.quant_config import Variant
from moecert.reference import MoEProblem, canonicalize, synthesize

SHAPE = dict(M=4, K=256, N=128, E=2, topk=2)  # every group size divides K and N


def int_cases():
    for scheme, formats, bits_options in (
        ("gptq-int4", ("gptq", "gptq_v2"), True), ("gptq-int8", ("gptq", "gptq_v2"), True),
        ("awq-int4", ("awq",), False), ("ct-int4", ("ct-0.17", "ct-0.18"), True),
        ("ct-int8", ("ct-0.17", "ct-0.18"), True),
        ("w4a8-int8", ("awq", "gptq", "gptq_v2"), False),
    ):
        for fmt in formats:
            for sym in (True, False):
                for g in (-1, 32, 64, 128):
                    for act_order in ((False, True) if bits_options else (False,)):
                        yield pytest.param(
                            scheme, dict(checkpoint_format=fmt, sym=sym, group_size=g,
                                         act_order=act_order),
                            id=f"{scheme}-{fmt}-{'sym' if sym else 'asym'}-g{g}"
                               + ("-actorder" if act_order else ""))


def dense_cases():
    yield pytest.param("bf16", {}, id="bf16")
    yield pytest.param("fp16", {}, id="fp16")
    for strategy in ("channel", "tensor"):
        yield pytest.param("int8-w8a16", dict(weight_strategy=strategy),
                           id=f"int8-w8a16-{strategy}")
        for act in ("dynamic-token", "static-tensor", "dynamic-tensor"):
            yield pytest.param("int8-w8a8", dict(weight_strategy=strategy, activation=act),
                               id=f"int8-w8a8-{strategy}-{act}")
    for strategy in ("tensor", "channel", "block"):
        yield pytest.param("fp8-w8a16", dict(weight_strategy=strategy), id=f"fp8-{strategy}")
    for act in ("none", "mxfp8"):
        yield pytest.param("mxfp8", dict(activation=act), id=f"mxfp8-{act}")
        yield pytest.param("mxfp4", dict(activation=act), id=f"mxfp4-{act}")


def make_layer(ckpt, problem) -> MoELayer:
    layer = MoELayer("x", Variant.of(ckpt), problem, "cpu")
    layer.load(ckpt)
    return layer


def assert_canonical_equal(layer, ckpt):
    exported, want = export_canonical(layer), canonicalize(ckpt)
    for p in ("w13", "w2"):
        got, ref = exported[p], want[p]
        assert got.codes.dtype == ref.codes.dtype, p
        assert torch.equal(got.codes, ref.codes), f"{p} codes"
        assert (got.zeros is None) == (ref.zeros is None), f"{p} zeros presence"
        if ref.zeros is not None:
            assert torch.equal(got.zeros, ref.zeros.to(torch.int32)), f"{p} zeros"
        assert got.scales.dtype == torch.float64
        assert torch.equal(got.scales, ref.scales), f"{p} scales"
        assert tuple(got.block) == tuple(ref.block), f"{p} block"
        assert (got.g_idx is None) == (ref.g_idx is None), f"{p} g_idx presence"
        if ref.g_idx is not None:
            assert torch.equal(got.g_idx.to(torch.int64), ref.g_idx.to(torch.int64))
        assert got.global_scale is None and ref.global_scale is None


@pytest.mark.parametrize(("scheme", "attrs"), [*int_cases(), *dense_cases()])
def test_conversion_is_bit_exact(scheme, attrs):
    check_conversion(scheme, attrs, bias=False)


@pytest.mark.parametrize("scheme", ["gptq-int4", "awq-int4", "ct-int8", "fp8-w8a16", "bf16"])
def test_conversion_with_bias(scheme):
    check_conversion(scheme, {}, bias=True)


def check_conversion(scheme, attrs, bias):
    problem = MoEProblem(**SHAPE, bias=bias)
    ckpt = synthesize(scheme, problem, seed=1, **attrs)
    layer = make_layer(ckpt, problem)
    convert_to_kernel_format(layer)
    assert_canonical_equal(layer, ckpt)
    if bias:
        for name in ("w13_bias", "w2_bias"):
            assert layer.get(name).dtype == torch.float32
            assert torch.equal(layer.get(name), ckpt.tensors[name].to(torch.float32))
    if attrs.get("activation") == "static-tensor":
        for p, a in (("w13", "a13_scale"), ("w2", "a2_scale")):
            assert torch.equal(layer.get(a), ckpt.tensors[f"{p}_input_scale"].max().reshape(1))
    # no checkpoint tensor survives the conversion
    assert not any(n.endswith(("qweight", "qzeros", "scales", "packed", "_weight", "input_scale"))
                   for n in layer.tensor_names())


@pytest.mark.parametrize("activation", ["relu2", "swigluoai"])
@pytest.mark.parametrize("scheme", ["gptq-int4", "ct-int4", "awq-int4", "fp8-w8a16"])
def test_conversion_other_shapes(scheme, activation):
    # relu2: w13 has N rows; K = 192 leaves partial 128x128 fp8 blocks
    problem = MoEProblem(M=4, K=192, N=64, E=2, topk=1, activation=activation)
    attrs = {"weight_strategy": "block"} if scheme == "fp8-w8a16" else {"group_size": 32,
                                                                        "sym": False}
    ckpt = synthesize(scheme, problem, seed=2, **attrs)
    layer = make_layer(ckpt, problem)
    convert_to_kernel_format(layer)
    assert_canonical_equal(layer, ckpt)


def test_ct_without_weight_shape():
    problem = MoEProblem(**SHAPE)
    ckpt = synthesize("ct-int4", problem, sym=False, group_size=32)
    ckpt = replace(ckpt, tensors={n: t for n, t in ckpt.tensors.items()
                                  if not n.endswith("weight_shape")})
    layer = make_layer(ckpt, problem)
    convert_to_kernel_format(layer)
    assert_canonical_equal(layer, ckpt)


def test_kernel_format_layout():
    problem = MoEProblem(**SHAPE)
    ckpt = synthesize("gptq-int4", problem, sym=False, group_size=64, act_order=True)
    layer = make_layer(ckpt, problem)
    convert_to_kernel_format(layer)
    assert layer.get("w13_q").shape == (2, 256, 128) and layer.get("w13_q").dtype == torch.uint8
    assert layer.get("w2_q").shape == (2, 256, 64)
    assert layer.get("w13_zp").shape == (2, 256, 4) and layer.get("w13_zp").dtype == torch.uint8
    assert layer.get("w13_s").shape == (2, 256, 4) and layer.get("w13_s").dtype == torch.float32
    assert layer.get("w13_g_idx").dtype == torch.int32
    assert layer.meta == {"w13_group_cols": 64, "w2_group_cols": 64, "bits": 4}


def test_nibble_packing_order():
    u = torch.tensor([[1, 2, 3, 4, 5]], dtype=torch.int32)
    packed = pack_nibbles(u)
    assert packed.tolist() == [[0x21, 0x43, 0x05]]
    assert unpack_nibbles(packed, 5).tolist() == [[1, 2, 3, 4, 5]]


# --- checkpoints that must be rejected --------------------------------------------------------

def _set_first_field(ckpt, name, value, bits):
    t = ckpt.tensors[name].clone()
    mask = (1 << bits) - 1
    t[0, 0, 0] = (t[0, 0, 0] & ~mask) | value
    return replace(ckpt, tensors={**ckpt.tensors, name: t})


@pytest.mark.parametrize(("scheme", "bits"), [("gptq-int4", 4), ("gptq-int8", 8)])
def test_gptq_v1_stored_max_zero_overflows(scheme, bits):
    problem = MoEProblem(**SHAPE)
    ckpt = synthesize(scheme, problem, checkpoint_format="gptq", sym=False, group_size=32)
    ckpt = _set_first_field(ckpt, "w2_qzeros", (1 << bits) - 1, bits)
    layer = make_layer(ckpt, problem)
    with pytest.raises(BackendError, match="w2_qzeros.*overflows"):
        convert_to_kernel_format(layer)
    assert layer.has("w2_qzeros")  # a rejected checkpoint leaves the layer as loaded


@pytest.mark.parametrize(("scheme", "fmt", "name"), [
    ("gptq-int4", "gptq", "w13_qzeros"), ("gptq-int4", "gptq_v2", "w13_qzeros"),
    ("awq-int4", "awq", "w13_qzeros"), ("ct-int4", "ct-0.18", "w13_weight_zero_point")])
def test_symmetric_file_with_asymmetric_zeros_is_rejected(scheme, fmt, name):
    problem = MoEProblem(**SHAPE)
    sym = synthesize(scheme, problem, checkpoint_format=fmt, sym=True, group_size=32)
    zeros_from = synthesize(scheme, problem, checkpoint_format=fmt, sym=False, group_size=32)
    tensors = dict(sym.tensors)
    if name not in tensors:  # a sym AWQ / CT file written without zeros: add planted ones
        tensors[name] = zeros_from.tensors[name]
    ckpt = replace(sym, tensors=tensors)
    if fmt in ("gptq", "gptq_v2"):  # the written symmetric zeros: accepted as they are
        convert_to_kernel_format(make_layer(ckpt, problem))
        ckpt = _set_first_field(ckpt, name, 3, 4)
    with pytest.raises(BackendError, match=f"{name}.*symmetric zero"):
        convert_to_kernel_format(make_layer(ckpt, problem))


def test_permuted_g_idx_without_act_order_is_rejected():
    problem = MoEProblem(**SHAPE)
    ckpt = synthesize("gptq-int4", problem, group_size=32, act_order=True)
    ckpt = replace(ckpt, act_order=False)
    with pytest.raises(BackendError, match="w13_g_idx"):
        convert_to_kernel_format(make_layer(ckpt, problem))


def test_bad_scales_are_rejected():
    problem = MoEProblem(**SHAPE)
    ckpt = synthesize("fp8-w8a16", problem, weight_strategy="channel")
    s = ckpt.tensors["w2_weight_scale"].clone()
    s[1, 2, 0] = 0
    ckpt = replace(ckpt, tensors={**ckpt.tensors, "w2_weight_scale": s})
    with pytest.raises(BackendError, match="w2_weight_scale"):
        convert_to_kernel_format(make_layer(ckpt, problem))


@pytest.mark.parametrize("scheme", ["mxfp8", "mxfp4"])
def test_e8m0_nan_is_rejected(scheme):
    problem = MoEProblem(**SHAPE)
    ckpt = synthesize(scheme, problem)
    s = ckpt.tensors["w13_weight_scale"].clone()
    s[0, 0, 0] = 0xFF
    ckpt = replace(ckpt, tensors={**ckpt.tensors, "w13_weight_scale": s})
    with pytest.raises(BackendError, match="w13_weight_scale.*0xFF"):
        convert_to_kernel_format(make_layer(ckpt, problem))


def test_one_converter_per_layout():
    """A layout the facts declare without a converter (or a converter for no layout) fails
    here, not at a checkpoint's first conversion."""
    from moecert.kernels.convert import CONVERTERS
    from moecert.reference.schemes import LAYOUTS

    assert sorted(CONVERTERS) == sorted(LAYOUTS)


@pytest.mark.parametrize(("scheme", "name", "bits", "found"), [
    ("fp8-w8a16", "w13_weight", 0x7F, "2 NaN codes"),
    ("mxfp8", "w2_weight_scale", 0xFF, "2 NaN codes"),
    ("nvfp4", "w2_weight_scale", 0x80, "2 bad entries")])  # -0: not a positive scale
def test_bad_codes_found_in_every_chunk(monkeypatch, scheme, name, bits, found):
    """The code checks run over chunks of experts (issue 43: temporaries of a whole layer
    otherwise): codes planted in the first and the last expert, each in a chunk of its own,
    are both found and counted."""
    import moecert.kernels.convert as convert

    problem = MoEProblem(**{**SHAPE, "E": 3})
    ckpt = synthesize(scheme, problem)
    t = ckpt.tensors[name].clone()
    monkeypatch.setattr(convert, "CHUNK_ELEMENTS", t[0].numel())  # one expert a chunk
    t.view(torch.uint8)[0, 0, 0] = bits
    t.view(torch.uint8)[-1, -1, -1] = bits
    ckpt = replace(ckpt, tensors={**ckpt.tensors, name: t})
    with pytest.raises(BackendError, match=f"{name}.*{found}"):
        convert_to_kernel_format(make_layer(ckpt, problem))


def test_non_finite_16_bit_weight_found_in_the_last_chunk(monkeypatch):
    import moecert.kernels.convert as convert

    problem = MoEProblem(**{**SHAPE, "E": 3})
    ckpt = synthesize("bf16", problem)
    w = ckpt.tensors["w2_weight"].clone()
    monkeypatch.setattr(convert, "CHUNK_ELEMENTS", w[0].numel())
    w[-1, -1, -1] = float("inf")
    ckpt = replace(ckpt, tensors={**ckpt.tensors, "w2_weight": w})
    with pytest.raises(BackendError, match="w2_weight.*non-finite"):
        convert_to_kernel_format(make_layer(ckpt, problem))


def test_a_clean_layer_s_code_check_counts_nothing(monkeypatch):
    """The code checks look for any bad code over the chunks, and count (an int64 sum of the
    flags, 16 bytes of traffic per element: issue 43) only when one is there; the counts
    themselves are test_bad_codes_found_in_every_chunk's."""
    import moecert.kernels.convert as convert

    problem = MoEProblem(**{**SHAPE, "E": 3})
    ckpt = synthesize("fp8-w8a16", problem)
    monkeypatch.setattr(convert, "CHUNK_ELEMENTS", ckpt.tensors["w13_weight"][0].numel())
    sums = []
    real_sum = torch.Tensor.sum

    def counted(self, *args, **kwargs):
        if self.dtype == torch.bool:
            sums.append(tuple(self.shape))
        return real_sum(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "sum", counted)
    convert_to_kernel_format(make_layer(ckpt, problem))
    assert sums == []
