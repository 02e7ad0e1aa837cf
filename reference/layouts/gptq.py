"""GPTQ checkpoints (AutoGPTQ "gptq" = v1, GPTQModel "gptq_v2"), int4 and int8.

    {p}_qweight int32 [E, in*b/32, out]   packed along in, LSB first, stored u = code + 2^(b-1)
    {p}_scales        [E, G, out]         G = in/g (1 for g = -1)
    {p}_qzeros  int32 [E, G, out*b/32]    packed along out; v1 stores z-1, v2 stores z
    {p}_g_idx   int32 [E, in]             act order only
"""

from __future__ import annotations

import torch

from ..canonical import CanonicalLinear
from ..checkpoint import Checkpoint
from ..errors import CheckpointError
from ..packing import codes_per_word, pack_int32, unpack_int32
from ..schemes import weight_scale_block
from ..schemes.tensors import role_names
from .common import (
    check_range,
    check_symmetric_zeros,
    linear_format,
    num_groups,
    read_g_idx,
    scale_dtype,
    scales_float64,
)


def gptq_v1_zero_offset(stored: torch.Tensor) -> torch.Tensor:
    """GPTQ v1 writes z - 1 (AutoGPTQ); the true zero is stored + 1, without wrapping."""
    return stored + 1


def read_gptq(ckpt: Checkpoint, p: str) -> CanonicalLinear:
    rec, bits, n = linear_format(ckpt, p)
    per = codes_per_word(bits)
    qweight = ckpt.tensor(n["weight"])
    E, words, n_out = qweight.shape
    n_in = words * per
    groups = num_groups(ckpt, n["weight"], n_in)
    u = unpack_int32(qweight, bits, n_in, dim=1, packing=rec.packing)  # [E, in, out]
    codes = u.sub_(rec.code_offset).transpose(1, 2)  # in place: u is a fresh tensor
    scales = scales_float64(ckpt, n["scale"])
    zeros = _read_zeros(ckpt, p, E, groups, n_out, bits)
    return CanonicalLinear(codes=codes, scales=scales.transpose(1, 2),
                           block=weight_scale_block(ckpt, p, n_out, n_in), zeros=zeros,
                           g_idx=read_g_idx(ckpt, n["g_idx"], n_in, groups))


def _read_zeros(ckpt, p, E, groups, n_out, bits) -> torch.Tensor | None:
    n = role_names(ckpt, p)  # tensor names by role
    rec, name = ckpt.record, n["zeros"]
    if ckpt.sym and name not in ckpt.tensors:
        return None
    qzeros = ckpt.tensor(name)
    z = unpack_int32(qzeros, bits, n_out, dim=2, packing=rec.packing)
    if rec.zero_domain == "unsigned-minus-one":
        z = gptq_v1_zero_offset(z)
    check_range(ckpt, name, z, 0, (1 << bits) - 1,
                "true zero points" + (" (stored z-1, so stored 2^b-1 overflows)"
                                      if rec.zero_domain == "unsigned-minus-one" else ""))
    signed = (z - rec.code_offset).transpose(1, 2).contiguous()
    if ckpt.sym:  # symmetric GPTQ files still carry qzeros: they must say z = 2^(b-1)
        check_symmetric_zeros(name, signed, rec.code_offset)
        return None
    return signed


def write_gptq(c: CanonicalLinear, p: str, ckpt_attrs: Checkpoint,
               model_dtype: torch.dtype) -> dict[str, torch.Tensor]:
    rec, bits, n = linear_format(ckpt_attrs, p)
    E, n_out, _ = c.codes.shape
    u = (c.codes + rec.code_offset).transpose(1, 2)
    out = {n["weight"]: pack_int32(u, bits, dim=1, packing=rec.packing),
           n["scale"]: c.scales.transpose(1, 2).to(scale_dtype(rec.scale_dtype, model_dtype))}
    groups = c.scales.shape[2]
    z = (torch.zeros(E, n_out, groups, dtype=torch.int32) if c.zeros is None else c.zeros)
    z = (z + rec.code_offset).transpose(1, 2)
    if rec.zero_domain == "unsigned-minus-one":
        if (z == 0).any():
            raise CheckpointError(n["zeros"], "true zero points >= 1 (gptq v1 stores z-1)",
                                  "a zero point of 0")
        z = z - 1
    out[n["zeros"]] = pack_int32(z.contiguous(), bits, dim=2, packing=rec.packing)
    if c.g_idx is not None:
        out[n["g_idx"]] = c.g_idx.to(torch.int32)
    return out
