"""A strided case's tensors: the same values in a memory layout a kernel cannot take for granted.

Checkpoints come out of safetensors files, transposes and slices of fused tensors, so a layer
may receive any strides. `restrided(t)` keeps t's values and changes how they lie in memory:

    2-D and more   column-major in the last two dimensions (t.mT of a contiguous t.mT)
    otherwise      every element followed by a zero gap, one element into its buffer
                   (stride 2 along the last dimension, storage offset 1)

The second form also covers tensors whose column-major layout is still contiguous (a size-1
dimension among the last two, such as [E, 1, N] group scales) and 0-d tensors. A kernel that
reads the bytes in row-major order sees transposed values or zeros: wrong numbers, not noise.
"""

from __future__ import annotations

import torch


def restrided(t: torch.Tensor) -> torch.Tensor:
    """`t`'s values in a non-contiguous layout (empty tensors stay as they are)."""
    if t.numel() == 0:
        return t
    if t.dim() >= 2:
        column_major = t.mT.contiguous().mT
        if not column_major.is_contiguous():
            return column_major
    return torch.stack((torch.zeros_like(t), t), dim=-1)[..., 1]

