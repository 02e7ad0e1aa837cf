"""`QuantConfig`: what a backend knows about a layer's quantization before any weight exists
(the engine's quant config), and `checkpoint_spec`: the tensors such a layer loads.

Both are built from the scheme vocabulary alone; a `Checkpoint` (or any object with the same
attributes) or a bare scheme name converts with `QuantConfig.of`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from moecert.reference.schemes import (
    PACKED_LAYOUTS,
    SCHEMES,
    FormatRecord,
    Scheme,
    checkpoint_shape_issue,
    format_record,
    get_scheme,
    scheme_format,
)
from moecert.reference.schemes.tensors import declared_tensors, layer_sizes, tensor_shapes

from .errors import BackendError

_FIELDS = ("group_size", "sym", "checkpoint_format", "act_order", "weight_strategy",
           "activation", "mx_scale_rule")


@dataclass(frozen=True)
class QuantConfig:
    scheme: str
    group_size: int = -1
    sym: bool = True
    checkpoint_format: str | None = None
    act_order: bool = False
    weight_strategy: str | None = None
    activation: str = "none"  # activation quantization mode (schemes.ACT_*)
    mx_scale_rule: str = "floor"

    def __eq__(self, other) -> bool:
        if isinstance(other, str):
            # `quant == "gptq-int4"` (or `quant in {...}`) would be False for every config and
            # a backend comparing so would silently claim nothing: say where the name is.
            raise TypeError(f"a QuantConfig is compared with the string {other!r}: compare "
                            f"its scheme name, quant.scheme == {other!r} (supports() receives "
                            "a QuantConfig, not a scheme name)")
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self.__dict__ == other.__dict__

    def __hash__(self) -> int:
        # the scheme name's hash: `quant in {"gptq-int4", ...}` then reaches __eq__ and raises
        return hash(self.scheme)

    def __post_init__(self):
        g = self.group_size
        if isinstance(g, bool) or not isinstance(g, int) or (g != -1 and g <= 0):
            raise BackendError("group_size", "-1 (one group) or a positive group length",
                               repr(g))

    @classmethod
    def of(cls, obj) -> QuantConfig:
        """From a QuantConfig, a scheme name (the scheme's defaults) or a Checkpoint."""
        if isinstance(obj, QuantConfig):
            return obj
        if isinstance(obj, str):
            return cls.defaults(obj)
        scheme = getattr(obj, "scheme", None)
        if scheme not in SCHEMES:
            raise BackendError("scheme", "a scheme name, QuantConfig or Checkpoint",
                               repr(obj)[:80])
        base = cls.defaults(scheme)
        kw = {f: getattr(obj, f) for f in _FIELDS if getattr(obj, f, None) is not None}
        return cls(**{**base.__dict__, **kw})

    @classmethod
    def defaults(cls, scheme: str) -> QuantConfig:
        try:
            info = get_scheme(scheme)
        except KeyError as e:
            raise BackendError("scheme", "a known scheme name", str(e)) from None
        return cls(scheme=scheme, **info.defaults())

    @classmethod
    def variant(cls, scheme: str, **attrs) -> QuantConfig:
        """The scheme's defaults with `attrs` changed; a checkpoint format given without
        `sym` brings its own default (a GPTQ file of w4a8-int8, whose default format is
        AWQ's with zero points, is symmetric unless told), as a Checkpoint reads it."""
        base = cls.defaults(scheme)
        if "checkpoint_format" in attrs and "sym" not in attrs:
            attrs["sym"] = base.info.format(attrs["checkpoint_format"]).sym
        return cls(**{**base.__dict__, **attrs})

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

    # the old name, still read by triton_moe/backend.py (another branch's file this round)
    is_int_family = packed

    def groups(self, n_in: int) -> int:
        return 1 if self.group_size == -1 else n_in // self.group_size

    def describe(self) -> str:
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


@dataclass(frozen=True)
class TensorSpec:
    dtypes: tuple[torch.dtype, ...]
    shapes: tuple[tuple[int, ...], ...]  # accepted shapes, the usual one first
    required: bool = True

    @property
    def shape(self) -> tuple[int, ...]:
        return self.shapes[0]


def checkpoint_spec(quant: QuantConfig, problem) -> dict[str, TensorSpec]:
    """The checkpoint tensors a layer of `quant` and `problem` loads, by name: the scheme
    table's declarations (`schemes.tensors`) at the problem's sizes.

    Raises BackendError when the problem's shape cannot hold the format at all (an int4 input
    dimension that is not a multiple of 8, a group size that does not divide it): the
    reference's rule, `schemes.checkpoint_shape_issue`.
    """
    issue = checkpoint_shape_issue(quant, problem)
    if issue:
        raise BackendError(issue.tensor, issue.expected, issue.found)
    sizes = layer_sizes(problem)
    return {name: TensorSpec(d.dtypes, tensor_shapes(d, sizes, quant),
                             d.required(quant.sym, quant.act_order, problem.bias))
            for name, d in declared_tensors(quant).items()}


def check_tensor(name: str, t, spec: TensorSpec) -> None:
    """BackendError unless `t` is a tensor of one of the spec's dtypes and shapes."""
    if not isinstance(t, torch.Tensor):
        raise BackendError(name, "a torch.Tensor", type(t).__name__)
    if t.dtype not in spec.dtypes:
        raise BackendError(name, f"dtype {' or '.join(str(d) for d in spec.dtypes)}",
                           str(t.dtype))
    if tuple(t.shape) not in spec.shapes:
        raise BackendError(name, "shape " + " or ".join(str(list(s)) for s in spec.shapes),
                           str(list(t.shape)))


__all__ = ["QuantConfig", "TensorSpec", "check_tensor", "checkpoint_spec"]
