"""The weight layouts the grouped GEMM reads besides the checkpoint's (gemm_kernel's
docstring says how it reads each): tiles of memory runs (`tile_weights`) and nibble codes in
planes (`plane_nibbles`), with their inverses, and which kinds and shapes take them."""

from __future__ import annotations

import functools
import math

import torch
from moecert.reference.schemes import ELEMENTS

from .kinds import S_E4M3, S_FLOAT, W_FP4, W_INT4

# int4 weights are stored in tiles of 16 rows x 64 bytes (128 columns), each 1 KB one run of
# memory: the kernel's tile is then a few long runs instead of one 64-byte piece per row.
# H100, graph replay, tuned configs: 5-10% more of the memory floor per GEMM (DeepSeek-V3
# 78 -> 82%, Mixtral GEMM2 at M = 64 51 -> 57%), tiles of 32 or 64 rows no better, 128 bytes
# worse (docs/speed.md, "Change 5").
INT4_TILE = (16, 64)


# e2m1 codes in tiles of 16 rows x 32 bytes (64 columns, one FP4_SPAN): gpt-oss-120b's
# K = 2880 is 45 such spans, not a whole number of 128-column int4 tiles.
FP4_TILE = (16, 32)


def weight_tile(kind: int, q: torch.Tensor) -> tuple[int, int] | None:
    """The tile `tile_weights` stores weights of `kind` in, None for the plain layout (other
    kinds, or a shape the tile does not divide)."""
    tile = {W_INT4: INT4_TILE, W_FP4: FP4_TILE}.get(kind)
    if tile is None or q.dim() != 3:
        return None
    rows, cols = tile
    return tile if q.shape[1] % rows == 0 and q.shape[2] % cols == 0 else None


