"""The kernels' codecs: stored codes and scales <-> values, written once for every backend
(the conversion, the torch and grouped backends, the mutants and the Triton tuner read them
here), and one expert's weights decoded out of the common kernel format (`convert.py`'s
module docstring says what that format holds).

    unpack_words / undo_interleave   int32 words -> codes (packed layouts, AWQ's order)
    pack_nibbles / unpack_nibbles    int4 codes <-> bytes, column 2j in the low nibble
    unpack_units / widen_to_e4m3     elements several to a few bytes (e2m1, fp6)
    decode_e4m3 / decode_e8m0 / decode_e2m1 / element_values / pow2
    dequantize_expert                float32 [out, in] of one expert's linear

Every codec reads its element's facts from the element records (`schemes.elements`); none
calls the reference's math (tests/test_architecture.py).
"""

from __future__ import annotations

import torch
from moecert.reference.schemes import MX_BLOCK, NVFP4_BLOCK
from moecert.reference.schemes.elements import ELEMENTS, EXPONENT, INT, Element

from .errors import BackendError
from .layer import MoELayer, linear_dims

# int32 codes unpacked per chunk of experts (256 MiB of int32): a DeepSeek-V3-sized layer
# unpacked at once would need tens of GiB
CHUNK_ELEMENTS = 1 << 26
# Float codes widened per chunk of this many output elements (`widen_to_e4m3`): the bit-field
# decode holds about 60 bytes of int32 / float32 temporaries per element, so a chunk of
# CHUNK_ELEMENTS held 4 GiB (measured on the CPU, issue 43: a Qwen3-30B-A3B MXFP6 layer's
# processing peaked 4 GiB above its tensors; on an H200 it ran over the memory model)
WIDEN_CHUNK_ELEMENTS = 1 << 22


# --- packed integer codes ---------------------------------------------------------------------

def unpack_words(words: torch.Tensor, bits: int, count: int, dim: int) -> torch.Tensor:
    """int32 words -> unsigned codes (int32) along `dim`, least significant bits first,
    32 // bits codes per word (for 4 and 8 bits compressed-tensors' dense bitstream and the
    padded layout coincide). Keeps `count` codes."""
    dim = dim % words.dim()
    per = 32 // bits
    shifts = (torch.arange(per, device=words.device, dtype=torch.int32) * bits).view(
        per, *([1] * (words.dim() - dim - 1)))
    # arithmetic shift then mask: the same field as a logical shift of the uint32 word
    codes = (words.unsqueeze(dim + 1) >> shifts) & ((1 << bits) - 1)
    return codes.flatten(dim, dim + 1).narrow(dim, 0, count)


def undo_interleave(slots: torch.Tensor, order: tuple[int, ...], dim: int) -> torch.Tensor:
    """Slot i of each len(order) holds column c * len(order) + order[i] (the format record's
    `interleave`, AWQ's 0,2,4,6,1,3,5,7): back to column order."""
    inverse = sorted(range(len(order)), key=lambda i: order[i])
    x = slots.movedim(dim, -1)
    return x.unflatten(-1, (-1, len(order)))[..., inverse].flatten(-2).movedim(-1, dim)


def pack_nibbles(u: torch.Tensor) -> torch.Tensor:
    """[..., in] codes in [0, 16) -> uint8 [..., ceil(in/2)], column 2j in the low nibble."""
    if u.shape[-1] % 2:
        u = torch.nn.functional.pad(u, (0, 1))
    pairs = u.to(torch.uint8).unflatten(-1, (-1, 2))
    return pairs[..., 0] | (pairs[..., 1] << 4)


def unpack_nibbles(q: torch.Tensor, n_in: int) -> torch.Tensor:
    """Inverse of `pack_nibbles`: uint8 [..., ceil(in/2)] -> uint8 [..., in]."""
    return torch.stack((q & 0xF, q >> 4), dim=-1).flatten(-2)[..., :n_in]



# --- float elements and scales ----------------------------------------------------------

