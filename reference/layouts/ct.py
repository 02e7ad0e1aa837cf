"""compressed-tensors pack-quantized checkpoints (int4, int8).

    {p}_weight_packed     int32 [E, out, words]   packed along in, stored u = code + 2^(b-1)
    {p}_weight_scale            [E, out, G]
    {p}_weight_zero_point int32 [E, ceil(out*b/32), G]  signed zeros, packed along out (asym)
    {p}_weight_g_idx      int32 [E, in]           actorder
    {p}_weight_shape      int64 [E, 2]            optional: (out, in) before packing
"""

from __future__ import annotations

import torch

from ..canonical import CanonicalLinear
from ..checkpoint import Checkpoint
from ..errors import CheckpointError
from ..packing import pack_int32, packed_length, unpack_int32
from ..schemes import weight_scale_block
from ..schemes.tensors import role_names
from .common import (
    check_symmetric_zeros,
    linear_format,
    num_groups,
    read_g_idx,
    scale_dtype,
    scales_float64,
)


def read_ct(ckpt: Checkpoint, p: str) -> CanonicalLinear:
    rec, bits, n = linear_format(ckpt, p)
    packed = ckpt.tensor(n["weight"])
    E, n_out, words = packed.shape
    n_in = _input_size(ckpt, p, E, n_out, words, bits)
    groups = num_groups(ckpt, n["weight"], n_in)
    codes = unpack_int32(packed, bits, n_in, dim=2, packing=rec.packing) - rec.code_offset
    scales = scales_float64(ckpt, n["scale"])
    zeros = None
    if not ckpt.sym or n.get("zeros") in ckpt.tensors:
        zp = ckpt.tensor(n["zeros"])
        zeros = unpack_int32(zp, bits, n_out, dim=1, packing=rec.packing) - rec.code_offset
        if ckpt.sym:
            check_symmetric_zeros(n["zeros"], zeros, rec.code_offset)
            zeros = None
    return CanonicalLinear(codes=codes, scales=scales,
                           block=weight_scale_block(ckpt, p, n_out, n_in), zeros=zeros,
                           g_idx=read_g_idx(ckpt, n["g_idx"], n_in, groups))


def _input_size(ckpt, p, E, n_out, words, bits) -> int:
    n = role_names(ckpt, p)  # tensor names by role
    name = n["shape"]
    if name not in ckpt.tensors:
        return words * 32 // bits
    shape = ckpt.expect(name, torch.int64, (E, 2))
    if (shape[:, 0] != n_out).any() or shape[:, 1].unique().numel() != 1:
        raise CheckpointError(name, f"({n_out}, in) for every expert", str(shape.tolist()))
    n_in = int(shape[0, 1])
    if packed_length(n_in, bits, ckpt.record.packing) != words:  # the packed tensor's size
        # agrees with the other tensors (check_tensors): the declared shape is what is wrong
        raise CheckpointError(name, f"an input size that {words} words of {bits}-bit codes "
                              f"hold, as in {p}_weight_packed", f"in = {n_in}")
    return n_in


def write_ct(c: CanonicalLinear, p: str, ckpt_attrs: Checkpoint,
             model_dtype: torch.dtype) -> dict[str, torch.Tensor]:
    rec, bits, n = linear_format(ckpt_attrs, p)
    E, n_out, n_in = c.codes.shape
    out = {n["weight"]: pack_int32(c.codes + rec.code_offset, bits, dim=2,
                                            packing=rec.packing),
           n["scale"]: c.scales.to(scale_dtype(rec.scale_dtype, model_dtype)),
           n["shape"]: torch.tensor([[n_out, n_in]] * E, dtype=torch.int64)}
    if c.zeros is not None:
        out[n["zeros"]] = pack_int32(c.zeros + rec.code_offset, bits, dim=1,
                                                   packing=rec.packing)
    if c.g_idx is not None:
        out[n["g_idx"]] = c.g_idx.to(torch.int32)
    return out
