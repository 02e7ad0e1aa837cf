"""Unpacked layouts: 16-bit, INT8 and FP8 per-tensor/channel/block, the MX formats and NVFP4.

    {p}_weight        [E, out, in]   bf16/fp16, int8 or float8_e4m3fn
                      uint8 [E, out, in * bits / 8]: codes of a sub-byte element packed as
                      its record says (`per_unit` codes in `units` bytes, lsb first: e2m1
                      element 2j in the low nibble of byte j; fp6 codes 4j..4j+3 in bytes
                      3j..3j+2, as AMD Quark stores them)
    {p}_weight_scale  tensor:  [E], or [E, 2] for w13 (w1 rows, w3 rows: the shard scales)
                      channel: [E, out, 1]
                      block:   [E, ceil(out/128), ceil(in/128)]        (FP8 only)
                      MX:      uint8 E8M0 [E, out, in/32]
                      NVFP4:   float8_e4m3fn [E, out, in/16]
    global scale      NVFP4: fp32 [E], or [E, 2] for w13 (shards); multiplied (ModelOpt
                      {p}_weight_scale_2) or divided by (compressed-tensors
                      {p}_weight_global_scale), as the format record says
The tensor names are the format's (`SchemeFormat.names`).
"""

from __future__ import annotations

import torch

from ..canonical import CanonicalLinear
from ..checkpoint import Checkpoint
from ..elements import (
    decode,
    decode_codes,
    decode_e4m3,
    element_codes,
    encode_e4m3,
    encode_stored,
    floor_log2,
)
from ..errors import CheckpointError
from ..quantize import nvfp4_multiplier
from ..schemes import (
    STRATEGY_BLOCK,
    STRATEGY_CHANNEL,
    STRATEGY_TENSOR,
    weight_scale_block,
)
from ..schemes.elements import INT
from ..schemes.tensors import role_names, weight_dtype
from .common import check_finite, check_symmetric_zeros, scales_float64


def read_dense(ckpt: Checkpoint, p: str) -> CanonicalLinear:
    n = role_names(ckpt, p)  # tensor names by role
    info = ckpt.info
    name = n["weight"]
    w = ckpt.tensor(name)
    E, n_out = w.shape[:2]
    n_in = int(w.shape[2] * info.elements_per_byte)
    if info.scale_encoding == "none":
        check_finite(name, w)
        return CanonicalLinear(codes=w.to(torch.float64),
                               scales=torch.ones(E, 1, 1, dtype=torch.float64,
                                                 device=w.device), block=(n_out, n_in))
    codes = _decode_weight(name, w, info.weight_element)
    if info.scale_encoding == "e8m0":
        scales, block = _read_e8m0(ckpt, p, E, n_out, n_in), weight_scale_block(
            ckpt, p, n_out, n_in)
    elif info.scale_encoding == "e4m3":
        scales, block = _read_e4m3_blocks(ckpt, p), weight_scale_block(ckpt, p, n_out, n_in)
    else:
        scales, block = _read_scale(ckpt, p, E, n_out, n_in)
        zero_point = n.get("zeros")
        if zero_point in ckpt.tensors:  # Quark's: symmetric schemes only, so every one is 0
            check_symmetric_zeros(zero_point, ckpt.tensors[zero_point], 0)
    glob = None if info.global_scale == "none" else _read_global(ckpt, p, n_out)
    return CanonicalLinear(codes=codes, scales=scales, block=block, global_scale=glob)


def _decode_weight(name: str, w: torch.Tensor, el) -> torch.Tensor:
    """Canonical codes of a stored weight: integer codes as int32, float elements decoded
    from their bits (`elements.decode`, by its table), none of them one of the element's
    NaN codes."""
    if el.kind == INT:
        return w.to(torch.int32)
    codes = decode_codes(element_codes(w, el), el)
    if torch.isnan(codes).any():
        nan = ", ".join(f"0x{c:02X}" for c in el.nan_codes)
        raise CheckpointError(name, f"no NaN codes ({nan})",
                              f"{int(torch.isnan(codes).sum())} NaN codes")
    return codes


def _encode_weight(codes: torch.Tensor, el) -> torch.Tensor:
    """Inverse of `_decode_weight`: the element's storage, packed several to a few bytes as
    its record says (`elements.encode_stored`: e2m1 element 2j in the low nibble, fp6 four
    in three bytes)."""
    if el.kind == INT:
        return codes.to(el.storage)
    return encode_stored(codes, el)


