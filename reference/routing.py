"""Router helpers: top-k selection with a deterministic tie rule (lower expert index first).

All scores are computed in float64; weights are returned as float64, ids as int64.
"""

from __future__ import annotations

import torch


def topk_deterministic(scores: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The k largest scores per row; equal scores are taken in increasing expert index."""
    values, ids = torch.sort(scores, dim=-1, descending=True, stable=True)
    return values[..., :k], ids[..., :k]


def _renormalize(w: torch.Tensor) -> torch.Tensor:
    return w / w.sum(-1, keepdim=True)


def softmax_topk(logits: torch.Tensor, topk: int, renormalize: bool = True
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax over experts, top-k, optionally renormalized to sum to 1 (Mixtral, Qwen)."""
    probs = torch.softmax(logits.to(torch.float64), dim=-1)
    w, ids = topk_deterministic(probs, topk)
    return (_renormalize(w) if renormalize else w), ids


def sigmoid_topk(logits: torch.Tensor, topk: int, correction_bias: torch.Tensor | None = None,
                 renormalize: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """sigmoid scores; selection on scores + correction_bias, weights from the scores alone."""
    scores = torch.sigmoid(logits.to(torch.float64))
    choice = scores if correction_bias is None else scores + correction_bias.to(torch.float64)
    _, ids = topk_deterministic(choice, topk)
    w = torch.gather(scores, -1, ids)
    return (_renormalize(w) if renormalize else w), ids


def grouped_topk(logits: torch.Tensor, topk: int, num_expert_group: int, topk_group: int,
                 scoring: str = "softmax", correction_bias: torch.Tensor | None = None,
                 renormalize: bool = True, routed_scaling_factor: float = 1.0
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """DeepSeek-style grouped top-k.

    Experts split into `num_expert_group` equal groups; a group's score is its best expert
    score, or with a correction bias the sum of its two best (score + bias); the best
    `topk_group` groups stay, top-k is taken among their experts (on score + bias when
    biased), weights come from the unbiased scores, then renormalize and scale.
    """
    x = logits.to(torch.float64)
    scores = torch.softmax(x, -1) if scoring == "softmax" else torch.sigmoid(x)
    choice = scores if correction_bias is None else scores + correction_bias.to(torch.float64)
    M, E = scores.shape
    if E % num_expert_group:
        raise ValueError(f"{E} experts do not split into {num_expert_group} groups")
    grouped = choice.view(M, num_expert_group, -1)
    if correction_bias is None:
        group_scores = grouped.amax(-1)
    else:
        group_scores = topk_deterministic(grouped, 2)[0].sum(-1)
    _, groups = topk_deterministic(group_scores, topk_group)
    keep = torch.zeros(M, num_expert_group, dtype=torch.bool, device=x.device)
    keep.scatter_(1, groups, True)
    keep = keep.unsqueeze(-1).expand_as(grouped).reshape(M, E)
    _, ids = topk_deterministic(choice.masked_fill(~keep, -torch.inf), topk)
    w = torch.gather(scores, -1, ids)
    return (_renormalize(w) if renormalize else w) * routed_scaling_factor, ids
