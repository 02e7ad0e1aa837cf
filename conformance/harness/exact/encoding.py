"""The exact tier's encoding: designed float64 weights (design.py) written in a
scheme's format with power-of-two scales per scale block, so that every code is exact (integers
within the format's range, or E4M3 / E2M1 values) and the checkpoint dequantizes to the design
bit for bit. The scale blocks are the producers' own (`weight_scale_block`, the reference's
rule, shared with `synthesize`)."""

from __future__ import annotations

import math
from dataclasses import replace

import torch
from moecert.reference import CanonicalLinear, Checkpoint, MoEProblem
from moecert.reference.elements import pow2, round_to
from moecert.reference.layouts import write_linear
from moecert.reference.schemes import weight_scale_block
from moecert.reference.schemes.elements import ELEMENTS, INT
from moecert.reference.schemes.tensors import pre_quant_scale_name
from moecert.reference.synthesize import random_g_idx


def encode_checkpoint(gen, attrs: Checkpoint, P: MoEProblem, linears: dict,
                      biases: dict) -> Checkpoint:
    """`attrs` holding the designed float64 values `linears` ({prefix: [E, out, in]}) and
    `biases` in its scheme's layout: power-of-two scales, exact codes."""
    tensors = {}
    for prefix, values in linears.items():
        tensors.update(write_linear(_encode(gen, values, attrs, prefix), prefix, attrs,
                                    P.torch_dtype))
        pre = pre_quant_scale_name(attrs, prefix)
        if pre is not None:  # ModelOpt AWQ's input multiplier: 1 keeps the design exact (a
            # per-column factor would take h off its designed grid); accuracy judges it
            tensors[pre] = torch.ones(values.shape[0], values.shape[2], dtype=P.torch_dtype)
    for name, b in biases.items():
        tensors[name] = b.to(P.torch_dtype)
    return replace(attrs, tensors=tensors)


def _encode(gen, V: torch.Tensor, attrs: Checkpoint, prefix: str) -> CanonicalLinear:
    """The canonical linear holding values V [E, out, in] in `attrs`'s format: power-of-two
    scales per scale block, codes V / scale (integers or E4M3 values), zero points filling
    every empty column of a group."""
    E, n_out, n_in = V.shape
    info = attrs.info
    if not info.quantized:
        return CanonicalLinear(codes=V.clone(), scales=torch.ones(E, 1, 1, dtype=torch.float64),
                               block=(n_out, n_in))
    if info.packed:
        return _encode_int_groups(gen, V, attrs)
    block = weight_scale_block(attrs, prefix, n_out, n_in)
    element = info.element
    codes, scales = _encode_blocks(gen, V, block, element)
    return CanonicalLinear(codes=codes, scales=scales, block=block)


def lowbit(v: torch.Tensor) -> torch.Tensor:
    """The lowest set bit 2^k of each non-zero value with <= 53 significant bits; inf for 0."""
    low = torch.full_like(v, torch.inf, dtype=torch.float64)
    nonzero = v != 0
    mant, exp = torch.frexp(v[nonzero].to(torch.float64))
    n = (mant.abs() * 2.0**53).to(torch.int64)
    low[nonzero] = (n & -n).to(torch.float64) * pow2(exp - 53)
    return low


# E4M3 codes take top / scale in [16, 128), a narrower window than its range allows (kept:
# the tier's structures for the fp8 schemes); every other float element takes the widest
# window `scale_window` derives from its record.
_E4M3_WINDOW = (-6, -4)


def scale_window(el) -> tuple[int, int]:
    """The range of log2(scale) - floor(log2 top) the structure draws for float element `el`
    (a choice of this tier's design; the element's grid and largest value are its record's). A
    block's values are +-{1, 3} * 2^q of one q, so its codes are 1.5 * 2^-d and 2^(-1-d) (top
    3 * 2^q, d = log2(scale) - floor(log2 top)), or 2^-d (top 2^q): the largest, 1.5 * 2^-d,
    must not pass the element's max (d >= -floor(log2(max / 1.5))), the smallest, 2^(-1-d),
    must be a multiple of its subnormal step 2^(1 - bias - mbits) (d <= bias + mbits - 2).
    E2M1: [-2, 0] (codes {6, 3, 1.5} with 2^q / scale >= 1/2), E2M3: [-2, 2], E3M2: [-4, 3]."""
    if el.storage == torch.float8_e4m3fn:
        return _E4M3_WINDOW
    return (-math.floor(math.log2(el.max / 1.5)), el.exp_bias + el.mantissa_bits - 2)


