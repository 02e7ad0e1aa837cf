"""AutoAWQ GEMM checkpoints (int4), and AMD Quark's int4 per group ("quark-int": the same
packing under the names weight / weight_zero_point / weight_scale, signed nibbles).

    {p}_qweight int32 [E, in, out/8]   packed along out in AWQ order [0,2,4,6,1,3,5,7]
    {p}_qzeros  int32 [E, G, out/8]    same packing and order; true (unsigned) zeros
    {p}_scales        [E, G, out]

A format record with `twos_complement` (Quark) stores each field as a two's complement
nibble: flipping its top bit gives the offset code (code + 8) the rest reads.
"""

from __future__ import annotations

import torch

from ..canonical import CanonicalLinear
from ..checkpoint import Checkpoint
from ..packing import awq_interleave, awq_undo_interleave, pack_int32, unpack_int32
from ..schemes import weight_scale_block
from ..schemes.tensors import role_names
from .common import (
    check_symmetric_zeros,
    scale_dtype,
    scales_float64,
)

_BITS = 4


def _unpack_columns(t: torch.Tensor, n_out: int, rec) -> torch.Tensor:
    """AWQ words -> unsigned (offset) codes in logical column order (unpack, undo the
    interleave, and for two's complement fields flip the top bit)."""
    u = awq_undo_interleave(unpack_int32(t, _BITS, n_out, dim=2, packing=rec.packing), dim=2)
    return u ^ (1 << (_BITS - 1)) if rec.twos_complement else u


def read_awq(ckpt: Checkpoint, p: str) -> CanonicalLinear:
    n = role_names(ckpt, p)  # tensor names by role
    rec = ckpt.record
    qweight = ckpt.tensor(n["weight"])
    _, n_in, words = qweight.shape
    n_out = words * 8
    codes = (_unpack_columns(qweight, n_out, rec) - rec.code_offset).transpose(1, 2)
    scales = scales_float64(ckpt, n["scale"])
    zeros = None
    if not ckpt.sym or n.get("zeros") in ckpt.tensors:
        qzeros = ckpt.tensor(n["zeros"])
        zeros = (_unpack_columns(qzeros, n_out, rec) - rec.code_offset).transpose(1, 2)
        zeros = zeros.contiguous()
        if ckpt.sym:
            check_symmetric_zeros(n["zeros"], zeros, rec.code_offset)
            zeros = None
    return CanonicalLinear(codes=codes, scales=scales.transpose(1, 2),
                           block=weight_scale_block(ckpt, p, n_out, n_in), zeros=zeros)


def write_awq(c: CanonicalLinear, p: str, ckpt_attrs: Checkpoint,
              model_dtype: torch.dtype) -> dict[str, torch.Tensor]:
    n = role_names(ckpt_attrs, p)  # tensor names by role
    rec = ckpt_attrs.record

    def pack_columns(unsigned):  # [E, X, out] -> interleave, then pack along out
        fields = unsigned ^ (1 << (_BITS - 1)) if rec.twos_complement else unsigned
        return pack_int32(awq_interleave(fields, dim=2), _BITS, dim=2, packing=rec.packing)

    out = {n["weight"]: pack_columns((c.codes + rec.code_offset).transpose(1, 2)),
           n["scale"]: c.scales.transpose(1, 2).to(scale_dtype(rec.scale_dtype, model_dtype))}
    zeros = c.zeros
    if zeros is None and ckpt_attrs.record.twos_complement:  # Quark writes zero zero points
        zeros = torch.zeros_like(c.scales, dtype=torch.int32)
    if zeros is not None:
        out[n["zeros"]] = pack_columns((zeros + rec.code_offset).transpose(1, 2))
    return out
