"""The scheme vocabulary: stable names, what each scheme holds, and the format constants.

This module is data only (no tensor math), which is why kernels may import it. Scheme names
are stable strings: they become keys in results files and never change meaning.
"""

from __future__ import annotations

from dataclasses import dataclass

# --- Format constants (value in the trailing comment) -------------------------------------
INT4_MIN, INT4_MAX = -8, 7
INT8_MIN, INT8_MAX = -128, 127
UINT4_BIAS = 8  # GPTQ uint4b8: stored u means u - 8
UINT8_BIAS = 128  # GPTQ uint8b128: stored u means u - 128
AWQ_PACK_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)  # nibble i of a word holds column 8c + order[i]
F8E4M3_MAX = 448.0
F8E4M3_EXP_BIAS = 7
E8M0_BIAS = 127
E8M0_NAN = 0xFF  # 255
MX_BLOCK = 32
FP8_BLOCK = 128  # DeepSeek-style 128x128 weight blocks
SWIGLUOAI_ALPHA = 1.702
SWIGLUOAI_LIMIT = 7.0

ACTIVATION_DTYPES = ("bf16", "fp16")
ACTIVATIONS = ("silu", "gelu", "swigluoai", "swigluoai-split", "relu2")
GATED_ACTIVATIONS = ("silu", "gelu", "swigluoai", "swigluoai-split")
ACTIVATION_FORMATS = ("standard", "batched")

# Activation quantization modes (what q1/q2 do to a GEMM's input).
ACT_NONE = "none"  # 16-bit activations, no quantization
ACT_DYNAMIC_TOKEN = "dynamic-token"  # int8, one scale per token (row), amax/127
ACT_STATIC_TENSOR = "static-tensor"  # int8, checkpoint input_scale (max over experts)
ACT_DYNAMIC_TENSOR = "dynamic-tensor"  # int8, one scale for the whole GEMM input
ACT_MXFP8 = "mxfp8"  # e4m3 elements, E8M0 scale per 32 along K

# Weight scale granularities.
STRATEGY_TENSOR = "tensor"  # [E] or [E, 2] (w1/w3 shard scales)
STRATEGY_CHANNEL = "channel"  # [E, out, 1]
STRATEGY_GROUP = "group"  # [E, in/g, out] (GPTQ, AWQ) or [E, out, in/g] (compressed-tensors)
STRATEGY_BLOCK = "block"  # [E, ceil(out/128), ceil(in/128)]


@dataclass(frozen=True)
class Scheme:
    """What a scheme name means: its weight family and which options it admits."""

    name: str
    family: str  # "dense", "gptq", "awq", "ct", "int8", "fp8", "mxfp8", "w4a8"
    weight_bits: int
    strategies: tuple[str, ...]
    activation_modes: tuple[str, ...]
    checkpoint_formats: tuple[str, ...] = ()
    group_sizes: tuple[int, ...] = ()
    asym: bool = False  # may carry zero points
    act_order: bool = False  # may carry g_idx

    @property
    def quantized(self) -> bool:
        return self.family != "dense"


_INT_GROUPS = (-1, 32, 64, 128)

SCHEMES: dict[str, Scheme] = {
    s.name: s
    for s in (
        Scheme("bf16", "dense", 16, (), (ACT_NONE,)),
        Scheme("fp16", "dense", 16, (), (ACT_NONE,)),
        Scheme("gptq-int4", "gptq", 4, (STRATEGY_GROUP,), (ACT_NONE,),
               ("gptq", "gptq_v2"), _INT_GROUPS, asym=True, act_order=True),
        Scheme("gptq-int8", "gptq", 8, (STRATEGY_GROUP,), (ACT_NONE,),
               ("gptq", "gptq_v2"), _INT_GROUPS, asym=True, act_order=True),
        Scheme("awq-int4", "awq", 4, (STRATEGY_GROUP,), (ACT_NONE,), ("awq",), _INT_GROUPS,
               asym=True),
        Scheme("ct-int4", "ct", 4, (STRATEGY_GROUP,), (ACT_NONE,),
               ("ct-0.17", "ct-0.18"), _INT_GROUPS, asym=True, act_order=True),
        Scheme("ct-int8", "ct", 8, (STRATEGY_GROUP,), (ACT_NONE,),
               ("ct-0.17", "ct-0.18"), _INT_GROUPS, asym=True, act_order=True),
        Scheme("int8-w8a16", "int8", 8, (STRATEGY_CHANNEL, STRATEGY_TENSOR), (ACT_NONE,)),
        Scheme("fp8-w8a16", "fp8", 8, (STRATEGY_TENSOR, STRATEGY_CHANNEL, STRATEGY_BLOCK),
               (ACT_NONE,)),
        Scheme("int8-w8a8", "int8", 8, (STRATEGY_CHANNEL, STRATEGY_TENSOR),
               (ACT_DYNAMIC_TOKEN, ACT_STATIC_TENSOR, ACT_DYNAMIC_TENSOR)),
        Scheme("w4a8-int8", "w4a8", 4, (STRATEGY_GROUP,), (ACT_DYNAMIC_TOKEN,),
               ("awq", "gptq", "gptq_v2"), _INT_GROUPS, asym=True),
        Scheme("mxfp8", "mxfp8", 8, (STRATEGY_GROUP,), (ACT_NONE, ACT_MXFP8),
               group_sizes=(MX_BLOCK,)),
    )
}

