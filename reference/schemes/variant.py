"""`Variant`: one scheme variant, the attributes a checkpoint of a scheme is stored and read
with beyond the scheme's name, each resolved from the scheme's defaults unless given.

    Variant("gptq-int4")                                   the scheme's defaults
    Variant("gptq-int4", group_size=32, act_order=True)    a variant
    Variant.of(x)                                          from a Variant, a scheme name or a
                                                           Checkpoint (which holds one)
    scheme_variants("gptq-int4")                           the default and the variants the
                                                           suites and selection cover
    variant.overrides()                                    what differs from the defaults
    variant.replace(group_size=32)                         changed, defaults resolved again
    variant.describe()                                     "gptq-int4 gptq g128 sym"

A reference `Checkpoint` holds one (`checkpoint.variant`), a backend's `supports` receives one,
a conformance case holds one (its id and JSON are derived from `overrides()`), and the suites
enumerate them. Compared and hashed as a value, all fields. Facts only: no
tensor math, so both sides of the import wall read it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, fields

from .elements import MX_SCALE_RULES, MxScaleRule
from .table import (
    PACKED_LAYOUTS,
    SCHEMES,
    STRATEGY_GROUP,
    FormatRecord,
    Scheme,
    format_record,
    get_scheme,
    scheme_format,
)


class VariantError(ValueError):
    """A variant attribute the scheme does not take; names the attribute, what was expected and
    what was found (`group_size: expected one of (-1, 32, 64, 128), found 48`)."""

    def __init__(self, field: str, expected: str, found: str):
        self.field, self.expected, self.found = field, expected, found
        super().__init__(f"{field}: expected {expected}, found {found}")


@dataclass(frozen=True)
class Variant:
    """A scheme and the attributes its checkpoints are stored with. Attributes left None take
    the scheme's default (`Scheme.defaults`); `sym` takes the checkpoint format's (AutoAWQ
    files carry zero points: False for AWQ, else True).

      group_size         -1 (one group over the input dimension) or the group length
      sym                no zero points stored when True
      checkpoint_format  "gptq" (v1, stored zero z-1) / "gptq_v2" / "awq" / "ct-0.17" / ...
                         (None: the scheme is stored one way)
      act_order          g_idx tensors present (GPTQ desc_act, compressed-tensors actorder)
      weight_strategy    "tensor", "channel", "group" or "block" scales (None: 16-bit)
      activation         activation quantization mode, see `schemes.ACT_*`
      mx_scale_rule      E8M0 rule for MX activations (MXFP8, MXFP4): a `MxScaleRule` value
    """

    scheme: str
    group_size: int | None = None
    sym: bool | None = None
    checkpoint_format: str | None = None
    act_order: bool = False
    weight_strategy: str | None = None
    activation: str | None = None
    mx_scale_rule: str = MxScaleRule.FLOOR.value

    def __post_init__(self):
        if not isinstance(self.scheme, str) or self.scheme not in SCHEMES:
            raise VariantError("scheme", f"one of {', '.join(SCHEMES)}", repr(self.scheme))
        info = self.info
        for name, value in _resolved(info, self).items():
            object.__setattr__(self, name, value)
        _check(info, self)

    # Comparing with a scheme name is a mistake a vendor backend's `supports` makes silently
    # (every answer False): it raises instead. The hash is the dataclass's, over every field.
    def __eq__(self, other) -> bool:
        if isinstance(other, str):
            raise TypeError(f"a Variant is compared with the string {other!r}: compare its "
                            f"scheme name, variant.scheme == {other!r} (supports() receives a "
                            "Variant, not a scheme name)")
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self.__dict__ == other.__dict__

    @classmethod
    def of(cls, obj) -> Variant:
        """From a Variant, a scheme name (its defaults) or anything holding a Variant at
        `.variant` (a Checkpoint)."""
        if isinstance(obj, Variant):
            return obj
        if isinstance(obj, str):
            return cls(obj)
        held = getattr(obj, "variant", None)
        if isinstance(held, Variant):
            return held
        scheme = getattr(obj, "scheme", None)
        if not isinstance(scheme, str):
            raise VariantError("scheme", "a scheme name, a Variant or a Checkpoint",
                               repr(obj)[:80])
        # an object with a checkpoint's attributes (a vendor's checkpoint class)
        return cls(scheme, **{f: getattr(obj, f) for f in VARIANT_FIELDS
                              if getattr(obj, f, None) is not None})

    @classmethod
    def defaults(cls, scheme: str) -> Variant:
        """The scheme's default variant (the same as `Variant(scheme)`)."""
        return cls(scheme)

    @property
    def info(self) -> Scheme:
        return get_scheme(self.scheme)

    @property
    def bits(self) -> int:
        return self.info.weight_bits

    @property
    def layout(self) -> str:
        """Tensor layout: "gptq", "awq", "ct", "ct-int" or "dense" (one tensor per linear)."""
        return scheme_format(self).layout

    @property
    def record(self) -> FormatRecord:
        """The format record of this variant's stored form (code offset, zero domain, ...)."""
        return format_record(self)

    @property
    def packed(self) -> bool:
        """Integer codes with group scales (GPTQ, AWQ, compressed-tensors, W4A8, W4AFP8)."""
        return self.layout in PACKED_LAYOUTS

    def groups(self, n_in: int) -> int:
        return 1 if self.group_size == -1 else n_in // self.group_size

    def overrides(self) -> dict:
        """The attributes that differ from what the scheme's defaults resolve to (a case's
        `attrs`), in field order: the variant is `Variant(scheme, **overrides())`. Resolved
        again after each round, since a given attribute changes another's default (a GPTQ
        file of w4a8-int8 told `sym=False` needs both, though False is the scheme's sym).
        Computed once per variant (every case id asks: 8360 certify ids cost 6 s before)."""
        return dict(_overrides(self))

    def replace(self, **changes) -> Variant:
        """This variant with `changes`, the attributes it took from the defaults resolved
        again (as `Variant(scheme, **changes)` would: w4a8-int8's AWQ zero points do not follow
        it into a GPTQ file). A change of scheme keeps every other attribute as it is (the
        same stored weights read by another scheme, harness/numerics.py)."""
        if changes.get("scheme", self.scheme) != self.scheme:
            return Variant(**{**{f.name: getattr(self, f.name) for f in fields(self)}, **changes})
        return Variant(self.scheme, **{**self.overrides(), **changes})

    def describe(self) -> str:
        """The variant as people read it: "gptq-int4 gptq_v2 g32 asym act-order"."""
        parts = [self.scheme]
        if self.checkpoint_format:
            parts.append(self.checkpoint_format)
        if self.packed:
            parts.append(f"g{self.group_size}")
            parts.append("sym" if self.sym else "asym")
            if self.act_order:
                parts.append("act-order")
        elif self.weight_strategy:
            parts.append(self.weight_strategy)
        if self.activation != "none":
            parts.append(f"act={self.activation}")
        return " ".join(parts)


