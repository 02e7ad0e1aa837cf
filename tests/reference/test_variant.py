"""`Variant` (reference/schemes/variant.py): the one record of a scheme variant, its defaults,
its checks, its expansion into the variants the suites cover, and how people read it."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
from moecert.kernels import QuantConfig
from moecert.reference import Checkpoint
from moecert.reference.errors import CheckpointError
from moecert.reference.schemes import (
    SCHEMES,
    VARIANT_FIELDS,
    Variant,
    VariantError,
    scheme_variants,
)


def test_the_kernels_quant_config_is_the_variant():
    # backends (and entry-point backends) import the old name: one class, not a copy
    assert QuantConfig is Variant


@pytest.mark.parametrize("scheme", SCHEMES)
def test_defaults_are_the_scheme_rows(scheme):
    v = Variant(scheme)
    defaults = SCHEMES[scheme].defaults()
    assert {f: getattr(v, f) for f in defaults} == defaults
    assert v.act_order is False and v.mx_scale_rule == "floor"
    assert v == Variant.defaults(scheme) == Variant.of(scheme)


@pytest.mark.parametrize(("scheme", "attrs", "sym"), [
    ("gptq-int4", {}, True),
    ("awq-int4", {}, False),  # AutoAWQ files carry zero points
    ("w4a8-int8", {}, False),  # its default format is AWQ's
    ("w4a8-int8", {"checkpoint_format": "gptq"}, True),  # a GPTQ file of it: the format's
    ("w4a8-int8", {"checkpoint_format": "gptq", "sym": False}, False),  # told
])
def test_sym_defaults_from_the_checkpoint_format_given(scheme, attrs, sym):
    assert Variant(scheme, **attrs).sym is sym


# every variant the suites cover, and a GPTQ file of w4a8-int8 (whose default format is AWQ's,
# with zero points): the case where a kept `sym` and a resolved one part
CHANGES = [(s, o) for s in SCHEMES for o in SCHEMES[s].variant_overrides()] + [
    ("w4a8-int8", {"checkpoint_format": "gptq"})]


@pytest.mark.parametrize(("scheme", "changes"), CHANGES,
                         ids=[f"{s}-{'-'.join(map(str, c.values()))}" for s, c in CHANGES])
def test_a_change_resolves_the_defaults_as_construction_does(scheme, changes):
    made = Variant(scheme, **changes)
    assert Variant.defaults(scheme).replace(**changes) == made
    # a checkpoint's variant changed by dataclasses.replace is the same variant
    assert dataclasses.replace(Checkpoint(scheme, {}), **changes).variant == made


@pytest.mark.parametrize("variant", [
    Variant("w4a8-int8", checkpoint_format="gptq", sym=False),  # told: not the format's sym
    Variant("w4a8-int8", checkpoint_format="gptq"),
    Variant("gptq-int4", checkpoint_format="gptq_v2", group_size=32, sym=False, act_order=True),
], ids=lambda v: v.describe())
def test_the_overrides_give_the_variant_back(variant):
    # a case carries a variant as its overrides (ids, JSON): they must rebuild it
    assert Variant(variant.scheme, **variant.overrides()) == variant
    assert variant.replace() == variant


@pytest.mark.parametrize(("scheme", "attrs", "field", "expected", "found"), [
    ("gptq-int5", {}, "scheme", "one of bf16, fp16, gptq-int4", "'gptq-int5'"),
    ("gptq-int4", {"checkpoint_format": "foo"}, "checkpoint_format",
     "one of ('gptq', 'gptq_v2')", "'foo'"),
    ("gptq-int4", {"group_size": 16}, "group_size", "one of (-1, 32, 64, 128)", "16"),
    ("fp8-w8a16", {"group_size": 0}, "group_size",
     "-1 (one group) or a positive group length", "0"),
    ("bf16", {"group_size": True}, "group_size",
     "-1 (one group) or a positive group length", "True"),
    ("fp8-w8a16", {"weight_strategy": "group"}, "weight_strategy",
     "one of ('tensor', 'channel', 'block')", "'group'"),
    ("int8-w8a8", {"activation": "mxfp8"}, "activation", "one of ('dynamic-token'", "'mxfp8'"),
    ("int8-w8a16", {"sym": False}, "sym", "True for int8-w8a16", "False"),
    ("gptq-int4", {"sym": "false"}, "sym", "True or False", "'false'"),
    ("awq-int4", {"act_order": True}, "act_order", "False for awq-int4", "True"),
    ("ct-int4", {"act_order": 1}, "act_order", "True or False", "1"),
    ("mxfp8", {"mx_scale_rule": "nearest"}, "mx_scale_rule", "floor, even, ceil or rceil",
     "'nearest'"),
])
def test_a_value_the_scheme_does_not_take_is_named(scheme, attrs, field, expected, found):
    with pytest.raises(VariantError) as info:
        Variant(scheme, **attrs)
    assert (info.value.field, info.value.found) == (field, found)
    assert expected in info.value.expected
    assert str(info.value).startswith(f"{field}: expected ")
    # a checkpoint says the same of its own attribute
    with pytest.raises(CheckpointError, match=f"^checkpoint.{field}: expected "):
        Checkpoint(scheme, {}, **attrs)


def test_an_unknown_attribute_is_a_type_error():
    with pytest.raises(TypeError, match="group"):
        Variant("gptq-int4", group=32)


def test_the_hash_reads_every_field():
    # variants of one scheme are distinct keys, not one bucket (the hash was the scheme's)
    variants = scheme_variants("gptq-int4")
    assert len({hash(v) for v in variants}) == len(variants)


def test_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        Variant("gptq-int4").group_size = 32


@pytest.mark.parametrize("scheme", SCHEMES)
def test_expansion_is_the_default_then_each_override(scheme):
    variants = scheme_variants(scheme)
    assert variants[0] == Variant(scheme) and variants[0].overrides() == {}
    assert len(variants) == 1 + len(SCHEMES[scheme].variant_overrides())
    assert len({repr(v) for v in variants}) == len(variants), "a variant twice"
    for v in variants:
        # a case carries the overrides: they give the same variant back
        assert Variant(scheme, **v.overrides()) == v
        assert set(v.overrides()) <= set(VARIANT_FIELDS)
    for v, override in zip(variants[1:], SCHEMES[scheme].variant_overrides(), strict=True):
        assert {f: getattr(v, f) for f in override} == override


@pytest.mark.parametrize("scheme", SCHEMES)
def test_every_checkpoint_format_is_a_variant(scheme):
    """A format decodes the same tensors differently (GPTQ v1 vs v2 zeros): the suites, which
    run scheme_variants, must see each one (vLLM's ignored gptq_v2 went unseen without it)."""
    formats = {q.checkpoint_format for q in scheme_variants(scheme)}
    assert formats == set(SCHEMES[scheme].checkpoint_formats or (None,))


@pytest.mark.parametrize(("variant", "text"), [
    (Variant("gptq-int4"), "gptq-int4 gptq g128 sym"),
    (Variant("awq-int4", group_size=-1), "awq-int4 awq g-1 asym"),
    (Variant("gptq-int4", checkpoint_format="gptq_v2", group_size=32, sym=False,
             act_order=True), "gptq-int4 gptq_v2 g32 asym act-order"),
    (Variant("fp8-w8a8"), "fp8-w8a8 block act=dynamic-group"),
    (Variant("int8-w8a16", weight_strategy="tensor"), "int8-w8a16 tensor"),
    (Variant("nvfp4", checkpoint_format="ct", activation="nvfp4"), "nvfp4 ct group act=nvfp4"),
    (Variant("bf16"), "bf16"),
])
def test_describe(variant, text):
    assert variant.describe() == text


def test_a_checkpoint_holds_its_variant():
    v = Variant("gptq-int4", group_size=32, act_order=True)
    ckpt = Checkpoint(v, {})
    assert ckpt.variant is v and Variant.of(ckpt) is v
    assert (ckpt.scheme, ckpt.group_size, ckpt.act_order) == ("gptq-int4", 32, True)
    assert Checkpoint("gptq-int4", {}, group_size=32, act_order=True).variant == v
    # replace changes the variant's attribute, the rest stays
    other = dataclasses.replace(ckpt, group_size=64)
    assert other.variant == dataclasses.replace(v, group_size=64)
    assert dataclasses.replace(ckpt, tensors={}).variant is v
    with pytest.raises(CheckpointError, match="checkpoint.group_size"):
        dataclasses.replace(ckpt, group_size=48)


def test_of_reads_an_object_with_a_checkpoints_attributes():
    # a vendor's checkpoint class: its attributes, None for the scheme's defaults
    duck = SimpleNamespace(scheme="awq-int4", group_size=32, sym=None)
    assert Variant.of(duck) == Variant("awq-int4", group_size=32)
    with pytest.raises(VariantError, match="^scheme: expected a scheme name, a Variant or a "
                       "Checkpoint"):
        Variant.of(3)
