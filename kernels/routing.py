"""The standard format's routing, shared by the torch backend (`native.py`) and the grouped
backend (`grouped.py`, whose forward a CUDA graph captures): fixed shapes, no host
synchronization."""

from __future__ import annotations

import torch


def routing(problem, x: torch.Tensor, topk_weights: torch.Tensor, topk_ids: torch.Tensor,
            expert_map: torch.Tensor | None) -> tuple[torch.Tensor, ...]:
    """(x, token, local expert, router weight) of the standard format's M x topk assignments,
    token-major: x times the router weight where it applies on the input (the weights then
    1); local expert -1 for an expert of another rank (`expert_map`: int64 [global E] on x's
    device, or None). Shapes from the input's only, no host synchronization."""
    P = problem
    M = x.shape[0]
    weights = topk_weights
    if P.apply_router_weight_on_input:  # topk == 1: scale the input, not the output
        x = (x.to(torch.float32) * topk_weights).to(x.dtype)
        weights = torch.ones_like(topk_weights)
    ids = topk_ids.to(torch.int64)
    if expert_map is not None:
        ids = expert_map[ids]
    token = torch.arange(M, device=x.device).repeat_interleave(P.topk)
    return x, token, ids.flatten(), weights.flatten()



__all__ = ["routing"]
