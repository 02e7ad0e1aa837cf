"""Bit packing of integer codes into int32 words, and the AWQ column interleave.

Every function here is format-neutral: which dimension is packed, how many codes a word holds
and whether codes straddle words are arguments taken from a `FormatRecord`.
"""

from __future__ import annotations

import torch

from .schemes.records import AWQ_PACK_ORDER

_U32 = 0xFFFFFFFF


def codes_per_word(bits: int) -> int:
    """Codes held by one int32 word in the padded layout: floor(32 / b)."""
    return 32 // bits


def packed_length(count: int, bits: int, packing: str) -> int:
    """int32 words needed for `count` b-bit codes: ceil(count / floor(32/b)) padded,
    ceil(count * b / 32) dense."""
    if packing == "dense":
        return -(-count * bits // 32)
    return -(-count // codes_per_word(bits))


def unpack_int32(words: torch.Tensor, bits: int, count: int, dim: int = -1,
                 packing: str = "padded") -> torch.Tensor:
    """Unsigned b-bit codes from int32 `words` along `dim`, least significant bits first.

    padded: word w holds codes w*p .. w*p+p-1 with p = floor(32/b), code j at bits (j%p)*b.
    dense:  code i occupies global bits i*b .. i*b+b-1 of the word stream (may straddle).
    Returns int32 with `count` codes along `dim`, each in [0, 2^b).
    """
    mask = (1 << bits) - 1
    if packing == "dense":
        w = words.movedim(dim, -1).to(torch.int64) & _U32
        pos = torch.arange(count, device=w.device) * bits
        lo, off = pos // 32, pos % 32
        hi = torch.clamp(lo + 1, max=w.shape[-1] - 1)
        low_part = w[..., lo] >> off
        high_part = (w[..., hi] & mask) << (32 - off)  # bits that straddle into the next word
        return ((low_part | high_part) & mask).to(torch.int32).movedim(-1, dim)
    # padded: in int32, an arithmetic shift then the mask gives the same field as a logical
    # shift; the codes of a word are spread along a new axis right after `dim`, so the result
    # keeps the packed tensor's memory order (no transposed copies of large weights).
    dim = dim % words.dim()
    per = codes_per_word(bits)
    shifts = (torch.arange(per, device=words.device, dtype=torch.int32) * bits).view(
        per, *([1] * (words.dim() - dim - 1)))
    codes = (words.to(torch.int32).unsqueeze(dim + 1) >> shifts).bitwise_and_(mask)
    return codes.flatten(dim, dim + 1).narrow(dim, 0, count)


def pack_int32(codes: torch.Tensor, bits: int, dim: int = -1,
               packing: str = "padded") -> torch.Tensor:
    """Inverse of `unpack_int32`: unsigned codes in [0, 2^b) packed into int32 along `dim`."""
    c = codes.movedim(dim, -1).to(torch.int64)
    if c.numel() and (c.min() < 0 or c.max() >= (1 << bits)):
        raise ValueError(f"codes must lie in [0, {1 << bits}) to pack at {bits} bits")
    count = c.shape[-1]
    nwords = packed_length(count, bits, packing)
    if packing == "dense":
        pos = torch.arange(count, device=c.device) * bits
        lo, off = pos // 32, pos % 32
        words = torch.zeros(*c.shape[:-1], nwords + 1, dtype=torch.int64, device=c.device)
        words.index_add_(-1, lo, (c << off) & _U32)
        words.index_add_(-1, lo + 1, c >> (32 - off))  # the straddling high bits, 0 otherwise
        words = words[..., :nwords]
    else:
        per = codes_per_word(bits)
        padded = torch.nn.functional.pad(c, (0, nwords * per - count))
        shifts = torch.arange(per, device=c.device) * bits
        words = (padded.unflatten(-1, (nwords, per)) << shifts).sum(-1)
    words = torch.where(words >= 1 << 31, words - (1 << 32), words)  # two's complement int32
    return words.to(torch.int32).movedim(-1, dim)


def awq_interleave(columns: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """AWQ storage order: slot i of each group of 8 holds logical column 8c + AWQ_PACK_ORDER[i]."""
    return _permute_groups_of_8(columns, list(AWQ_PACK_ORDER), dim)


def awq_undo_interleave(slots: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Inverse of `awq_interleave`: logical column j comes from slot (0,4,1,5,2,6,3,7)[j]."""
    inverse = sorted(range(8), key=lambda i: AWQ_PACK_ORDER[i])
    return _permute_groups_of_8(slots, inverse, dim)


def _permute_groups_of_8(t: torch.Tensor, order: list[int], dim: int) -> torch.Tensor:
    x = t.movedim(dim, -1)
    if x.shape[-1] % 8:
        raise ValueError(f"AWQ interleave needs a multiple of 8 columns, got {x.shape[-1]}")
    x = x.unflatten(-1, (-1, 8))[..., order].flatten(-2)
    return x.movedim(-1, dim)


def pack_nibbles(codes: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Two 4-bit codes per uint8 along `dim`: element 2j in the low nibble, 2j + 1 in the high
    nibble (OCP MX FP4 storage, as gpt-oss, ModelOpt and compressed-tensors write it)."""
    c = codes.movedim(dim, -1).to(torch.int64)
    if c.shape[-1] % 2:
        raise ValueError(f"packing 4-bit codes needs an even length, got {c.shape[-1]}")
    if c.numel() and (c.min() < 0 or c.max() > 15):
        raise ValueError("4-bit codes must lie in [0, 16)")
    pairs = c.unflatten(-1, (-1, 2))
    return (pairs[..., 0] | (pairs[..., 1] << 4)).to(torch.uint8).movedim(-1, dim)


def unpack_nibbles(packed: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Inverse of `pack_nibbles`: uint8 bytes -> int64 codes in [0, 16), twice as many."""
    b = packed.movedim(dim, -1).to(torch.int64)
    return torch.stack((b & 0xF, b >> 4), dim=-1).flatten(-2).movedim(-1, dim)
