"""Tier-3 error metrics of a backend's output against the float64 reference.

Every result row records all of them, whichever subset a tolerance entry gates on: a global
cosine cannot see a x2 scale (the norm ratio can), a relative Frobenius error hides one bad
token or expert (the per-row minimum cosine and the mismatch fraction do not).
"""

from __future__ import annotations

import itertools
import math

import torch

# Rows whose reference norm is below this share of the largest row norm carry no direction
# (an expert_map-dropped token, an empty batched slot): their cosine is not defined.
_ROW_NORM_FLOOR = 1e-12


def error_metrics(actual: torch.Tensor, reference: torch.Tensor, atol: float = 0.0,
                  rtol: float = 0.0, expert_ids: torch.Tensor | None = None
                  ) -> dict[str, float]:
    """Metrics of `actual` (any float dtype) against `reference` (float64), same shape.

    nonfinite       count of NaN/Inf in actual (first: nothing else means anything then)
    max_abs         max |actual - reference|
    max_abs_scaled  max_abs / max |reference| (error relative to the output's scale)
    rel_fro         ||actual - reference||_F / ||reference||_F
    cosine          global cosine similarity of the flattened tensors
    min_row_cosine  the worst cosine over rows (tokens) that have a direction
    norm_ratio      ||actual||_F / ||reference||_F (1 when both are zero)
    mismatch_frac   fraction of elements with |actual - reference| > atol + rtol |reference|
    max_expert_rel_fro  (only with `expert_ids`) the worst rel_fro over the token groups of
                    each expert: `expert_ids` [rows, topk] names each row's experts (the
                    output's rows: tokens, or the E*T rows of a batched output with ids
                    arange(E).repeat_interleave(T)); a row counts in every one of its experts'
                    groups and negative ids count nowhere, so one bad expert shows even when
                    it is diluted in the global error
    """
    if actual.shape != reference.shape:
        raise ValueError(f"shapes differ: actual {list(actual.shape)}, reference "
                         f"{list(reference.shape)}")
    ref = reference.to(torch.float64)
    act = actual.to(device=ref.device, dtype=torch.float64)
    nonfinite = int((~torch.isfinite(act)).sum())
    if nonfinite:
        nan = math.nan
        metrics = {"nonfinite": nonfinite, "max_abs": nan, "max_abs_scaled": nan,
                   "rel_fro": nan, "cosine": nan, "min_row_cosine": nan, "norm_ratio": nan,
                   "mismatch_frac": 1.0 if act.numel() else 0.0}
    elif act.numel() == 0:
        metrics = {"nonfinite": 0, "max_abs": 0.0, "max_abs_scaled": 0.0, "rel_fro": 0.0,
                   "cosine": 1.0, "min_row_cosine": 1.0, "norm_ratio": 1.0,
                   "mismatch_frac": 0.0}
    else:
        metrics = _finite_metrics(act, ref, atol, rtol)
    if expert_ids is not None:
        metrics["max_expert_rel_fro"] = (math.nan if nonfinite
                                         else _max_expert_rel_fro(act, ref, expert_ids))
    return metrics


def _finite_metrics(act: torch.Tensor, ref: torch.Tensor, atol: float, rtol: float
                    ) -> dict[str, float]:
    diff = act - ref
    ref_norm, act_norm, diff_norm = (float(t.norm()) for t in (ref, act, diff))
    ref_max = float(ref.abs().max())
    max_abs = float(diff.abs().max())
    return {
        "nonfinite": 0,
        "max_abs": max_abs,
        "max_abs_scaled": _ratio(max_abs, ref_max),
        "rel_fro": _ratio(diff_norm, ref_norm),
        "cosine": _cosine(act.flatten(), ref.flatten()),
        "min_row_cosine": _min_row_cosine(act, ref),
        "norm_ratio": _ratio(act_norm, ref_norm, both_zero=1.0),
        "mismatch_frac": float((diff.abs() > atol + rtol * ref.abs()).double().mean()),
    }


def _ratio(num: float, den: float, both_zero: float = 0.0) -> float:
    if den > 0:
        return num / den
    return both_zero if num == 0 else math.inf


def _cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    na, nb = float(a.norm()), float(b.norm())
    if na == 0 and nb == 0:
        return 1.0
    if na == 0 or nb == 0:
        return 0.0
    return float(a @ b) / (na * nb)


