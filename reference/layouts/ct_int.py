"""compressed-tensors int-quantized checkpoints with int4 codes (llm-compressor's W4AFP8).

    {p}_weight        int8 [E, out, in]   the signed code itself, in [-8, 7] for 4 bits
    {p}_weight_scale       [E, out, G]    group scales in the model's dtype

Symmetric only (the preset's and vLLM's W4A8-FP8 MoE's): no zero points.
"""

from __future__ import annotations

import torch

from ..canonical import CanonicalLinear
from ..checkpoint import Checkpoint
from ..schemes import weight_scale_block
from ..schemes.tensors import role_names
from .common import check_range, num_groups, scale_dtype, scales_float64


def read_ct_int(ckpt: Checkpoint, p: str) -> CanonicalLinear:
    n = role_names(ckpt, p)  # tensor names by role
    bits = ckpt.info.weight_bits
    name = n["weight"]
    w = ckpt.tensor(name)
    n_in = w.shape[2]
    num_groups(ckpt, name, n_in)
    codes = w.to(torch.int32)
    half = 1 << (bits - 1)
    # an int8 tensor holds any 8-bit value: a file that declares 4 bits must keep to int4
    check_range(ckpt, name, codes, -half, half - 1, f"int{bits} codes")
    return CanonicalLinear(codes=codes, scales=scales_float64(ckpt, n["scale"]),
                           block=weight_scale_block(ckpt, p, w.shape[1], n_in))


def write_ct_int(c: CanonicalLinear, p: str, ckpt_attrs: Checkpoint,
                 model_dtype: torch.dtype) -> dict[str, torch.Tensor]:
    n = role_names(ckpt_attrs, p)  # tensor names by role
    rec = ckpt_attrs.record
    return {n["weight"]: c.codes.to(torch.int8),
            n["scale"]: c.scales.to(scale_dtype(rec.scale_dtype, model_dtype))}