def _read_e4m3_blocks(ckpt, p):
    """NVFP4 block scales: e4m3 values, each finite and > 0 (the producing tools write 1 for
    an all-zero block)."""
    n = role_names(ckpt, p)  # tensor names by role
    name = n["scale"]
    s = decode_e4m3(ckpt.tensor(name))
    bad = torch.isnan(s) | (s <= 0)
    if bad.any():
        idx = [int(i) for i in bad.nonzero()[0]]
        idx[0] += ckpt.first_expert
        raise CheckpointError(name, "finite e4m3 block scales > 0",
                              f"{s[bad][0].item()} at index {idx} ({int(bad.sum())} bad)")
    return s


def _read_global(ckpt, p, n_out):
    """[E, out] float64 multipliers from the global scale [E] (or [E, 2]: w1 rows, w3 rows),
    read as the format record says (multiply, or divide: the reciprocal)."""
    n = role_names(ckpt, p)  # tensor names by role
    name = n["global_scale"]
    stored = scales_float64(ckpt, name)
    if stored.dim() == 2 and n_out % 2:
        raise CheckpointError(name, "an even w13 row count for w1/w3 shard scales",
                              f"{n_out} rows")
    g = nvfp4_multiplier(stored.view(stored.shape[0], -1), ckpt.record.global_scale)
    return g.repeat_interleave(n_out // g.shape[1], dim=1)


def _read_scale(ckpt, p, E, n_out, n_in):
    n = role_names(ckpt, p)  # tensor names by role
    name, strategy = n["scale"], ckpt.weight_strategy
    t = ckpt.tensor(name)
    if strategy == STRATEGY_TENSOR:
        if p == "w13" and tuple(t.shape) == (E, 2):
            if n_out % 2:
                raise CheckpointError(name, "an even w13 row count for w1/w3 shard scales",
                                      f"{n_out} rows")
            return (scales_float64(ckpt, name).view(E, 2, 1),
                    weight_scale_block(ckpt, p, n_out, n_in, shards=2))
        return (scales_float64(ckpt, name).view(E, 1, 1),
                weight_scale_block(ckpt, p, n_out, n_in, shards=1))
    if strategy in (STRATEGY_CHANNEL, STRATEGY_BLOCK):
        return scales_float64(ckpt, name), weight_scale_block(ckpt, p, n_out, n_in)
    raise CheckpointError("checkpoint.weight_strategy", "tensor, channel or block", strategy)


def _read_e8m0(ckpt, p, E, n_out, n_in):
    n = role_names(ckpt, p)  # tensor names by role
    name = n["scale"]
    block = ckpt.info.scale_block
    if n_in % block:
        raise CheckpointError(n["weight"], f"an input dimension divisible by {block}",
                              str(n_in))
    el = ckpt.info.scale_element
    s = decode(ckpt.tensor(name), el)
    if torch.isnan(s).any():
        raise CheckpointError(name, f"{el.name} codes other than its NaN code "
                              f"({', '.join(f'0x{c:02X}' for c in el.nan_codes)})",
                              f"{int(torch.isnan(s).sum())} NaN codes")
    return s


def write_dense(c: CanonicalLinear, p: str, ckpt_attrs: Checkpoint,
                model_dtype: torch.dtype) -> dict[str, torch.Tensor]:
    n = role_names(ckpt_attrs, p)  # tensor names by role
    info = ckpt_attrs.info
    name = n["weight"]
    if info.scale_encoding == "none":
        return {name: c.codes.to(weight_dtype(ckpt_attrs))}
    weight = _encode_weight(c.codes, info.weight_element)
    scale = c.scales.to(torch.float32)
    if info.scale_encoding == "e8m0":
        # scales are powers of 2
        scale = (floor_log2(c.scales) + info.scale_element.exp_bias).to(torch.uint8)
    elif info.scale_encoding == "e4m3":
        scale = encode_e4m3(c.scales)
    elif ckpt_attrs.weight_strategy == STRATEGY_TENSOR:
        scale = scale.flatten(1).squeeze(1)  # [E, 1, 1] -> [E]; [E, 2, 1] -> [E, 2]
    out = {name: weight, n["scale"]: scale}
    if info.global_scale != "none":
        out[n["global_scale"]] = _write_global(
            c.global_scale, p, ckpt_attrs.record.global_scale)
    return out


def _write_global(g: torch.Tensor, p: str, convention: str) -> torch.Tensor:
    """Inverse of `_read_global`: w13 with an even row count one value per shard [E, 2] (the
    first row of each half), else [E]."""
    n_out = g.shape[1]
    rows = g[:, [0, n_out // 2]] if p == "w13" and n_out % 2 == 0 else g[:, 0]
    return (rows if convention == "multiply" else 1.0 / rows).to(torch.float32)