def _block_scales(gen, low: torch.Tensor, top: torch.Tensor, code_max: float, integer: bool,
                  element: str = "e4m3") -> torch.Tensor:
    """Power-of-two scales for blocks whose non-zeros have lowest bit `low` and largest
    magnitude `top`: integer codes need scale <= low and top / scale <= code_max; float codes
    take top / scale in their element's range (`scale_window`). Empty blocks draw a scale near
    1."""
    empty = torch.isinf(low)
    if integer:
        ratio = torch.where(empty, 1.0, top / low)
        if (ratio > code_max).any():
            raise RuntimeError(f"exact tier: values span {float(ratio.max())} steps of their "
                               f"block, more than the {code_max} codes of the format")
        room = torch.floor(torch.log2(code_max / ratio)).clamp(0, 2)
        shift = torch.floor(torch.rand(low.shape, generator=gen) * (room + 1))
        s = torch.where(empty, 1.0, low) * pow2(-shift)
    else:
        ex = torch.frexp(torch.where(empty, 1.0, top))[1] - 1
        lo, hi = scale_window(ELEMENTS[element])
        s = pow2(ex + torch.randint(lo, hi + 1, low.shape, generator=gen))
    wild = pow2(torch.randint(-3, 2, low.shape, generator=gen))
    return torch.where(empty, wild, s)


def _encode_blocks(gen, V: torch.Tensor, block: tuple[int, int], element: str):
    """(codes, scales [E, R, C]) for one scale per (rows x cols) block of V."""
    E, n_out, n_in = V.shape
    rows, cols = block
    R, C = -(-n_out // rows), -(-n_in // cols)
    pad = torch.nn.functional.pad(V, (0, C * cols - n_in, 0, R * rows - n_out))
    blocks = pad.view(E, R, rows, C, cols)
    low = lowbit(blocks).amin(dim=(2, 4))
    top = blocks.abs().amax(dim=(2, 4))
    el = ELEMENTS[element]
    integer = el.kind == INT
    s = _block_scales(gen, low, top, el.max, integer, element)
    full = s.repeat_interleave(rows, 1)[:, :n_out].repeat_interleave(cols, 2)[:, :, :n_in]
    codes = V / full
    if integer:
        _expect_codes((codes == torch.round(codes)) & (codes.abs() <= el.max),
                      f"{element} codes")
        codes = codes.to(torch.int32)
    else:
        _expect_codes((round_to(codes, el) == codes) & (codes.abs() <= el.max),
                      f"{element.upper()} codes")
    return codes, s


def _encode_int_groups(gen, V: torch.Tensor, attrs: Checkpoint) -> CanonicalLinear:
    """GPTQ / AWQ / compressed-tensors: scales and zero points per (row, group), groups by
    k // g or by a random act-order g_idx."""
    E, n_out, n_in = V.shape
    bits = attrs.info.weight_bits
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    cols = n_in if attrs.group_size == -1 else attrs.group_size
    G = n_in // cols
    g_idx = random_g_idx(gen, E, n_in, attrs.group_size) if attrs.act_order else None
    groups = (torch.arange(n_in) // cols).expand(E, n_in) if g_idx is None else g_idx
    index = groups.unsqueeze(1).expand(E, n_out, n_in)
    init = torch.full((E, n_out, G), torch.inf, dtype=torch.float64)
    low = init.scatter_reduce(2, index, lowbit(V), "amin")
    top = torch.zeros(E, n_out, G, dtype=torch.float64).scatter_reduce(2, index, V.abs(), "amax")
    s = _block_scales(gen, low, top, float(hi), integer=True)
    codes = V / torch.gather(s, 2, index)
    _expect_codes((codes == torch.round(codes)) & (codes.abs() <= hi), f"int{bits} codes")
    codes = codes.to(torch.int32)
    zeros = None
    if not attrs.sym:
        cmin = torch.zeros(E, n_out, G, dtype=torch.int32).scatter_reduce(2, index, codes, "amin")
        cmax = torch.zeros(E, n_out, G, dtype=torch.int32).scatter_reduce(2, index, codes, "amax")
        # GPTQ v1 stores z - 1: the true (unsigned) zero must be >= 1
        zmin = lo - attrs.record.stored_zero_offset
        z_lo, z_hi = torch.clamp(lo - cmin, min=zmin), hi - cmax
        span = (z_hi - z_lo + 1).to(torch.float64)
        zeros = z_lo + torch.floor(torch.rand(span.shape, generator=gen) * span).to(torch.int32)
        codes = codes + torch.gather(zeros, 2, index)
    return CanonicalLinear(codes=codes, scales=s, block=(1, cols), zeros=zeros, g_idx=g_idx)


def _expect_codes(ok: torch.Tensor, what: str) -> None:
    if not bool(ok.all()):
        raise RuntimeError(f"exact tier: {int((~ok).sum())} weights are not {what} of their "
                           "power-of-two scale")
