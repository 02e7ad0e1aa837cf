"""The scheme table is the one declaration everything derives from: every record names things
that exist (a format record, a layout, an element codec, a scale encoding), and a stored form
is looked up by its name only."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from moecert.reference import RECORDS, Checkpoint
from moecert.reference.schemes import (
    ACT_ELEMENT_MAX,
    ACT_ELEMENTS,
    ACT_NONE,
    ACT_NVFP4,
    GLOBAL_SCALES,
    LAYOUTS,
    MX_ACTIVATION_ELEMENTS,
    SCALE_ENCODINGS,
    SCHEMES,
    get_scheme,
)
from moecert.reference.schemes.elements import ELEMENTS
from moecert.reference.schemes.tensors import PACKED_TENSORS


@pytest.mark.parametrize("name", list(SCHEMES))
def test_every_record_names_what_exists(name):
    s = SCHEMES[name]
    assert s.element in ELEMENTS and s.scale_encoding in SCALE_ENCODINGS
    assert s.global_scale in GLOBAL_SCALES
    assert s.activation_element in ACT_ELEMENTS
    # scale = amax / element max (MX and NVFP4 activations carry their own block scales)
    scaled = set(s.activation_modes) - {ACT_NONE, ACT_NVFP4, *MX_ACTIVATION_ELEMENTS}
    assert (s.activation_element in ACT_ELEMENT_MAX) == bool(scaled), s.activation_element
    for f in s.formats:
        assert f.record in RECORDS, f.record
        assert f.layout in LAYOUTS
        # the tensors of a layout are declared: packed layouts in the table, unpacked
        # ones through their element records (storage dtype) and scale encodings
        if f.layout == "dense":
            assert isinstance(s.weight_element.storage, torch.dtype)
            assert s.scale_encoding in ("none", "float") or s.scale_element is not None
        else:
            assert f.layout in PACKED_TENSORS
    defaults = s.defaults()
    Checkpoint(name, {}, **defaults)  # the defaults are a valid variant
    for override in s.variant_overrides():
        Checkpoint(name, {}, **{**defaults, **override})  # so is every variant


def test_a_stored_form_is_found_by_its_name_only():
    gptq = get_scheme("gptq-int4")
    assert gptq.format("gptq_v2").record == "gptq-v2-int4@v2"
    assert gptq.format(None) is gptq.formats[0]
    with pytest.raises(KeyError, match="no checkpoint format 'awq'; known: gptq, gptq_v2"):
        gptq.format("awq")
    w4a8 = get_scheme("w4a8-int8")
    assert (w4a8.format("awq").layout, w4a8.format("gptq").layout) == ("awq", "gptq")
    assert Checkpoint("w4a8-int8", {}, checkpoint_format="gptq").sym is True
    assert Checkpoint("w4a8-int8", {}).sym is False  # AutoAWQ files carry zero points


def test_a_packed_element_derives_its_byte_shape():
    """e2m1 is stored two to a uint8 along in: the weight's declared shape comes from the
    element (elements per byte), not from the scheme's name."""
    from moecert.reference.schemes.tensors import declared_tensors, layer_sizes, tensor_shapes

    ckpt = Checkpoint("mxfp4", {})
    assert get_scheme("mxfp4").elements_per_byte == 2
    assert get_scheme("mxfp8").elements_per_byte == 1
    decls = declared_tensors(ckpt)
    sizes = layer_sizes(SimpleNamespace(E=3, w13_rows=128, K=96, N=64))
    assert tensor_shapes(decls["w13_weight"], sizes, ckpt) == ((3, 128, 48),)
    assert tensor_shapes(decls["w2_weight"], sizes, ckpt) == ((3, 96, 32),)
    assert tensor_shapes(decls["w2_weight_scale"], sizes, ckpt) == ((3, 96, 2),)
    assert [d.dtypes for d in (decls["w13_weight"], decls["w13_weight_scale"])] == [
        (torch.uint8,), (torch.uint8,)]


@pytest.mark.parametrize("name", [n for n, s in SCHEMES.items() if s.shipped])
def test_a_shipped_combination_is_a_drawable_variant_of_several_attributes(name):
    from moecert.reference import MoEProblem, random_checkpoint

    scheme = SCHEMES[name]
    defaults = scheme.defaults()
    for pairs in scheme.shipped:
        attrs = dict(pairs)
        assert sum(defaults[k] != v for k, v in attrs.items()) >= 2  # else a plain override
        assert attrs in scheme.variant_overrides()
        ckpt = random_checkpoint(name, MoEProblem(M=4, K=256, N=256, E=2, topk=1), **attrs)
        assert all(getattr(ckpt, k) == v for k, v in attrs.items())


def test_fp8_w8a8_covers_what_llm_compressor_ships():
    overrides = SCHEMES["fp8-w8a8"].variant_overrides()
    assert {"weight_strategy": "channel", "activation": "dynamic-token"} in overrides
    assert {"weight_strategy": "tensor", "activation": "static-tensor"} in overrides
