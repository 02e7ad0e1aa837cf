"""`QuantConfig`: what a backend knows about a layer's quantization before any weight exists
(the engine's quant config), and `checkpoint_spec`: the tensors such a layer loads.

Both are built from the scheme vocabulary alone; a `Checkpoint` (or any object with the same
attributes) or a bare scheme name converts with `QuantConfig.of`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from moecert.reference.schemes import (
    ACT_STATIC_TENSOR,
    FP8_BLOCK,
    MX_BLOCK,
    SCHEMES,
    STRATEGY_BLOCK,
    STRATEGY_CHANNEL,
    STRATEGY_TENSOR,
    Scheme,
    checkpoint_shape_issue,
    get_scheme,
    tensor_layout,
)

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
        fmt = info.checkpoint_formats[0] if info.checkpoint_formats else None
        return cls(scheme=scheme, group_size=info.group_sizes[-1] if info.group_sizes else -1,
                   sym=fmt != "awq", checkpoint_format=fmt,
                   weight_strategy=info.strategies[0] if info.strategies else None,
                   activation=info.activation_modes[0])

    @property
    def info(self) -> Scheme:
        return get_scheme(self.scheme)

    @property
    def bits(self) -> int:
        return self.info.weight_bits

    @property
    def layout(self) -> str:
        """Tensor layout family: "gptq", "awq", "ct" or "dense" (one tensor per linear)."""
        return tensor_layout(self.info.family, self.checkpoint_format)

    @property
    def is_int_family(self) -> bool:
        """Packed integer weights with group scales (GPTQ, AWQ, compressed-tensors, W4A8)."""
        return self.layout in ("gptq", "awq", "ct")

    def groups(self, n_in: int) -> int:
        return 1 if self.group_size == -1 else n_in // self.group_size

    def describe(self) -> str:
        parts = [self.scheme]
        if self.checkpoint_format:
            parts.append(self.checkpoint_format)
        if self.is_int_family:
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
    shape: tuple[int, ...]
    required: bool = True


_FLOAT = (torch.float16, torch.bfloat16, torch.float32)


def checkpoint_spec(quant: QuantConfig, problem) -> dict[str, TensorSpec]:
    """The checkpoint tensors a layer of `quant` and `problem` loads, by name.

    Raises BackendError when the problem's shape cannot hold the format at all (an int4 input
    dimension that is not a multiple of 8, a group size that does not divide it): the
    reference's rule, `schemes.checkpoint_shape_issue`.
    """
    issue = checkpoint_shape_issue(quant, problem)
    if issue:
        raise BackendError(issue.tensor, issue.expected, issue.found)
    P = problem
    dims = {"w13": (P.w13_rows, P.K), "w2": (P.K, P.N)}
    spec: dict[str, TensorSpec] = {}
    for p, (n_out, n_in) in dims.items():
        spec.update(_linear_spec(quant, P.E, p, n_out, n_in))
    if quant.activation == ACT_STATIC_TENSOR:
        for p in dims:
            spec[f"{p}_input_scale"] = TensorSpec(_FLOAT, (P.E,))
    spec["w13_bias"] = TensorSpec(_FLOAT, (P.E, P.w13_rows), required=P.bias)
    spec["w2_bias"] = TensorSpec(_FLOAT, (P.E, P.K), required=P.bias)
    return spec


def _linear_spec(q: QuantConfig, E: int, p: str, n_out: int, n_in: int
                 ) -> dict[str, TensorSpec]:
    bits, i32 = q.bits, (torch.int32,)
    if q.is_int_family:
        per = 32 // bits
        G = q.groups(n_in)
        zeros_required = not q.sym
        if q.layout in ("gptq", "awq"):
            pack_in = q.layout == "gptq"
            qshape = (E, n_in // per, n_out) if pack_in else (E, n_in, n_out // per)
            out = {f"{p}_qweight": TensorSpec(i32, qshape),
                   f"{p}_scales": TensorSpec(_FLOAT, (E, G, n_out)),
                   f"{p}_qzeros": TensorSpec(i32, (E, G, n_out // per), zeros_required)}
            if q.layout == "gptq":
                out[f"{p}_g_idx"] = TensorSpec((torch.int32, torch.int64), (E, n_in),
                                               q.act_order)
            return out
        words = -(-n_in * bits // 32)  # dense and padded packing agree for 4 and 8 bits
        return {f"{p}_weight_packed": TensorSpec(i32, (E, n_out, words)),
                f"{p}_weight_scale": TensorSpec(_FLOAT, (E, n_out, G)),
                f"{p}_weight_zero_point": TensorSpec(i32, (E, -(-n_out * bits // 32), G),
                                                     zeros_required),
                f"{p}_weight_g_idx": TensorSpec((torch.int32, torch.int64), (E, n_in),
                                                q.act_order),
                f"{p}_weight_shape": TensorSpec((torch.int64,), (E, 2), False)}
    family = q.info.family
    if family == "dense":
        dtype = torch.bfloat16 if q.scheme == "bf16" else torch.float16
        return {f"{p}_weight": TensorSpec((dtype,), (E, n_out, n_in))}
    wdtype = torch.int8 if family == "int8" else torch.float8_e4m3fn
    out = {f"{p}_weight": TensorSpec((wdtype,), (E, n_out, n_in))}
    name = f"{p}_weight_scale"
    if family == "mxfp8":
        out[name] = TensorSpec((torch.uint8,), (E, n_out, n_in // MX_BLOCK))
    elif q.weight_strategy == STRATEGY_CHANNEL:
        out[name] = TensorSpec(_FLOAT, (E, n_out, 1))
    elif q.weight_strategy == STRATEGY_BLOCK:
        out[name] = TensorSpec(_FLOAT, (E, -(-n_out // FP8_BLOCK), -(-n_in // FP8_BLOCK)))
    elif q.weight_strategy == STRATEGY_TENSOR:
        # w13 may carry one scale per shard (w1 rows, w3 rows): [E, 2]
        out[name] = TensorSpec(_FLOAT, (E, 2) if p == "w13" else (E,))
    else:
        raise BackendError("quant.weight_strategy", "tensor, channel or block",
                           repr(q.weight_strategy))
    return out


def check_tensor(name: str, t, spec: TensorSpec) -> None:
    """BackendError unless `t` is a tensor of one of the spec's dtypes and its shape."""
    if not isinstance(t, torch.Tensor):
        raise BackendError(name, "a torch.Tensor", type(t).__name__)
    if t.dtype not in spec.dtypes:
        raise BackendError(name, f"dtype {' or '.join(str(d) for d in spec.dtypes)}",
                           str(t.dtype))
    if tuple(t.shape) != spec.shape and not _tensor_scale_alternative(name, t, spec):
        raise BackendError(name, f"shape {list(spec.shape)}", str(list(t.shape)))


def _tensor_scale_alternative(name: str, t, spec: TensorSpec) -> bool:
    # per-tensor w13 scales come as [E] (one scale) or [E, 2] (w1, w3 shard scales)
    return (name == "w13_weight_scale" and spec.shape[1:] == (2,)
            and tuple(t.shape) == spec.shape[:1])


__all__ = ["QuantConfig", "TensorSpec", "check_tensor", "checkpoint_spec"]
