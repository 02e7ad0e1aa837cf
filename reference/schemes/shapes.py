"""Shapes, by integer arithmetic on the scheme table, read by the reference and the kernels
alike: which problem shapes a checkpoint of a variant can hold (`checkpoint_shape_issue`), and
the one granularity rule, how many weights one scale covers (`weight_scale_block`)."""

from __future__ import annotations

from dataclasses import dataclass

from .table import (
    FP8_BLOCK,
    STRATEGY_BLOCK,
    STRATEGY_CHANNEL,
    STRATEGY_TENSOR,
    get_scheme,
    scheme_format,
)


def weight_scale_block(quant, linear: str, n_out: int, n_in: int,
                       shards: int | None = None) -> tuple[int, int]:
    """The (rows, cols) block of weight [n_out, n_in] of `linear` ("w13", "w2") that one
    scale covers, as torchao's `block_size`: W[o, k] = code * s[o // rows, k // cols]. The one
    statement of granularity, from the variant's fields (`quant`: a `Variant` or a
    Checkpoint): 16-bit weights one block; a block fixed by the format (MX 32, NVFP4 16) or an
    integer group (`group_size`, -1 all of in) along in; else the weight strategy's ("block"
    128 x 128, "channel" a row, "tensor" the linear or each of its `shards`).

    `shards` (per-tensor scales only): how many the stored scale holds for the linear, [E] 1,
    [E, 2] 2 (w1 rows, w3 rows); None: as the producers write it, one per w1 / w3 shard of an
    fp8 w13 with an even row count (llm-compressor), one per linear otherwise."""
    info = get_scheme(quant.scheme)
    if not info.quantized:
        return (n_out, n_in)
    if info.scale_block:
        return (1, info.scale_block)
    if info.packed:
        return (1, n_in if quant.group_size == -1 else quant.group_size)
    strategy = quant.weight_strategy
    if strategy == STRATEGY_BLOCK:
        return (FP8_BLOCK, FP8_BLOCK)
    if strategy == STRATEGY_CHANNEL:
        return (1, n_in)
    if strategy != STRATEGY_TENSOR:
        raise ValueError(f"weight_strategy: expected tensor, channel or block, found "
                         f"{strategy!r}")
    if shards is None:
        shards = 2 if info.element == "e4m3" and linear == "w13" and n_out % 2 == 0 else 1
    return (n_out // shards, n_in)


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
    dimension, a GPTQ / AWQ packed dimension that is no multiple of the codes per int32 word,
    an input dimension that does not fill whole bytes of elements packed several to a byte.

    `quant` is a `Variant` (what a backend receives) or a reference `Checkpoint`
    (anything with `.scheme`, `.group_size` and `.checkpoint_format`); `problem` anything
    with `.K`, `.N` and `.w13_rows` (an `MoEProblem`). Integer arithmetic only, so kernels
    may read it too.
    """
    info = get_scheme(quant.scheme)
    layout = scheme_format(quant).layout
    per = 32 // info.weight_bits  # codes per int32 word
    g = quant.group_size if info.packed else -1
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
        if layout == "quark-int" and n_out % per:  # codes packed along out
            return ShapeIssue(f"{p}_weight", f"an output dimension divisible by {per}",
                              str(n_out), p)
        if layout == "modelopt-int" and n_out % 2:  # two codes a byte along out
            return ShapeIssue(f"{p}_weight", "an even output dimension (two int4 codes a "
                              "byte along out)", str(n_out), p)
        el = info.weight_element
        if n_in % el.per_unit:
            units = "byte" if el.units == 1 else f"{el.units} bytes"
            return ShapeIssue(f"{p}_weight", f"an input dimension divisible by {el.per_unit} "
                              f"({el.per_unit} {info.element} elements per {units})",
                              str(n_in), p)
        if info.scale_block and n_in % info.scale_block:
            return ShapeIssue(f"{p}_weight", f"an input dimension divisible by "
                              f"{info.scale_block}", str(n_in), p)
    return None
