"""NVIDIA ModelOpt INT4 AWQ checkpoints (`quant_algo` W4A16_AWQ).

    {p}_weight           uint8 [E, out/2, in]  two's complement int4 codes, rows 2i (low
                                               nibble) and 2i+1 (high nibble) of column k
    {p}_weight_scale     fp32  [E, out, G]     w = code * scale (symmetric, no zero points)
    {p}_pre_quant_scale        [E, in]         the AWQ smoothing factor: the layer's input
                                               times it, per input column (not a weight
                                               factor: the reference applies it to the
                                               GEMM's input, `dequantize.read_pre_quant_scale`)

The weights' canonical form is the codes and scales alone; the pre-quant scale is written
and read beside it by `pre_quant_scale` below.
"""

from __future__ import annotations

import torch

from ..canonical import CanonicalLinear
from ..checkpoint import Checkpoint
from ..schemes import weight_scale_block
from ..schemes.tensors import role_names
from .common import num_groups, scale_dtype, scales_float64

_NIBBLE = 0xF


def read_modelopt_int(ckpt: Checkpoint, p: str) -> CanonicalLinear:
    n = role_names(ckpt, p)  # tensor names by role
    rec = ckpt.record
    half = 1 << (ckpt.info.weight_bits - 1)
    packed = ckpt.tensor(n["weight"])
    E, pairs, n_in = packed.shape
    num_groups(ckpt, n["weight"], n_in)
    fields = torch.stack((packed & _NIBBLE, packed >> 4), dim=2).to(torch.int32)
    unsigned = fields ^ half if rec.twos_complement else fields  # offset codes (code + 8)
    codes = unsigned.reshape(E, 2 * pairs, n_in) - rec.code_offset
    return CanonicalLinear(codes=codes, scales=scales_float64(ckpt, n["scale"]),
                           block=weight_scale_block(ckpt, p, 2 * pairs, n_in))


def write_modelopt_int(c: CanonicalLinear, p: str, ckpt_attrs: Checkpoint,
                       model_dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """The weight and its scales; the pre-quant scale is no part of the canonical form (the
    writer of a checkpoint draws it: `synthesize`, the exact tier)."""
    n = role_names(ckpt_attrs, p)
    rec = ckpt_attrs.record
    half = 1 << (ckpt_attrs.info.weight_bits - 1)
    E, n_out, n_in = c.codes.shape
    unsigned = c.codes + rec.code_offset
    fields = (unsigned ^ half if rec.twos_complement else unsigned).reshape(E, n_out // 2, 2,
                                                                             n_in)
    packed = (fields[:, :, 0] | (fields[:, :, 1] << 4)).to(torch.uint8)
    return {n["weight"]: packed,
            n["scale"]: c.scales.to(scale_dtype(rec.scale_dtype, model_dtype))}
