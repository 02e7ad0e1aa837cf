"""AutoAWQ GEMM checkpoints (int4).

    {p}_qweight int32 [E, in, out/8]   packed along out in AWQ order [0,2,4,6,1,3,5,7]
    {p}_qzeros  int32 [E, G, out/8]    same packing and order; true (unsigned) zeros
    {p}_scales        [E, G, out]
"""

from __future__ import annotations

import torch

from ..canonical import CanonicalLinear
from ..checkpoint import Checkpoint
from ..packing import awq_interleave, awq_undo_interleave, pack_int32, unpack_int32
from ..schemes.tensors import role_names
from .common import (
    check_symmetric_zeros,
    group_cols,
    scale_dtype,
    scales_float64,
)

_BITS = 4


def _unpack_columns(t: torch.Tensor, n_out: int, packing: str) -> torch.Tensor:
    """AWQ words -> unsigned codes in logical column order (unpack, then undo the interleave)."""
    return awq_undo_interleave(unpack_int32(t, _BITS, n_out, dim=2, packing=packing), dim=2)


def read_awq(ckpt: Checkpoint, p: str) -> CanonicalLinear:
    n = role_names(ckpt, p)  # tensor names by role
    rec = ckpt.record
    qweight = ckpt.tensor(n["weight"])
    _, n_in, words = qweight.shape
    n_out = words * 8
    codes = (_unpack_columns(qweight, n_out, rec.packing) - rec.code_offset).transpose(1, 2)
    scales = scales_float64(ckpt, n["scale"])
    zeros = None
    if not ckpt.sym or n.get("zeros") in ckpt.tensors:
        qzeros = ckpt.tensor(n["zeros"])
        zeros = (_unpack_columns(qzeros, n_out, rec.packing) - rec.code_offset).transpose(1, 2)
        zeros = zeros.contiguous()
        if ckpt.sym:
            check_symmetric_zeros(n["zeros"], zeros, rec.code_offset)
            zeros = None
    return CanonicalLinear(codes=codes, scales=scales.transpose(1, 2),
                           block=(1, group_cols(ckpt, n_in)), zeros=zeros)


def write_awq(c: CanonicalLinear, p: str, ckpt_attrs: Checkpoint,
              model_dtype: torch.dtype) -> dict[str, torch.Tensor]:
    n = role_names(ckpt_attrs, p)  # tensor names by role
    rec = ckpt_attrs.record

    def pack_columns(unsigned):  # [E, X, out] -> interleave, then pack along out
        return pack_int32(awq_interleave(unsigned, dim=2), _BITS, dim=2, packing=rec.packing)

    out = {n["weight"]: pack_columns((c.codes + rec.code_offset).transpose(1, 2)),
           n["scale"]: c.scales.transpose(1, 2).to(scale_dtype(rec.scale_dtype, model_dtype))}
    if c.zeros is not None:
        out[n["zeros"]] = pack_columns((c.zeros + rec.code_offset).transpose(1, 2))
    return out