def tile_weights(q: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """q [E, N, C] (C stored columns: bytes for nibble weights) as [E, N / rows, C / cols,
    rows, cols], contiguous: each tile of `rows` x `cols` one run of memory, tiles in K
    order within a row block. The kernel reads the same values (describe_weights)."""
    E, N, C = q.shape
    if N % rows or C % cols:
        raise ValueError(f"weights {tuple(q.shape)}: N and stored columns must be multiples "
                         f"of the tile ({rows}, {cols})")
    return q.reshape(E, N // rows, rows, C // cols, cols).transpose(2, 3).contiguous()


def untile_weights(q: torch.Tensor) -> torch.Tensor:
    """Inverse of `tile_weights`: [E, N / rows, C / cols, rows, cols] -> [E, N, C]."""
    E, nb, cb, rows, cols = q.shape
    return q.transpose(2, 3).reshape(E, nb * rows, cb * cols)


# int4 codes may be stored in four planes per 128 columns instead of the checkpoint's
# adjacent columns (`plane_nibbles`): 16-bit word j of a span holds columns j, j + 32, j + 64
# and j + 96 in its nibbles 0-3, so each plane multiplies one quarter of the activation
# tile, loaded as a dot operand as it is, and decodes without byte permutes. Its K step
# (16 x 128 tile, sm90) is 339 instructions in 95 registers, where the adjacent order's is
# 374 in 142 and the paired order it replaced was 419 in 127 (docs/speed.md, "Change 8").
# `moecert tune` times both orders of each linear and the device's file says which to store
# (configs "nibble_spans"). BLOCK_K is then the span, so the scale group must be a multiple
# of it.
NIB_SPAN = 128
# e2m1 codes (MXFP4, NVFP4) are always stored in planes where they fit, over 64 columns: a
# plane is then 16 columns, inside one NVFP4 block (16) and, two planes together, one MXFP4
# block (32), so the kernel scales per plane (`_fp4_planes_part`) and its tile is 64 columns
# wide instead of the 32 of one E8M0 block (docs/speed.md, "Change 9").
FP4_SPAN = 64


def nib_span_fits(kind: int, k: int, scale_cols: int | None, act_order: bool,
                  span: int = NIB_SPAN, scale_kind: int = S_FLOAT) -> bool:
    """Whether nibble codes of K = k columns (scale group `scale_cols`, None: one per row)
    can be stored in planes over `span` columns: whole spans; int4: each span inside one
    scale group; e2m1 (scales applied per plane): each plane inside one block, with E8M0
    scales each pair of planes."""
    if act_order or k % span or kind not in (W_INT4, W_FP4):
        return False
    unit = span if kind == W_INT4 else span // 4 if scale_kind == S_E4M3 else span // 2
    return scale_cols is None or scale_cols % unit == 0


# Bytes of codes put into planes at once (`plane_nibbles`): its temporaries are four times
# the codes (measured, issue 43: a DeepSeek-V3 layer's w13 at once held ~1.3 bytes per weight
# of the layer above its tensors on the CPU)
PLANE_CHUNK_BYTES = 1 << 26


def plane_nibbles(q: torch.Tensor, span: int) -> torch.Tensor:
    """Int4 codes [..., K / 2] with columns 2j, 2j + 1 in byte j (low, high nibble) ->
    each span of `span` columns as span / 4 little-endian 16-bit words, word j holding
    columns j + p * span / 4 in nibble p = 0..3 (bytes 2j: planes 0 and 1, 2j + 1: 2 and 3).
    Rows a chunk at a time (each row's bytes are its own: the chunking changes none)."""
    if q.dim() < 2 or q.numel() <= PLANE_CHUNK_BYTES:
        return _plane_rows(q, span)
    rows, out = q.reshape(-1, q.shape[-1]), torch.empty_like(q)
    flat = out.view(-1, q.shape[-1])
    step = max(1, PLANE_CHUNK_BYTES // max(q.shape[-1], 1))
    for lo in range(0, rows.shape[0], step):
        flat[lo:lo + step] = _plane_rows(rows[lo:lo + step], span)
    return out


def _plane_rows(q: torch.Tensor, span: int) -> torch.Tensor:
    cols = torch.stack([q & 0xF, q >> 4], dim=-1).flatten(-2)  # one code per column
    planes = cols.unflatten(-1, (-1, 4, span // 4))
    low = planes[..., 0, :] | (planes[..., 1, :] << 4)
    high = planes[..., 2, :] | (planes[..., 3, :] << 4)
    return torch.stack([low, high], dim=-1).flatten(-3)


def unplane_nibbles(q: torch.Tensor, span: int) -> torch.Tensor:
    """Inverse of `plane_nibbles`."""
    words = q.unflatten(-1, (-1, span // 4, 2))
    low, high = words[..., 0], words[..., 1]
    cols = torch.stack([low & 0xF, low >> 4, high & 0xF, high >> 4], dim=-2).flatten(-3)
    return cols[..., 0::2] | (cols[..., 1::2] << 4)


# e2m1 plane scales in one 32-bit word per weight row and span (issue 44's decode candidate):
# byte p of the word is plane p's block scale (E8M0: planes 0-1 and 2-3 repeat their block's),
# words of one span side by side over the rows. The kernel then loads a row's scales for a
# tile with one 4-byte load, which cp.async can stage, where a byte per plane is four 1-byte
# loads that it cannot (the 2-byte activation loads of docs/speed.md "Change 4" were the same
# case). NVFP4 holds the same bytes; MXFP4 twice its scale bytes (+6% of its weight bytes).
SCALE_WORD_PLANES = 4


def scale_words(s: torch.Tensor, cols: int, span: int = FP4_SPAN) -> torch.Tensor:
    """Block scales s [E, N, K / cols] (one byte each) -> an [E, N, K / span, 4] view of
    [E, K / span, N, 4] storage, [..., p] the scale of plane p (span / 4 columns)."""
    spans = s.shape[2] * cols // span
    first = (torch.arange(spans)[:, None] * span
             + torch.arange(SCALE_WORD_PLANES)[None, :] * (span // SCALE_WORD_PLANES))
    packed = s[:, :, (first // cols).to(s.device)]  # [E, N, spans, 4]
    return packed.permute(0, 2, 1, 3).contiguous().permute(0, 2, 1, 3)


def unscale_words(packed: torch.Tensor, cols: int, span: int = FP4_SPAN) -> torch.Tensor:
    """Inverse of `scale_words`: [E, N, K / cols], contiguous."""
    E, N, spans, planes = packed.shape
    flat = packed.reshape(E, N, spans * planes)  # plane p of span j at j * 4 + p
    plane = span // planes
    first = torch.arange(spans * span // cols) * cols // plane  # a plane inside each block
    return flat[:, :, first.to(packed.device)].contiguous()


# e2m1 plane words with the sign where the decode's packed multiply carries it (issue 44's
# third decode candidate, MOECERT_TRITON_FP4_CARRY=1; bf16 layers only): the four nibbles of
# a `plane_nibbles` word rearranged so that plane p's magnitude bits EEM (mantissa, then the
# two exponent bits) start at bit CARRY_EEM[p] and its sign sits at CARRY_SIGN[p]. The decode
# moves EEM onto bf16's bits 6-8 with one shift; where the sign then lands on bit 15 (a
# sign 9 bits above EEM: planes 0 and 2) the same mask keeps it, and the multiply that
# scales the value carries it: 2-3 instructions per pair of weights where the nibble order
# needs 5. 16 bits hold three such planes, not four (sign-EEM patterns {b, b+1, b+2, b+9}
# overlap); the best found (a search over every placement, counting shifts, masks and sign
# fix-ups) carries two and fixes the other two's sign with a shift and a lop3: 11
# instructions per word besides the four multiplies, where the nibble order takes 15
# (gemm_kernel's `_fp4_carry_asm`).
CARRY_EEM = (0, 3, 6, 10)
CARRY_SIGN = (9, 13, 15, 14)


def carry_bits(q: torch.Tensor) -> torch.Tensor:
    """`plane_nibbles` words (little-endian byte pairs, uint8 [..., 2m]) -> the same words
    with nibble p's bits 0-2 at CARRY_EEM[p].. and its bit 3 at CARRY_SIGN[p]. Rows a chunk
    at a time, as `plane_nibbles` (the temporaries are int32: 8 bytes per byte)."""
    return _per_chunk(q, _carry_rows)


def uncarry_bits(q: torch.Tensor) -> torch.Tensor:
    """Inverse of `carry_bits`."""
    return _per_chunk(q, _uncarry_rows)


def _per_chunk(q: torch.Tensor, fn, width: int | None = None, per_byte: int = 4
               ) -> torch.Tensor:
    """fn over rows of q's last dimension a chunk at a time (each row's values are its own:
    the chunking changes none), into [..., width] (q's width unless given) of q's dtype;
    `per_byte`: the bytes of temporaries fn holds per byte of q."""
    width = q.shape[-1] if width is None else width
    chunk = PLANE_CHUNK_BYTES // per_byte
    if q.dim() < 2 or q.numel() <= chunk:
        return fn(q)
    rows = q.reshape(-1, q.shape[-1])
    out = torch.empty(rows.shape[0], width, dtype=q.dtype, device=q.device)
    step = max(1, chunk // max(q.shape[-1], 1))
    for lo in range(0, rows.shape[0], step):
        out[lo:lo + step] = fn(rows[lo:lo + step])
    return out.view(*q.shape[:-1], width)


def _words(q: torch.Tensor) -> torch.Tensor:
    return q[..., 0::2].to(torch.int32) | (q[..., 1::2].to(torch.int32) << 8)


def _bytes(w: torch.Tensor) -> torch.Tensor:
    return torch.stack([w & 0xFF, w >> 8], dim=-1).flatten(-2).to(torch.uint8)


def _carry_rows(q: torch.Tensor) -> torch.Tensor:
    w, out = _words(q), None
    for p, (eem, sign) in enumerate(zip(CARRY_EEM, CARRY_SIGN, strict=True)):
        nib = (w >> (4 * p)) & 0xF
        part = ((nib & 7) << eem) | ((nib >> 3) << sign)
        out = part if out is None else out | part
    return _bytes(out)


def _uncarry_rows(q: torch.Tensor) -> torch.Tensor:
    w, out = _words(q), None
    for p, (eem, sign) in enumerate(zip(CARRY_EEM, CARRY_SIGN, strict=True)):
        part = ((((w >> eem) & 7) | (((w >> sign) & 1) << 3)) << (4 * p))
        out = part if out is None else out | part
    return _bytes(out)


# e2m1 block scales decoded into bf16 once at load (issue 44's fourth decode candidate,
# MOECERT_TRITON_FP4_SCALE_BF16=1): the K loop then loads the value its multiply takes instead
# of decoding an e4m3 or E8M0 byte every step (on the GPU's triton 3.6, ~15 instructions a
# NVFP4 scale by the bit fields, several with the e4m3 conversion, in each of the four lanes
# that hold a row; E8M0's compares and selects). Every code is exact in bf16: E8M0's byte is
# bf16's exponent field (bias 127 both; byte 0, 2^-127, is a bf16 subnormal), e4m3 has <= 4
# significant bits in [2^-9, 448], and so has e4m3 times LEAN's 2^119 (<= 448 * 2^119 <
# 2^128); `scale_bf16_table` checks each code and refuses a table with one that is not. The
# distinct scales of a span's planes (NVFP4 four, MXFP4 two: planes 0-1 and 2-3 share a
# block) sit side by side per row, pairs of bf16 in one 32-bit word each, words of one span
# side by side over the rows: NVFP4 8 bytes a row and span where `scale_words` holds 4 (+11%
# of its weight bytes), MXFP4 4 (the same bytes as its words).
def _bf16_bits(value: float, negative: bool) -> int | None:
    """The bf16 bit pattern of `value` exactly (NaN: the quiet NaN of the sign), None where
    bf16 has no such value. Integer arithmetic on frexp, no float conversion that could round
    or flush."""
    sign = 0x8000 if negative else 0
    if math.isnan(value):
        return sign | 0x7FC0
    if value == 0:
        return sign
    m, e = math.frexp(abs(value))  # |value| = m * 2^e, 0.5 <= m < 1
    biased = e + 126  # bf16's exponent field for 1.f * 2^(e - 1), bias 127
    if biased >= 255:
        return None
    mant = math.ldexp(2 * m - 1, 7) if biased >= 1 else math.ldexp(abs(value), 133)
    if mant != int(mant):
        return None
    return sign | (max(biased, 0) << 7) | int(mant)


@functools.cache
def scale_bf16_table(element: str, fold: int = 0) -> torch.Tensor:
    """int16 [256]: the bf16 bit pattern of each `element` ("e4m3", "e8m0") code's value times
    2^fold, from the format facts' code table (NaN codes: NaN of the code's sign, so export
    gives every code back). ValueError naming the first code bf16 cannot hold exactly."""
    el = ELEMENTS[element]
    bits = []
    for code, value in enumerate(el.values):
        negative = (el.kind == "float" and bool(code & el.sign_bit)) or (
            not math.isnan(value) and math.copysign(1.0, value) < 0)
        b = _bf16_bits(value if math.isnan(value) else math.ldexp(value, fold), negative)
        if b is None:
            raise ValueError(f"{element} code 0x{code:02X} ({value}) times 2^{fold} is not "
                             "exact in bf16: its scales cannot be stored decoded")
        bits.append(b - 0x10000 if b >= 0x8000 else b)
    return torch.tensor(bits, dtype=torch.int16)


@functools.cache
def _scale_bf16_codes(element: str, fold: int) -> torch.Tensor:
    """int16 [65536]: the code of each bf16 bit pattern of `scale_bf16_table`, -1 elsewhere."""
    table = scale_bf16_table(element, fold).to(torch.int64) & 0xFFFF
    if len(torch.unique(table)) != len(table):
        raise ValueError(f"{element} times 2^{fold}: two codes share a bf16 pattern")
    inverse = torch.full((1 << 16,), -1, dtype=torch.int16)
    inverse[table] = torch.arange(len(table), dtype=torch.int16)
    return inverse


def _lookup(table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """table[index] (index uint8 or int16, read as unsigned) a chunk at a time: an int64
    index of a whole tensor is 8 bytes per scale (DeepSeek-V3's w13 holds 470 M: 3.8 GB)."""
    flat = index.reshape(-1)
    out = torch.empty(flat.shape, dtype=table.dtype, device=index.device)
    mask = (1 << (8 * index.element_size())) - 1
    step = PLANE_CHUNK_BYTES // 8
    for lo in range(0, flat.numel(), step):
        out[lo:lo + step] = table[flat[lo:lo + step].to(torch.int64) & mask]
    return out.view(index.shape)


def scale_bf16(s: torch.Tensor, cols: int, element: str, fold: int = 0,
               span: int = FP4_SPAN) -> torch.Tensor:
    """Block scale codes s [E, N, K / cols] (uint8) -> their values times 2^fold in bf16, an
    [E, N, K / span, span / cols] view of [E, K / span, N, span / cols] storage: [..., j] the
    scale of the span's block j (NVFP4: plane j; MXFP4: planes 2j and 2j + 1)."""
    per_span = span // cols
    assert s.dtype == torch.uint8 and span % cols == 0 and per_span % 2 == 0
    table = scale_bf16_table(element, fold).to(s.device)
    values = _lookup(table, s).view(torch.bfloat16).unflatten(2, (-1, per_span))
    return values.permute(0, 2, 1, 3).contiguous().permute(0, 2, 1, 3)


def unscale_bf16(packed: torch.Tensor, cols: int, element: str, fold: int = 0) -> torch.Tensor:
    """Inverse of `scale_bf16`: the codes [E, N, K / cols] (uint8), contiguous; ValueError if
    a value is no code's (the stored tensor was changed)."""
    bits = packed.contiguous().view(torch.int16).flatten(2)
    codes = _lookup(_scale_bf16_codes(element, fold).to(packed.device), bits)
    if bool((codes < 0).any()):
        raise ValueError(f"bf16 scales hold a value that is no {element} code times 2^{fold}")
    return codes.to(torch.uint8)


# MX fp6 weights (E2M3, E3M2) in six bits a weight (issue 44, round fifteen) instead of
# widened to e4m3 bytes, which read 8 bits a weight (MXFP6 ran at the speed of MXFP8's bytes:
# 52-66% of its own floor). Per FP6_SPAN columns of a row: FP6_SPAN / 4 little-endian 16-bit
# words, nibble p of word j the low four magnitude bits of column j + p * FP6_SPAN / 4 (the
# `plane_nibbles` order: plane p is the tile's quarter p, one 32-column MX block), then
# FP6_SPAN / 8 16-bit words, word i's low byte the top magnitude bits and signs of word i's
# four columns at `fp6_top_sign`'s bits, its high byte word i + FP6_SPAN / 8's: 96 bytes a
# row and span, the file's 6 bits a weight. The kernel reads every part of it as 16-bit
# words: an 8-bit tensor on the way to the dot gives both its operands the 8-bit register
# layout, whose 16-bit activations are then gathered by register moves (docs/speed.md,
# rounds twelve and fifteen: one byte per word cost the unswapped tile 89 moves a step).
FP6_SPAN = 128


@functools.cache
def fp6_top_sign(exp_bits: int) -> tuple[tuple[int, int], ...]:
    """(top magnitude bit, sign bit) of plane p = 0..3 in a word's byte of top bits and
    signs (`plane_fp6`), for an element
    of `exp_bits` exponent bits: each sign g = exp_bits - 1 bits below its top bit (blocks
    of g signs then their g top bits). The kernel copies the byte into both bytes of a
    16-bit lane; one left shift then brings plane p's top bit (low copy) to the magnitude's
    bit 4 at lane bit 6 + exp_bits, bf16's, and its sign (high copy: 8 + sign) to bit 15,
    exactly when top - sign = g (gemm_kernel's `_fp6_planes_asm`). 2 and 3 only (fp6)."""
    g = exp_bits - 1
    if g not in (1, 2):
        raise ValueError(f"six-bit planes hold E2M3 or E3M2 codes, not {exp_bits} exponent bits")
    return tuple((2 * g * (p // g) + g + p % g, 2 * g * (p // g) + p % g) for p in range(4))


def plane_fp6(codes: torch.Tensor, exp_bits: int) -> torch.Tensor:
    """fp6 codes uint8 [..., K] (sign at bit 5, magnitude bits 0-4), K a multiple of
    FP6_SPAN -> uint8 [..., 3K / 4] in six-bit planes (FP6_SPAN's comment). Rows a chunk at
    a time, as `plane_nibbles`."""
    if codes.shape[-1] % FP6_SPAN:
        raise ValueError(f"six-bit planes need K a multiple of {FP6_SPAN}, got "
                         f"{codes.shape[-1]}")
    return _per_chunk(codes, lambda rows: _plane_fp6_rows(rows, exp_bits),
                      codes.shape[-1] * 3 // 4, per_byte=8)


def unplane_fp6(q: torch.Tensor, exp_bits: int) -> torch.Tensor:
    """Inverse of `plane_fp6`."""
    return _per_chunk(q, lambda rows: _unplane_fp6_rows(rows, exp_bits), q.shape[-1] * 4 // 3,
                      per_byte=8)


def _plane_fp6_rows(codes: torch.Tensor, exp_bits: int) -> torch.Tensor:
    c = codes.to(torch.int32).unflatten(-1, (-1, 4, FP6_SPAN // 4))  # [rows, spans, p, j]
    words = sum(((c[..., p, :] & 0xF) << (4 * p)) for p in range(4))
    high = sum((((c[..., p, :] >> 4) & 1) << top) | (((c[..., p, :] >> 5) & 1) << sign)
               for p, (top, sign) in enumerate(fp6_top_sign(exp_bits)))
    low_bytes = torch.stack([words & 0xFF, words >> 8], dim=-1).flatten(-2)
    # byte 2i: word i's, 2i + 1: word i + FP6_SPAN / 8's
    high_bytes = high.unflatten(-1, (2, -1)).transpose(-1, -2).flatten(-2)
    return torch.cat([low_bytes, high_bytes], dim=-1).flatten(-2).to(torch.uint8)


def _unplane_fp6_rows(q: torch.Tensor, exp_bits: int) -> torch.Tensor:
    span = q.to(torch.int32).unflatten(-1, (-1, FP6_SPAN * 3 // 4))
    low = span[..., :FP6_SPAN // 2]
    words = low[..., 0::2] | (low[..., 1::2] << 8)
    high = span[..., FP6_SPAN // 2:].unflatten(-1, (-1, 2)).transpose(-1, -2).flatten(-2)
    planes = [((words >> (4 * p)) & 0xF) | (((high >> top) & 1) << 4) | (((high >> sign) & 1) << 5)
              for p, (top, sign) in enumerate(fp6_top_sign(exp_bits))]
    return torch.stack(planes, dim=-2).flatten(-3).to(torch.uint8)


@functools.cache
def fp6_e4m3_bytes(element: str) -> torch.Tensor:
    """uint8 [64]: the float8_e4m3fn byte of each fp6 code of `element` ("e2m3", "e3m2"),
    by the conversion's own widening (codecs.widen_to_e4m3 of every code), so that
    `fp6_codes` is its inverse by construction."""
    from ..codecs import widen_to_e4m3

    el = ELEMENTS[element]
    codes = torch.arange(1 << el.bits, dtype=torch.int64).unflatten(-1, (-1, el.per_unit))
    words = sum(codes[:, i] << (i * el.bits) for i in range(el.per_unit))
    packed = torch.stack([(words >> (8 * i)) & 0xFF for i in range(el.units)], -1).flatten()
    return widen_to_e4m3(packed.to(torch.uint8), el).view(torch.uint8)


@functools.cache
def _fp6_codes_table(element: str) -> torch.Tensor:
    """int16 [256]: the fp6 code of each e4m3 byte that is one's, -1 elsewhere."""
    table = fp6_e4m3_bytes(element).to(torch.int64)
    if len(torch.unique(table)) != len(table):
        raise ValueError(f"{element}: two codes widen to one e4m3 byte")
    inverse = torch.full((256,), -1, dtype=torch.int16)
    inverse[table] = torch.arange(len(table), dtype=torch.int16)
    return inverse


def fp6_codes(w: torch.Tensor, element: str) -> torch.Tensor:
    """float8_e4m3fn weights widened from `element` codes -> the codes (uint8, sign at bit
    5); ValueError if a byte is no code's widening (the tensor was not widened from it)."""
    codes = _lookup(_fp6_codes_table(element).to(w.device), w.view(torch.uint8))
    if bool((codes < 0).any()):
        raise ValueError(f"e4m3 weights hold a value that is no {element} code")
    return codes.to(torch.uint8)


def fp6_widened(codes: torch.Tensor, element: str) -> torch.Tensor:
    """Inverse of `fp6_codes`: the codes' float8_e4m3fn values."""
    table = fp6_e4m3_bytes(element).to(codes.device)
    return _lookup(table, codes).view(torch.float8_e4m3fn)
