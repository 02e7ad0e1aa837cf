"""The tensors each checkpoint layout holds, declared once as data, and the integer rules that
turn a declared shape into sizes.

Shapes are written in the sizes of one linear per expert, out x in:

    E               experts                  out, in      the linear's output and input sizes
    in/pack         in / (32 // bits), exact  groups       in / group_size (1 for group_size -1)
    ceil(in/pack)   words of a bitstream     in/32        MX blocks (in % 32 == 0)
    in/2            bytes of two FP4 elements (in % 2 == 0)
    ceil(out/128)   DeepSeek 128 x 128 weight blocks
    in/2            e2m1 pairs (one byte each)  in/16      NVFP4 blocks (in % 16 == 0)
    in/4/3          bytes of fp6 elements, four in three (in % 4 == 0)

The two linears of a layer tie them together: w13 is R x K (R = N, or 2N gated), w2 is K x N.
The reference's `layouts/check.py` checks a checkpoint against these declarations before any
reader runs, the kernels' `checkpoint_spec` is these declarations at a problem's sizes,
`random_checkpoint` draws them, and the tests generate their corruptions from them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction

import torch

from .table import (
    FP8_BLOCK,
    STATIC_INPUT_MODES,
    STRATEGY_BLOCK,
    STRATEGY_CHANNEL,
    STRATEGY_TENSOR,
    get_scheme,
    layout_of,
    scheme_format,
)

FLOAT = (torch.float16, torch.bfloat16, torch.float32)
INT32 = (torch.int32,)
INDEX = (torch.int32, torch.int64)
FP32 = (torch.float32,)

# When a declared tensor must be present (every one of them may be)
ALWAYS = "always"
IF_ASYM = "asym"  # zero points: required unless sym (a sym file may carry symmetric zeros)
IF_ACT_ORDER = "act_order"  # g_idx: required with act order (else it must be k // g)
IF_BIAS = "bias"  # biases: required when the problem has bias
OPTIONAL = "optional"

PREFIXES = ("w13", "w2")
# The layer's sizes: E experts, w13 is R x K (R = N or 2N), w2 is K x N.
LINEAR_SIZES = {"w13": {"out": "R", "in": "K"}, "w2": {"out": "K", "in": "N"}}


@dataclass(frozen=True)
class TensorDecl:
    """One tensor of a linear ({prefix}_{suffix}) or of the layer."""

    name: str
    role: str  # "weight", "scale", "global_scale", "zeros", "g_idx", "shape", "bias",
    #            "input_scale", "pre_quant_scale" (multiplies the GEMM's input per column)
    dtypes: tuple[torch.dtype, ...]
    shapes: tuple[tuple[str, ...], ...]  # accepted shapes, the usual one first
    presence: str = ALWAYS
    linear: str | None = None  # "w13" or "w2": whose out / in the shape's sizes are
    written_when_sym: bool = False  # zero points the producing tool writes even when sym

    def required(self, sym: bool, act_order: bool, bias: bool) -> bool:
        return {ALWAYS: True, IF_ASYM: not sym, IF_ACT_ORDER: act_order, IF_BIAS: bias,
                OPTIONAL: False}[self.presence]


def _linear(suffix, role, dtypes, *shapes, presence=ALWAYS, written_when_sym=False):
    return suffix, role, dtypes, shapes, presence, written_when_sym


# Per integer-code layout: (suffix, role, dtypes, shapes, presence, written_when_sym) of each
# linear's tensors.
PACKED_TENSORS = {
    "gptq": (
        _linear("qweight", "weight", INT32, ("E", "in/pack", "out")),
        _linear("scales", "scale", FLOAT, ("E", "groups", "out")),
        _linear("qzeros", "zeros", INT32, ("E", "groups", "ceil(out/pack)"), presence=IF_ASYM,
                written_when_sym=True),  # AutoGPTQ / GPTQModel write the symmetric zero
        _linear("g_idx", "g_idx", INDEX, ("E", "in"), presence=IF_ACT_ORDER),
    ),
    "awq": (
        _linear("qweight", "weight", INT32, ("E", "in", "out/pack")),
        _linear("scales", "scale", FLOAT, ("E", "groups", "out")),
        _linear("qzeros", "zeros", INT32, ("E", "groups", "out/pack"), presence=IF_ASYM),
    ),
    "ct": (
        _linear("weight_packed", "weight", INT32, ("E", "out", "ceil(in/pack)")),
        _linear("weight_scale", "scale", FLOAT, ("E", "out", "groups")),
        _linear("weight_zero_point", "zeros", INT32, ("E", "ceil(out/pack)", "groups"),
                presence=IF_ASYM),
        _linear("weight_g_idx", "g_idx", INDEX, ("E", "in"), presence=IF_ACT_ORDER),
        _linear("weight_shape", "shape", (torch.int64,), ("E", "2"), presence=OPTIONAL),
    ),
    # AMD Quark int4 per group: AWQ's shapes and packing under Quark's names; it writes the
    # (zero) zero points of symmetric files too
    "quark-int": (
        _linear("weight", "weight", INT32, ("E", "in", "out/pack")),
        _linear("weight_scale", "scale", FLOAT, ("E", "groups", "out")),
        _linear("weight_zero_point", "zeros", INT32, ("E", "groups", "out/pack"),
                presence=IF_ASYM, written_when_sym=True),
    ),
    # NVIDIA ModelOpt INT4 AWQ: two signed codes a byte along out, fp32 group scales, and the
    # AWQ smoothing factor per input channel that multiplies the GEMM's input (gate and up
    # share one input, so one pre_quant_scale: the export writes them equal)
    "modelopt-int": (
        _linear("weight", "weight", (torch.uint8,), ("E", "out/2", "in")),
        _linear("weight_scale", "scale", FLOAT, ("E", "out", "groups")),
        _linear("pre_quant_scale", "pre_quant_scale", FLOAT, ("E", "in")),
    ),
    # compressed-tensors int-quantized (W4AFP8): one signed code per int8, symmetric
    "ct-int": (
        _linear("weight", "weight", (torch.int8,), ("E", "out", "in")),
        _linear("weight_scale", "scale", FLOAT, ("E", "out", "groups")),
    ),
}
# Unpacked weights: the scale's shapes per weight strategy
STRATEGY_SCALE_SHAPES = {STRATEGY_CHANNEL: (("E", "out", "1"),),
                         STRATEGY_BLOCK: (("E", f"ceil(out/{FP8_BLOCK})",
                                           f"ceil(in/{FP8_BLOCK})"),),
                         STRATEGY_TENSOR: (("E",),)}


def weight_dtype(attrs) -> torch.dtype:
    """The dtype of an unpacked ("dense" layout) checkpoint's {p}_weight: the element
    record's storage."""
    return get_scheme(attrs.scheme).weight_element.storage


