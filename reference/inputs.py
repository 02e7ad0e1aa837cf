"""Random layer inputs for a problem: hidden states and a routing with distinct experts."""

from __future__ import annotations

import torch

from .problem import MoEProblem
from .routing import softmax_topk


def make_inputs(problem: MoEProblem, seed: int = 0, scale: float = 1.0
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """x [M, K] in the activation dtype, topk_weights float32 [M, topk], topk_ids int32
    [M, topk] (global ids, distinct per token, softmax top-k with renormalization)."""
    gen = torch.Generator().manual_seed(seed)
    P = problem
    x = (scale * torch.randn(P.M, P.K, generator=gen)).to(P.torch_dtype)
    logits = torch.randn(P.M, P.global_num_experts, generator=gen, dtype=torch.float64)
    weights, ids = softmax_topk(logits, P.topk, renormalize=True)
    return x, weights.to(torch.float32), ids.to(torch.int32)


def make_batched_inputs(problem: MoEProblem, seed: int = 0, max_tokens: int | None = None
                        ) -> tuple[torch.Tensor, torch.Tensor]:
    """x [E, T, K] and expert_num_tokens [E] int32 with counts in [0, T] (some empty)."""
    gen = torch.Generator().manual_seed(seed)
    P = problem
    T = max_tokens or max(P.M, 1)
    counts = torch.randint(0, T + 1, (P.E,), generator=gen, dtype=torch.int32)
    x = torch.randn(P.E, T, P.K, generator=gen).to(P.torch_dtype)
    return x, counts
