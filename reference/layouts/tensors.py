"""The tensors each checkpoint format holds, declared once as data.

Shapes are written in the sizes of one linear per expert, out x in:

    E               experts                  out, in      the linear's output and input sizes
    in/pack         in / (32 // bits), exact  groups       in / group_size (1 for group_size -1)
    ceil(in/pack)   words of a bitstream     in/32        MX blocks (in % 32 == 0)
    ceil(out/128)   DeepSeek 128 x 128 weight blocks

The two linears of a layer tie them together: w13 is R x K (R = N, or 2N gated), w2 is K x N.
`check.py` checks a checkpoint against these declarations before any reader runs, and the
tests generate their corruptions from them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..schemes import (
    ACT_STATIC_TENSOR,
    STRATEGY_BLOCK,
    STRATEGY_CHANNEL,
    STRATEGY_TENSOR,
    tensor_layout,
)

FLOAT = (torch.float16, torch.bfloat16, torch.float32)
INT32 = (torch.int32,)
INDEX = (torch.int32, torch.int64)

# When a declared tensor must be present (every one of them may be)
ALWAYS = "always"
IF_ASYM = "asym"  # zero points: required unless sym (a sym file may carry symmetric zeros)
IF_ACT_ORDER = "act_order"  # g_idx: required with act order (else it must be k // g)
IF_BIAS = "bias"  # biases: required when the problem has bias
OPTIONAL = "optional"


@dataclass(frozen=True)
class TensorDecl:
    """One tensor of a linear ({prefix}_{suffix}) or of the layer."""

    name: str
    role: str  # "weight", "scale", "zeros", "g_idx", "shape", "bias", "input_scale"
    dtypes: tuple[torch.dtype, ...]
    shapes: tuple[tuple[str, ...], ...]  # accepted shapes, the usual one first
    presence: str = ALWAYS
    linear: str | None = None  # "w13" or "w2": whose out / in the shape's sizes are

    def required(self, sym: bool, act_order: bool, bias: bool) -> bool:
        return {ALWAYS: True, IF_ASYM: not sym, IF_ACT_ORDER: act_order, IF_BIAS: bias,
                OPTIONAL: False}[self.presence]


def _linear(suffix, role, dtypes, *shapes, presence=ALWAYS):
    return suffix, role, dtypes, shapes, presence


# Per layout family: (suffix, role, dtypes, shapes, presence) of each linear's tensors.
_GPTQ = (
    _linear("qweight", "weight", INT32, ("E", "in/pack", "out")),
    _linear("scales", "scale", FLOAT, ("E", "groups", "out")),
    _linear("qzeros", "zeros", INT32, ("E", "groups", "ceil(out/pack)"), presence=IF_ASYM),
    _linear("g_idx", "g_idx", INDEX, ("E", "in"), presence=IF_ACT_ORDER),
)
_AWQ = (
    _linear("qweight", "weight", INT32, ("E", "in", "out/pack")),
    _linear("scales", "scale", FLOAT, ("E", "groups", "out")),
    _linear("qzeros", "zeros", INT32, ("E", "groups", "out/pack"), presence=IF_ASYM),
)
_CT = (
    _linear("weight_packed", "weight", INT32, ("E", "out", "ceil(in/pack)")),
    _linear("weight_scale", "scale", FLOAT, ("E", "out", "groups")),
    _linear("weight_zero_point", "zeros", INT32, ("E", "ceil(out/pack)", "groups"),
            presence=IF_ASYM),
    _linear("weight_g_idx", "g_idx", INDEX, ("E", "in"), presence=IF_ACT_ORDER),
    _linear("weight_shape", "shape", (torch.int64,), ("E", "2"), presence=OPTIONAL),
)
_WEIGHT_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "int8": torch.int8,
                  "fp8": torch.float8_e4m3fn, "mxfp8": torch.float8_e4m3fn}
_SCALE_SHAPES = {STRATEGY_CHANNEL: (("E", "out", "1"),),
                 STRATEGY_BLOCK: (("E", "ceil(out/128)", "ceil(in/128)"),),
                 STRATEGY_TENSOR: (("E",),)}


def layout_family(ckpt) -> str:
    """"gptq", "awq", "ct" or "dense": which reader (and which tensors) a checkpoint has."""
    return tensor_layout(ckpt.info.family, ckpt.checkpoint_format)


def weight_dtype(ckpt) -> torch.dtype:
    """The dtype of an unpacked ("dense" layout) checkpoint's {p}_weight."""
    family = ckpt.info.family
    return _WEIGHT_DTYPES[ckpt.scheme if family == "dense" else family]


def _linear_tensors(ckpt, p: str) -> tuple:
    layout = layout_family(ckpt)
    if layout != "dense":
        return {"gptq": _GPTQ, "awq": _AWQ, "ct": _CT}[layout]
    family = ckpt.info.family
    weight = _linear("weight", "weight", (weight_dtype(ckpt),), ("E", "out", "in"))
    if family == "dense":
        return (weight,)
    if family == "mxfp8":
        return weight, _linear("weight_scale", "scale", (torch.uint8,), ("E", "out", "in/32"))
    shapes = _SCALE_SHAPES[ckpt.weight_strategy]
    if p == "w13" and ckpt.weight_strategy == STRATEGY_TENSOR:
        shapes = (*shapes, ("E", "2"))  # one scale per shard: w1 rows, w3 rows
    return weight, _linear("weight_scale", "scale", FLOAT, *shapes)


def declared_tensors(ckpt) -> dict[str, TensorDecl]:
    """Every tensor a checkpoint with `ckpt`'s scheme and attributes may hold, by name."""
    out = {}
    for p in ("w13", "w2"):
        for suffix, role, dtypes, shapes, presence in _linear_tensors(ckpt, p):
            out[f"{p}_{suffix}"] = TensorDecl(f"{p}_{suffix}", role, dtypes, shapes, presence,
                                              linear=p)
        if ckpt.activation == ACT_STATIC_TENSOR:
            out[f"{p}_input_scale"] = TensorDecl(f"{p}_input_scale", "input_scale", FLOAT,
                                                 (("E",),), linear=p)
    for p in ("w13", "w2"):
        out[f"{p}_bias"] = TensorDecl(f"{p}_bias", "bias", FLOAT, (("E", "out"),), IF_BIAS,
                                      linear=p)
    return out


__all__ = ["TensorDecl", "declared_tensors", "layout_family", "weight_dtype"]