def _scale_dtypes(info) -> tuple[torch.dtype, ...]:
    """Float scales in any float dtype the tools write; coded scales in their element's."""
    return FLOAT if info.scale_element is None else (info.scale_element.storage,)


def _linear_tensors(attrs, p: str) -> tuple:
    layout = layout_of(attrs)
    if layout != "dense":
        return PACKED_TENSORS[layout]
    info = get_scheme(attrs.scheme)
    fmt = scheme_format(attrs)
    per_byte = info.elements_per_byte  # elements packed along in, several to a byte
    weight = _linear(fmt.suffix("weight", "weight"), "weight", (weight_dtype(attrs),),
                     ("E", "out", "in" if per_byte == 1 else f"in/{per_byte}"))
    if info.scale_encoding == "none":
        return (weight,)
    if info.scale_block:  # the format fixes the block: one scale per scale_block along in
        shapes = (("E", "out", f"in/{info.scale_block}"),)
    else:
        shapes = STRATEGY_SCALE_SHAPES[attrs.weight_strategy]
        if p == "w13" and attrs.weight_strategy == STRATEGY_TENSOR:
            shapes = (*shapes, ("E", "2"))  # one scale per shard: w1 rows, w3 rows
    scale = _linear("weight_scale", "scale", _scale_dtypes(info), *shapes)
    if info.weight_element.kind == "int":
        # AMD Quark writes a zero point beside each int8 scale (0 for its symmetric schemes,
        # the only ones these schemes hold: the reader requires 0)
        return weight, scale, _linear("weight_zero_point", "zeros", (torch.int8, torch.int32),
                                      *shapes, presence=OPTIONAL)
    if info.global_scale == "none":
        return weight, scale
    return weight, scale, _linear(fmt.suffix("global_scale", "weight_global_scale"),
                                  "global_scale", FP32, *_per_shard_shapes(p))


def _per_shard_shapes(p: str) -> tuple[tuple[str, ...], ...]:
    """[E], and for w13 also [E, 2]: one value per w1 / w3 shard."""
    return (("E",), ("E", "2")) if p == "w13" else (("E",),)


def _input_scale(attrs, p: str) -> TensorDecl:
    """{p}_input_scale (or the format's name for it): one static scale per expert, per shard
    for w13 where the scheme's global scales are per shard; fp32 there, as those tools write."""
    info = get_scheme(attrs.scheme)
    name = f"{p}_{scheme_format(attrs).suffix('input_scale', 'input_scale')}"
    if info.global_scale == "tensor":
        return TensorDecl(name, "input_scale", FP32, _per_shard_shapes(p), linear=p)
    return TensorDecl(name, "input_scale", FLOAT, (("E",),), linear=p)


def input_scale_name(attrs, p: str) -> str:
    """The name of linear `p`'s static input scale in `attrs`' format."""
    return _input_scale(attrs, p).name


def tensor_name(attrs, p: str, role: str) -> str | None:
    """The name of linear `p`'s tensor of `role` ("weight", "scale", "zeros", "g_idx",
    "shape", "global_scale", "input_scale", "bias") in `attrs`' layout and format, or None
    where the layout has no such tensor: the one place names come from."""
    if role == "input_scale":
        return input_scale_name(attrs, p)
    if role == "bias":
        return f"{p}_bias"
    for suffix, r, *_ in _linear_tensors(attrs, p):
        if r == role:
            return f"{p}_{suffix}"
    return None