def _min_row_cosine(act: torch.Tensor, ref: torch.Tensor) -> float:
    rows_a, rows_r = act.reshape(-1, act.shape[-1]), ref.reshape(-1, ref.shape[-1])
    norm_r, norm_a = rows_r.norm(dim=1), rows_a.norm(dim=1)
    live = norm_r > _ROW_NORM_FLOOR * float(norm_r.max())
    if not live.any():
        return 1.0 if float(norm_a.max()) == 0 else 0.0
    dots = (rows_a[live] * rows_r[live]).sum(1)
    cos = dots / (norm_a[live] * norm_r[live]).clamp(min=torch.finfo(torch.float64).tiny)
    return float(cos.min())


def _max_expert_rel_fro(act: torch.Tensor, ref: torch.Tensor, expert_ids: torch.Tensor
                        ) -> float:
    if expert_ids.numel() == 0 or act.numel() == 0:
        return 0.0
    rows_a, rows_r = act.reshape(-1, act.shape[-1]), ref.reshape(-1, ref.shape[-1])
    ids = expert_ids.to(device=ref.device, dtype=torch.int64).reshape(rows_r.shape[0], -1)
    # squared row norms, summed per expert: one scatter instead of a loop over experts
    diff_sq = (rows_a - rows_r).square().sum(1)
    ref_sq = rows_r.square().sum(1)
    live = ids >= 0
    n = int(ids.max()) + 1 if live.any() else 0
    groups = ids[live]
    diff_e = torch.zeros(n, dtype=torch.float64, device=ref.device).index_add_(
        0, groups, diff_sq.unsqueeze(1).expand_as(ids)[live])
    ref_e = torch.zeros_like(diff_e).index_add_(0, groups,
                                                 ref_sq.unsqueeze(1).expand_as(ids)[live])
    used = torch.zeros(n, dtype=torch.bool, device=ref.device)
    used[groups] = True
    worst = 0.0
    for d, r in zip(diff_e[used].sqrt().tolist(), ref_e[used].sqrt().tolist(), strict=True):
        worst = max(worst, _ratio(d, r))
    return worst


# The error profile of a failing accuracy row: at most this many values along each axis
# (more tokens or columns than this are pooled into equal consecutive buckets).
PROFILE_POINTS = 64


def error_profile(actual: torch.Tensor, reference: torch.Tensor,
                  expert_ids: torch.Tensor | None = None) -> dict[str, list[float]]:
    """Where the error of `actual` sits, for a report's small picture (a bug class shows in
    its place: one expert, a group of columns, the K tail, the last rows):

    expert   ||error|| / ||reference|| over the rows routed to each expert (with `expert_ids`;
             0 for an expert no row went to)
    token    each output row's ||error|| over the mean row norm of the reference
    column   each output column's (the hidden dimension's) ||error|| over the mean column norm

    Rows and columns beyond PROFILE_POINTS are pooled (root mean square) into buckets."""
    ref = reference.to(torch.float64)
    act = actual.to(device=ref.device, dtype=torch.float64)
    rows_a, rows_r = act.reshape(-1, act.shape[-1]), ref.reshape(-1, ref.shape[-1])
    diff = torch.nan_to_num(rows_a - rows_r, nan=0.0, posinf=0.0, neginf=0.0)
    out: dict[str, list[float]] = {}
    if expert_ids is not None and expert_ids.numel() and diff.numel():
        ids = expert_ids.to(device=ref.device, dtype=torch.int64).reshape(diff.shape[0], -1)
        live = ids >= 0
        n = int(ids.max()) + 1 if live.any() else 0
        diff_e = torch.zeros(n, dtype=torch.float64, device=ref.device).index_add_(
            0, ids[live], diff.square().sum(1).unsqueeze(1).expand_as(ids)[live])
        ref_e = torch.zeros_like(diff_e).index_add_(
            0, ids[live], rows_r.square().sum(1).unsqueeze(1).expand_as(ids)[live])
        out["expert"] = [_short(_ratio(float(d), float(r))) for d, r in
                         zip(diff_e.sqrt().tolist(), ref_e.sqrt().tolist(), strict=True)]
    for axis, name in ((1, "token"), (0, "column")):
        if not diff.numel():
            break
        err = diff.square().sum(axis)
        scale = float(rows_r.square().sum(axis).sqrt().mean())
        out[name] = [_short(_ratio(v, scale)) for v in _pooled(err).sqrt().tolist()]
    return out


def _pooled(squares: torch.Tensor) -> torch.Tensor:
    """Mean squares in at most PROFILE_POINTS consecutive buckets."""
    n = squares.numel()
    if n <= PROFILE_POINTS:
        return squares
    edges = torch.linspace(0, n, PROFILE_POINTS + 1).round().long().tolist()
    return torch.stack([squares[a:b].mean() for a, b in itertools.pairwise(edges)])


def _short(v: float) -> float:
    """3 significant digits: a picture's value, kept small in the results file."""
    return float(f"{v:.3g}")
