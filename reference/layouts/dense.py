"""Unpacked layouts: 16-bit, INT8 and FP8 per-tensor/channel/block, MXFP8 and MXFP4.

    {p}_weight        [E, out, in]   bf16/fp16, int8 or float8_e4m3fn
                      [E, out, in/2] uint8, two FP4 E2M1 codes a byte (2j low nibble)
    {p}_weight_scale  tensor:  [E], or [E, 2] for w13 (w1 rows, w3 rows: the shard scales)
                      channel: [E, out, 1]
                      block:   [E, ceil(out/128), ceil(in/128)]        (FP8 only)
                      MXFP8, MXFP4: uint8 E8M0 [E, out, in/32]
"""

from __future__ import annotations

import torch

from ..canonical import CanonicalLinear
from ..checkpoint import Checkpoint
from ..elements import (
    decode_e2m1,
    decode_e4m3,
    decode_e8m0,
    encode_e2m1,
    encode_e4m3,
    floor_log2,
)
from ..errors import CheckpointError
from ..packing import pack_nibbles, unpack_nibbles
from ..schemes import (
    E8M0_BIAS,
    E8M0_NAN,
    FP8_BLOCK,
    STRATEGY_BLOCK,
    STRATEGY_CHANNEL,
    STRATEGY_TENSOR,
)
from ..schemes.tensors import weight_dtype
from .common import check_finite, scales_float64


def read_dense(ckpt: Checkpoint, p: str) -> CanonicalLinear:
    info = ckpt.info
    w = ckpt.tensor(f"{p}_weight")
    E, n_out, n_in = w.shape
    if info.scale_encoding == "none":
        check_finite(f"{p}_weight", w)
        return CanonicalLinear(codes=w.to(torch.float64),
                               scales=torch.ones(E, 1, 1, dtype=torch.float64,
                                                 device=w.device), block=(n_out, n_in))
    codes = _DECODE[info.element](f"{p}_weight", w)
    n_in = codes.shape[-1]  # packed elements: more than the stored bytes
    if info.scale_encoding == "e8m0":
        scales, block = _read_e8m0(ckpt, p, E, n_out, n_in), (1, info.scale_block)
    else:
        scales, block = _read_scale(ckpt, p, E, n_out, n_in)
    return CanonicalLinear(codes=codes, scales=scales, block=block)


def _decode_e4m3_checked(name: str, w: torch.Tensor) -> torch.Tensor:
    codes = decode_e4m3(w)
    if torch.isnan(codes).any():
        raise CheckpointError(name, "no NaN codes (0x7f/0xff)",
                              f"{int(torch.isnan(codes).sum())} NaN codes")
    return codes


# element codec -> (stored weight -> canonical codes, canonical codes -> stored weight);
# every e2m1 code is a finite value
_DECODE = {"int8": lambda name, w: w.to(torch.int32), "e4m3": _decode_e4m3_checked,
           "e2m1": lambda name, w: decode_e2m1(unpack_nibbles(w))}
_ENCODE = {"int8": lambda codes: codes.to(torch.int8), "e4m3": encode_e4m3,
           "e2m1": lambda codes: pack_nibbles(encode_e2m1(codes))}


def _read_scale(ckpt, p, E, n_out, n_in):
    name, strategy = f"{p}_weight_scale", ckpt.weight_strategy
    t = ckpt.tensor(name)
    if strategy == STRATEGY_TENSOR:
        if p == "w13" and tuple(t.shape) == (E, 2):
            if n_out % 2:
                raise CheckpointError(name, "an even w13 row count for w1/w3 shard scales",
                                      f"{n_out} rows")
            return scales_float64(ckpt, name).view(E, 2, 1), (n_out // 2, n_in)
        return scales_float64(ckpt, name).view(E, 1, 1), (n_out, n_in)
    if strategy == STRATEGY_CHANNEL:
        return scales_float64(ckpt, name), (1, n_in)
    if strategy == STRATEGY_BLOCK:
        return scales_float64(ckpt, name), (FP8_BLOCK, FP8_BLOCK)
    raise CheckpointError("checkpoint.weight_strategy", "tensor, channel or block", strategy)


def _read_e8m0(ckpt, p, E, n_out, n_in):
    name = f"{p}_weight_scale"
    block = ckpt.info.scale_block
    if n_in % block:
        raise CheckpointError(f"{p}_weight", f"an input dimension divisible by {block}",
                              str(n_in))
    bits = ckpt.tensor(name)
    if (bits == E8M0_NAN).any():
        raise CheckpointError(name, "E8M0 exponents 0..254 (0xFF is NaN)",
                              f"{int((bits == E8M0_NAN).sum())} bytes of 0xFF")
    return decode_e8m0(bits)


def write_dense(c: CanonicalLinear, p: str, ckpt_attrs: Checkpoint,
                model_dtype: torch.dtype) -> dict[str, torch.Tensor]:
    info = ckpt_attrs.info
    if info.scale_encoding == "none":
        return {f"{p}_weight": c.codes.to(weight_dtype(ckpt_attrs))}
    weight = _ENCODE[info.element](c.codes)
    scale = c.scales.to(torch.float32)
    if info.scale_encoding == "e8m0":
        scale = (floor_log2(c.scales) + E8M0_BIAS).to(torch.uint8)  # scales are powers of 2
    elif ckpt_attrs.weight_strategy == STRATEGY_TENSOR:
        scale = scale.flatten(1).squeeze(1)  # [E, 1, 1] -> [E]; [E, 2, 1] -> [E, 2]
    return {f"{p}_weight": weight, f"{p}_weight_scale": scale}