SCHEME_NAMES: tuple[str, ...] = tuple(SCHEMES)


def get_scheme(name: str) -> Scheme:
    """The scheme called `name`; KeyError listing the known names otherwise."""
    try:
        return SCHEMES[name]
    except KeyError:
        raise KeyError(f"unknown scheme {name!r}; known: {', '.join(SCHEMES)}") from None


# --- which shapes a checkpoint can hold ------------------------------------------------------

INT_FAMILIES = ("gptq", "awq", "ct", "w4a8")


def tensor_layout(family: str, checkpoint_format: str | None) -> str:
    """Tensor layout family of a scheme's checkpoint: "gptq", "awq", "ct" or "dense" (one
    weight tensor per linear). W4A8 files come in AWQ or GPTQ layout."""
    if family == "w4a8":
        return "awq" if checkpoint_format == "awq" else "gptq"
    return family if family in ("gptq", "awq", "ct") else "dense"


@dataclass(frozen=True)
class ShapeIssue:
    """Why no checkpoint can hold a shape, in the errors' form: the tensor (or dimension),
    what its format needs, what the shape gives."""

    tensor: str  # the tensor or option at fault
    expected: str
    found: str
    linear: str = ""  # "w13" or "w2": the linear that cannot be held

    def __str__(self) -> str:
        return f"{self.tensor}: expected {self.expected}, found {self.found}"


def checkpoint_shape_issue(quant, problem) -> ShapeIssue | None:
    """None if a checkpoint of `quant` can hold `problem`'s linears, else the first reason
    it cannot (w13 before w2): a group size or MX block that does not divide an input
    dimension, a GPTQ / AWQ packed dimension that is no multiple of the codes per int32 word.

    `quant` is anything with `.scheme`, `.group_size` and `.checkpoint_format` (a kernels
    `QuantConfig`, a reference `Checkpoint`); `problem` anything with `.K`, `.N` and
    `.w13_rows` (an `MoEProblem`). Integer arithmetic only, so kernels may read it too.
    """
    info = get_scheme(quant.scheme)
    layout = tensor_layout(info.family, quant.checkpoint_format)
    per = 32 // info.weight_bits  # codes per int32 word
    g = quant.group_size if info.family in INT_FAMILIES else -1
    if g != -1 and g <= 0:
        return ShapeIssue("group_size", "-1 (one group) or a positive group size", str(g))
    for p, n_out, n_in in (("w13", problem.w13_rows, problem.K), ("w2", problem.K, problem.N)):
        if g != -1 and n_in % g:
            return ShapeIssue("group_size", f"a group size dividing {p}'s input dimension "
                              f"{n_in}", str(g), p)
        if layout == "gptq" and n_in % per:
            return ShapeIssue(f"{p}_qweight", f"an input dimension divisible by {per}",
                              str(n_in), p)
        if layout in ("gptq", "awq") and n_out % per:
            return ShapeIssue(f"{p}_qzeros", f"an output dimension divisible by {per}",
                              str(n_out), p)
        if info.family == "mxfp8" and n_in % MX_BLOCK:
            return ShapeIssue(f"{p}_weight", f"an input dimension divisible by {MX_BLOCK}",
                              str(n_in), p)
    return None
