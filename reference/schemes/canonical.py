"""`CanonicalLinear`: the one form every checkpoint is normalized into before any arithmetic,
and the form backends export their processed weights in (the `canonical` check compares the
two bit for bit). A type and its meaning only: the arithmetic is the reference's
(`moecert.reference.canonical.dequantize_canonical`), and each backend reads its own.

One quantized linear of every expert, whatever file it came from:

    codes   [E, out, in]   signed integer codes (int32) or decoded element values (float64)
    zeros   [E, out, G]    true zero points in the codes' signed domain (int32), or None
    scales  [E, R, C]      float64 scales, one per block of `block` = (rows, cols) elements
    g_idx   [E, in]        group of each input column (act order), or None: column k is in k//cols
    global_scale [E, out]  float64 multiplicative per-row factor, or None

    W[e, o, i] = (codes[e, o, i] - zeros[e, o, gi]) * scales[e, o // rows, gi] * global[e, o]
    with gi = g_idx[e, i] if g_idx is given else i // cols.

One block shape covers per-tensor (out, in), w1/w3 shard (N, in), per-channel (1, in),
per-group (1, g), DeepSeek (128, 128) and MX (1, 32) scales.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class CanonicalLinear:
    codes: torch.Tensor
    scales: torch.Tensor
    block: tuple[int, int]
    zeros: torch.Tensor | None = None
    g_idx: torch.Tensor | None = None
    global_scale: torch.Tensor | None = None

    @property
    def shape(self) -> tuple[int, int, int]:
        return tuple(self.codes.shape)


__all__ = ["CanonicalLinear"]