def widen_to_e4m3(w: torch.Tensor, el) -> torch.Tensor:
    """Float codes packed `el.per_unit` to `el.units` bytes (least significant bits first:
    fp6 codes 4j..4j+3 in bytes 3j..3j+2) -> float8_e4m3fn [..., in], from the element
    record's bit fields. Exact: an element with <= 3 mantissa bits, a largest value <= 448
    and a subnormal step >= 2^-9 has only e4m3 values (fp6 E2M3 and E3M2 do)."""
    step_exp = 1 - el.exp_bias - el.mantissa_bits
    if el.mantissa_bits > 3 or el.max > ELEMENTS["e4m3"].max or step_exp < -9:
        raise BackendError(f"{el.name} weights", "an element whose values are e4m3 values",
                           f"{el.mantissa_bits} mantissa bits, max {el.max}")
    out = torch.empty(*w.shape[:-1], w.shape[-1] * el.per_unit // el.units,
                      dtype=torch.float8_e4m3fn, device=w.device)
    mask, m_mask = (1 << el.bits) - 1, (1 << el.mantissa_bits) - 1
    # rows of the last dimension, a chunk of them at a time (elementwise: the chunking does
    # not change a value)
    rows, flat = w.reshape(-1, w.shape[-1]), out.view(-1, out.shape[-1])
    step = max(1, WIDEN_CHUNK_ELEMENTS // max(flat.shape[-1], 1))
    for lo in range(0, rows.shape[0], step):
        groups = rows[lo:lo + step].to(torch.int32).unflatten(-1, (-1, el.units))
        word = groups[..., 0]
        for i in range(1, el.units):
            word = word | (groups[..., i] << (8 * i))
        c = torch.stack([(word >> (i * el.bits)) & mask for i in range(el.per_unit)], -1)
        c = c.flatten(-2)
        e, m = (c >> el.mantissa_bits) & ((1 << el.exp_bits) - 1), c & m_mask
        mag = torch.where(e > 0, ((m_mask + 1) + m) * pow2(e + step_exp - 1), m * pow2(
            torch.full_like(e, step_exp)))
        value = torch.where(c & (1 << (el.bits - 1)) != 0, -mag, mag)
        flat[lo:lo + step] = value.to(torch.float8_e4m3fn)
    return out


_TABLES: dict[tuple, torch.Tensor] = {}


def _table(el: Element, dtype: torch.dtype, device) -> torch.Tensor:
    """The element record's code table (value of each code) as a tensor: decoding a code is
    an index into it."""
    key = (el.name, dtype, str(device))
    if key not in _TABLES:
        _TABLES[key] = torch.tensor(el.values, dtype=torch.float64).to(dtype).to(device)
    return _TABLES[key]


def decode_e4m3(s: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """float8_e4m3fn values in `dtype` (the cast is exact: every e4m3 value is a float32)."""
    return s.to(dtype)


def decode_e8m0(bits: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """2^(byte - bias) built from its bit pattern (exact; 2^-127 is a float32 subnormal)."""
    e = bits.to(torch.int32) - ELEMENTS["e8m0"].exp_bias
    return pow2(e, dtype)


def decode_e2m1(nibbles: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """FP4 E2M1 codes (integers 0..15) to `dtype`, by the element record's code table."""
    return _table(ELEMENTS["e2m1"], dtype, nibbles.device)[nibbles.to(torch.int64)]


def unpack_units(w: torch.Tensor, el: Element) -> torch.Tensor:
    """Codes (int64) of elements stored several to a byte, along the last dimension:
    element j * per_unit + i in bits i*b .. i*b+b-1 of byte j (e2m1: 2j low nibble)."""
    b = w.to(torch.int64)
    mask = (1 << el.bits) - 1
    return torch.stack([(b >> (i * el.bits)) & mask for i in range(el.per_unit)],
                       dim=-1).flatten(-2)


def element_values(element: str, w: torch.Tensor, dtype: torch.dtype = torch.float32
                   ) -> torch.Tensor:
    """The values of stored weight elements [..., in] in `dtype`: integer codes as int32,
    elements stored several to a byte ([..., in/2] e2m1) unpacked and looked up in the
    element record's code table, float8 / 16-bit storage (fp6 arrives widened to e4m3,
    `widen_to_e4m3`) converted (exact)."""
    el = ELEMENTS[element]
    if el.kind == INT:
        return w.to(torch.int32)
    if w.dtype.is_floating_point:  # float8 / 16-bit storage, fp6 widened to e4m3: exact
        return w.to(dtype)
    if el.per_unit > 1 or el.kind == EXPONENT or w.dtype == torch.uint8:
        codes = unpack_units(w, el) if el.per_unit > 1 else w.to(torch.int64)
        return _table(el, dtype, w.device)[codes]
    return w.to(dtype)


def pow2(e: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """2^e for integer e (float32: -149..127, float64: -1074..1023), from the bit pattern."""
    if dtype == torch.float64:
        e = e.to(torch.int64)
        normal = (e + 1023).clamp(min=0) << 52
        sub = torch.ones_like(e) << (e + 1074).clamp(0, 51)
        return torch.where(e >= -1022, normal, sub).view(torch.float64)
    e = e.to(torch.int32)
    normal = (e + 127).clamp(min=0) << 23
    sub = torch.ones_like(e) << (e + 149).clamp(0, 22)
    return torch.where(e >= -126, normal, sub).view(torch.float32)



# --- one expert's weights out of the common kernel format ---------------------------------

def dequantize_expert(layer: MoELayer, p: str, e: int) -> torch.Tensor:
    """float32 [out, in] weights of linear `p` of local expert `e`."""
    if layer.quant.packed:
        return _dequantize_int(layer, p, e)
    if layer.has(f"{p}_gs"):
        return _dequantize_nvfp4(layer, p, e)
    if not layer.has(f"{p}_s"):
        return layer.get(f"{p}_w")[e].to(torch.float32)  # 16-bit weights carry no scale
    w = element_values(layer.quant.info.element, layer.get(f"{p}_w")[e]).to(torch.float32)
    n_out, n_in = w.shape
    s = layer.get(f"{p}_s")[e]
    if s.dtype == torch.uint8:  # E8M0 exponents, one per 32 columns
        return (w.view(n_out, -1, MX_BLOCK) * decode_e8m0(s).unsqueeze(-1)).view(n_out, n_in)
    rows, cols = layer.meta[f"{p}_block"]
    s = s.repeat_interleave(rows, 0)[:n_out].repeat_interleave(cols, 1)[:, :n_in]
    return w * s


def _dequantize_nvfp4(layer: MoELayer, p: str, e: int) -> torch.Tensor:
    """e2m1 pairs times e4m3 block scales per 16 columns times the shard's global factor."""
    n_out, n_in = linear_dims(layer, p)
    w = element_values("e2m1", layer.get(f"{p}_w")[e])
    gs = layer.get(f"{p}_gs")[e].to(torch.float32)  # [1] or [2]: w1 rows, w3 rows
    s = decode_e4m3(layer.get(f"{p}_s")[e]) * gs.repeat_interleave(n_out // gs.numel())[:, None]
    return (w.view(n_out, -1, NVFP4_BLOCK) * s.unsqueeze(-1)).view(n_out, n_in)


def _dequantize_int(layer: MoELayer, p: str, e: int) -> torch.Tensor:
    n_out, n_in = linear_dims(layer, p)
    bits = layer.meta["bits"]
    q = layer.get(f"{p}_q")[e]
    u = (unpack_nibbles(q, n_in) if bits == 4 else q).to(torch.float32)
    s = layer.get(f"{p}_s")[e]
    zp = layer.get(f"{p}_zp")[e].to(torch.float32) if layer.has(f"{p}_zp") else None
    if layer.has(f"{p}_g_idx"):  # act order: each column names its group
        g_idx = layer.get(f"{p}_g_idx")[e].to(torch.int64)
        zero = zp[:, g_idx] if zp is not None else float(1 << (bits - 1))
        return (u - zero) * s[:, g_idx]
    cols = layer.meta[f"{p}_group_cols"]
    u = u.view(n_out, -1, cols)
    zero = zp.unsqueeze(-1) if zp is not None else float(1 << (bits - 1))
    return ((u - zero) * s.unsqueeze(-1)).view(n_out, n_in)


__all__ = ["CHUNK_ELEMENTS", "WIDEN_CHUNK_ELEMENTS", "decode_e2m1", "decode_e4m3", "decode_e8m0",
           "dequantize_expert", "element_values", "pack_nibbles", "pow2", "undo_interleave",
           "unpack_nibbles", "unpack_units", "unpack_words", "widen_to_e4m3"]