# the attributes beyond the scheme name, in declaration order
VARIANT_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Variant) if f.name != "scheme")


def scheme_variants(scheme: str) -> list[Variant]:
    """The default variant of `scheme` and those selection and the suites cover (the scheme
    table's `variant_overrides`: zero points, act-order, the smallest group, other checkpoint
    formats, weight strategies and activation modes, what the tools ship)."""
    info = get_scheme(scheme)
    return [Variant(scheme)] + [Variant(scheme, **o) for o in info.variant_overrides()]


def _resolved(info: Scheme, v: Variant) -> dict:
    """The attributes left None, from the scheme's defaults; `sym` from the checkpoint format
    given (a GPTQ file of w4a8-int8, whose default format is AWQ's with zero points, is
    symmetric unless told)."""
    defaults = info.defaults()
    out = {f: defaults[f] for f in ("checkpoint_format", "group_size", "weight_strategy",
                                    "activation") if getattr(v, f) is None}
    fmt = out.get("checkpoint_format", v.checkpoint_format)
    _one_of("checkpoint_format", fmt, info.checkpoint_formats)
    if v.sym is None:
        out["sym"] = info.format(fmt).sym
    return out


def _check(info: Scheme, v: Variant) -> None:
    """VariantError naming the first attribute the scheme does not take."""
    _one_of("weight_strategy", v.weight_strategy, info.strategies)
    _one_of("activation", v.activation, info.activation_modes)
    g = v.group_size
    if info.group_sizes and v.weight_strategy == STRATEGY_GROUP:
        _one_of("group_size", g, info.group_sizes)
    elif isinstance(g, bool) or not isinstance(g, int) or (g != -1 and g <= 0):
        raise VariantError("group_size", "-1 (one group) or a positive group length", repr(g))
    for name in ("sym", "act_order"):
        if not isinstance(getattr(v, name), bool):
            raise VariantError(name, "True or False", repr(getattr(v, name)))
    if not v.sym and not info.asym:
        raise VariantError("sym", f"True for {v.scheme}", "False")
    if v.act_order and not info.act_order:
        raise VariantError("act_order", f"False for {v.scheme}", "True")
    if v.mx_scale_rule not in MX_SCALE_RULES:
        raise VariantError("mx_scale_rule",
                           f"{', '.join(MX_SCALE_RULES[:-1])} or {MX_SCALE_RULES[-1]}",
                           repr(v.mx_scale_rule))


def _one_of(name: str, value, allowed: tuple) -> None:
    if allowed and value not in allowed:
        raise VariantError(name, f"one of {allowed}", repr(value))


__all__ = ["VARIANT_FIELDS", "Variant", "VariantError", "scheme_variants"]


@functools.cache
def _overrides(variant: Variant) -> tuple:
    """`Variant.overrides` as (field, value) pairs, once per variant (frozen, hashable)."""
    out: dict = {}
    while diff := {f: getattr(variant, f) for f in VARIANT_FIELDS
                   if getattr(variant, f) != getattr(Variant(variant.scheme, **out), f)}:
        out.update(diff)
    return tuple((f, out[f]) for f in VARIANT_FIELDS if f in out)