def role_names(attrs, p: str) -> dict[str, str]:
    """{role: tensor name} of linear `p`'s tensors in `attrs`' layout (`tensor_name`)."""
    return {r: f"{p}_{suffix}" for suffix, r, *_ in _linear_tensors(attrs, p)}


def in_major(attrs, p: str, role: str) -> bool:
    """Whether linear `p`'s tensor of `role` is stored in-major, its last dimension along out
    (GPTQ's qweight [E, in/pack, out] and scales [E, groups, out]), rather than out-major
    ([E, out, ...]): read off the declared usual shape."""
    for _, r, _, shapes, *_ in _linear_tensors(attrs, p):
        if r == role:
            last = shapes[0][-1].removeprefix("ceil(").removesuffix(")")
            return last.partition("/")[0] == "out"
    raise KeyError(f"{layout_of(attrs)} layout has no {role} tensor")


def pre_quant_scale_name(attrs, p: str) -> str | None:
    """The name of linear `p`'s per-input-channel input multiplier (ModelOpt's AWQ
    `pre_quant_scale`) in `attrs`' layout, or None where the layout has none: what the
    reference's GEMM inputs and every backend that claims the layout must apply."""
    return tensor_name(attrs, p, "pre_quant_scale")


def declared_tensors(attrs) -> dict[str, TensorDecl]:
    """Every tensor a checkpoint with `attrs`' scheme and attributes may hold, by name
    (`attrs`: a `Variant`, or a Checkpoint holding one)."""
    out = {}
    for p in PREFIXES:
        for suffix, role, dtypes, shapes, presence, sym_too in _linear_tensors(attrs, p):
            out[f"{p}_{suffix}"] = TensorDecl(f"{p}_{suffix}", role, dtypes, shapes, presence,
                                              linear=p, written_when_sym=sym_too)
        if attrs.activation in STATIC_INPUT_MODES:
            d = _input_scale(attrs, p)
            out[d.name] = d
        elif any(m in STATIC_INPUT_MODES for m in get_scheme(attrs.scheme).activation_modes):
            # a file made for static activations run without them (a ModelOpt NVFP4 file run
            # W4A16 on Hopper) still holds its input scales: allowed, and unused
            d = _input_scale(attrs, p)
            out[d.name] = replace(d, presence=OPTIONAL)
    for p in PREFIXES:
        out[f"{p}_bias"] = TensorDecl(f"{p}_bias", "bias", FLOAT, (("E", "out"),), IF_BIAS,
                                      linear=p)
    return out


# --- declared shapes -> sizes (integer arithmetic only) -------------------------------------

def parse_dim(dim: str, linear: str | None, group_size: int, bits: int
              ) -> tuple[str | None, int, bool]:
    """(layer size symbol or None for a constant, divisor, exact) of one declared dimension."""
    if dim.isdigit():
        return None, int(dim), True
    if dim == "E":
        return "E", 1, True
    exact = not dim.startswith("ceil(")
    expr = dim.removeprefix("ceil(").removesuffix(")")
    if expr == "groups":
        return (None, 1, True) if group_size == -1 else (LINEAR_SIZES[linear]["in"], group_size,
                                                         True)
    side, _, div = expr.partition("/")
    divisor = 1 if not div else 32 // bits if div == "pack" else Fraction(div)
    if divisor == int(divisor):
        divisor = int(divisor)  # else a ratio: "in/4/3", four fp6 elements in three bytes
    return LINEAR_SIZES[linear][side], divisor, exact


def dim_size(dim: str, linear: str | None, sizes: dict[str, int], group_size: int,
             bits: int) -> int:
    """The size of declared dimension `dim` for the layer `sizes` (E, R, K, N)."""
    symbol, div, _ = parse_dim(dim, linear, group_size, bits)
    return div if symbol is None else -(-sizes[symbol] // div)


def layer_sizes(problem) -> dict[str, int]:
    """E, R (w13 rows), K, N of anything shaped like an `MoEProblem`."""
    return {"E": problem.E, "R": problem.w13_rows, "K": problem.K, "N": problem.N}


def tensor_shapes(decl: TensorDecl, sizes: dict[str, int], attrs) -> tuple[tuple[int, ...], ...]:
    """`decl`'s accepted shapes at the layer `sizes`, for a checkpoint of `attrs`."""
    bits = get_scheme(attrs.scheme).weight_bits
    return tuple(tuple(dim_size(d, decl.linear, sizes, attrs.group_size, bits) for d in shape)
                 for shape in decl.shapes)


__all__ = ["LINEAR_SIZES", "PREFIXES", "TensorDecl", "declared_tensors", "dim_size",
           "in_major", "input_scale_name", "layer_sizes", "parse_dim", "pre_quant_scale_name",
           "role_names", "tensor_name",
           "tensor_shapes", "weight_dtype"]
