"""The arithmetic of the canonical form (`schemes.canonical.CanonicalLinear`, where its
meaning is written): dequantization, and the broadcasts of block scales it needs.

Backends export the same form so conversions are checked bit for bit before any tolerance
enters.
"""

from __future__ import annotations

import torch

from .schemes.canonical import CanonicalLinear


def broadcast_scale_columns(t: torch.Tensor, cols: int, n_in: int,
                            g_idx: torch.Tensor | None) -> torch.Tensor:
    """[E, R, C] -> [E, R, in]: column i takes entry g_idx[e, i], or i // cols without g_idx."""
    if g_idx is None:
        return t.repeat_interleave(cols, dim=2)[:, :, :n_in]
    index = g_idx.to(torch.int64).unsqueeze(1).expand(-1, t.shape[1], -1)
    return torch.gather(t, 2, index)


def broadcast_scale_rows(t: torch.Tensor, rows: int, n_out: int) -> torch.Tensor:
    """[E, R, X] -> [E, out, X]: row o takes entry o // rows."""
    return t.repeat_interleave(rows, dim=1)[:, :n_out]


def dequantize_canonical(c: CanonicalLinear, out: torch.Tensor | None = None) -> torch.Tensor:
    """(codes - zeros) * scales * global_scale, every factor broadcast to [E, out, in].

    `out`, a float64 buffer of at least E*out*in elements, is reused for the result where the
    blocks tile the matrix (fresh full-size allocations cost more than the arithmetic).
    """
    _, n_out, n_in = c.codes.shape
    rows, cols = c.block
    if c.g_idx is None and n_in % cols == 0 and n_out % rows == 0:
        w = _dequantize_whole_blocks(c, out)
    else:
        values = c.codes.to(torch.float64)
        if c.zeros is not None:
            values = values - broadcast_scale_columns(c.zeros.to(torch.float64), cols, n_in,
                                                      c.g_idx)
        scales = broadcast_scale_rows(c.scales.to(torch.float64), rows, n_out)
        w = values * broadcast_scale_columns(scales, cols, n_in, c.g_idx)
    if c.global_scale is not None:
        w = w * c.global_scale.to(torch.float64).unsqueeze(-1)
    return w


def _float64_copy(codes: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
    """A float64 copy of contiguous `codes`, in `out`'s storage when given."""
    if out is None:
        return codes.to(torch.float64, copy=True)
    return out[:codes.numel()].view(codes.shape).copy_(codes)


def _dequantize_whole_blocks(c: CanonicalLinear, out: torch.Tensor | None) -> torch.Tensor:
    """The same formula when blocks tile the matrix exactly: factors broadcast through views
    [E, R, rows, C, cols] instead of being materialized at full size (DeepSeek-sized layers).
    Codes stored [in, out] in memory (GPTQ, AWQ) are processed in that order, so the float64
    copy needs no transposition."""
    E, n_out, n_in = c.codes.shape
    rows, cols = c.block
    R, C = n_out // rows, n_in // cols
    zeros = None if c.zeros is None else c.zeros.to(torch.float64)
    scales = c.scales.to(torch.float64)
    # The float64 copy of the codes is the only full-size allocation: zeros and scales are
    # applied to it in place, through broadcasting views.
    if c.codes.mT.is_contiguous() and not c.codes.is_contiguous():
        values = _float64_copy(c.codes.mT, out).view(E, C, cols, R, rows)
        if zeros is not None:  # zeros [E, out, C] -> [E, C, 1, R, rows]
            values.sub_(zeros.mT.reshape(E, C, 1, R, rows))
        values.mul_(scales.mT.reshape(E, C, 1, R, 1))
        return values.view(E, n_in, n_out).mT
    values = _float64_copy(c.codes.contiguous(), out).view(E, R, rows, C, cols)
    if zeros is not None:  # zeros [E, out, C] -> [E, R, rows, C, 1]
        values.sub_(zeros.view(E, R, rows, C, 1))
    values.mul_(scales.view(E, R, 1, C, 1))
    return values.view(E, n_out, n_in)
