"""Assignments grouped by expert and padded to the GEMM's row block, with torch ops and no
host synchronization (sizes are upper bounds; blocks past the real end exit at once).

    local_expert  int64 [n]  local expert of assignment i, -1 when it is dropped
    sorted_ids    int32 [max_rows]  assignment ids, expert by expert, each expert's segment
                  padded to a multiple of block_m with the sentinel n
    block_expert  int32 [max_rows / block_m]  expert of each block
    num_padded    int32 [1]  rows in use (the sum of the padded segments)
"""

from __future__ import annotations

import torch


def max_padded_rows(n: int, num_experts: int, block_m: int) -> int:
    """Each expert holding assignments pads at most block_m - 1 rows."""
    rows = n + min(num_experts, n) * (block_m - 1)
    return -(-rows // block_m) * block_m


def align_assignments(local_expert: torch.Tensor, num_experts: int, block_m: int):
    n = local_expert.numel()
    device = local_expert.device
    max_rows = max_padded_rows(n, num_experts, block_m)
    key = torch.where(local_expert >= 0, local_expert, num_experts)
    # scatter_add, not bincount: bincount on CUDA reads the max back to the host
    counts = torch.zeros(num_experts + 1, dtype=torch.int64, device=device)
    counts = counts.scatter_add_(0, key, torch.ones_like(key))[:num_experts]
    padded = (counts + block_m - 1) // block_m * block_m
    starts = torch.cumsum(counts, 0) - counts
    padded_starts = torch.cumsum(padded, 0) - padded
    order = torch.argsort(key, stable=True)
    expert_sorted = key[order]
    kept = expert_sorted < num_experts
    e = expert_sorted.clamp(max=num_experts - 1)
    rank = torch.arange(n, device=device) - starts[e]
    # dropped assignments all land in one trash slot past the end
    dest = torch.where(kept, padded_starts[e] + rank, max_rows)
    sorted_ids = torch.full((max_rows + 1,), n, dtype=torch.int32, device=device)
    sorted_ids.scatter_(0, dest, order.to(torch.int32))
    block_ends = torch.cumsum(padded // block_m, 0)
    blocks = torch.arange(max_rows // block_m, device=device)
    block_expert = torch.searchsorted(block_ends, blocks, right=True).clamp(max=num_experts - 1)
    num_padded = padded.sum().reshape(1).to(torch.int32)
    return sorted_ids[:max_rows], block_expert.to(torch.int32), num_padded
