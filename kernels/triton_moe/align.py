"""Assignments grouped by expert and padded to the GEMM's row block: one Triton program, one
launch, no host synchronization (sizes are upper bounds; blocks past the real end exit at
once in the GEMM).

    sorted_ids    int32 [max_rows]  assignment ids, expert by expert in assignment order,
                  each expert's segment padded to a multiple of block_m with the sentinel n
                  (entries past num_padded are never read and left unwritten)
    block_expert  int32 [max_rows / block_m]  expert of each block (clamped for unused ones)
    num_padded    int32 [1]  rows in use (the sum of the padded segments)

The assignment i -> local expert map comes from one of three sources (MODE):
    IDS      topk_ids (flat), already local
    MAPPED   expert_map[topk_ids]: -1 drops the assignment (expert on another rank)
    BATCHED  i = e * T + t is kept by expert e when t < expert_num_tokens[e]
The program works in registers on one-hot [CHUNK, experts] matrices: counts, padded starts,
and each kept assignment's rank within its expert (earlier chunks' counts plus the earlier
kept assignments of its own chunk), so the order is stable and the result deterministic.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

IDS, MAPPED, BATCHED = range(3)
CHUNK = 64


def max_padded_rows(n: int, num_experts: int, block_m: int) -> int:
    """Each expert holding assignments pads at most block_m - 1 rows."""
    rows = n + min(num_experts, n) * (block_m - 1)
    return -(-rows // block_m) * block_m


@triton.jit
def _local_experts(ids_ptr, map_ptr, offs, n, T, MODE: tl.constexpr):
    """Local expert of assignments `offs`, -1 for dropped ones and offs >= n."""
    valid = offs < n
    if MODE == 0:
        key = tl.load(ids_ptr + offs, mask=valid, other=-1).to(tl.int32)
    elif MODE == 1:
        gid = tl.load(ids_ptr + offs, mask=valid, other=0)
        key = tl.load(map_ptr + gid, mask=valid, other=-1).to(tl.int32)
    else:
        expert = offs // T
        count = tl.load(map_ptr + expert, mask=valid, other=0)
        key = tl.where(valid & (offs % T < count), expert, -1).to(tl.int32)
    return key


@triton.jit
def align_kernel(ids_ptr, map_ptr, sorted_ids_ptr, block_expert_ptr, num_padded_ptr,
                 n, T, num_blocks, E: tl.constexpr, E_POW2: tl.constexpr,
                 MODE: tl.constexpr, BLOCK_M: tl.constexpr, CHUNK: tl.constexpr):
    experts = tl.arange(0, E_POW2)
    lanes = tl.arange(0, CHUNK)
    # counts per expert
    counts = tl.zeros((E_POW2,), dtype=tl.int32)
    for c0 in range(0, n, CHUNK):
        key = _local_experts(ids_ptr, map_ptr, c0 + lanes, n, T, MODE)
        counts += tl.sum((key[:, None] == experts[None, :]).to(tl.int32), axis=0)
    padded = (counts + BLOCK_M - 1) // BLOCK_M * BLOCK_M
    ends = tl.cumsum(padded, axis=0)
    starts = ends - padded
    tl.store(num_padded_ptr, tl.sum(padded, axis=0))
    # the padding of each segment gets the sentinel n (disjoint from the rows written below)
    pad = tl.arange(0, BLOCK_M)
    pad_rows = starts[:, None] + counts[:, None] + pad[None, :]
    tl.store(sorted_ids_ptr + pad_rows, tl.full((E_POW2, BLOCK_M), 0, tl.int32) + n,
             mask=counts[:, None] + pad[None, :] < padded[:, None])
    # expert of block b: the number of segments ending at or before it
    block_ends = ends // BLOCK_M
    for b0 in range(0, num_blocks, CHUNK):
        b = b0 + lanes
        owner = tl.sum((block_ends[None, :] <= b[:, None]).to(tl.int32), axis=1)
        tl.store(block_expert_ptr + b, tl.minimum(owner, E - 1), mask=b < num_blocks)
    # kept assignments to their rows, in assignment order within each expert
    seen = tl.zeros((E_POW2,), dtype=tl.int32)
    for c0 in range(0, n, CHUNK):
        offs = c0 + lanes
        key = _local_experts(ids_ptr, map_ptr, offs, n, T, MODE)
        onehot = (key[:, None] == experts[None, :]).to(tl.int32)
        base = tl.sum(onehot * (starts + seen)[None, :], axis=1)
        earlier = (key[:, None] == key[None, :]) & (lanes[None, :] < lanes[:, None])
        rank = tl.sum(earlier.to(tl.int32), axis=1)
        tl.store(sorted_ids_ptr + base + rank, offs, mask=key >= 0)
        seen += tl.sum(onehot, axis=0)


def align_assignments(source: torch.Tensor, num_experts: int, block_m: int, *, n: int,
                      mode: int = IDS, expert_map: torch.Tensor | None = None,
                      tokens_per_expert: int = 1):
    """(sorted_ids, block_expert, num_padded) for n assignments. `source`: flat topk ids
    (IDS, MAPPED with `expert_map` int32 [global E]) or expert_num_tokens [E] (BATCHED with
    `tokens_per_expert` = T, n = E * T)."""
    device = source.device
    max_rows = max_padded_rows(n, num_experts, block_m)
    num_blocks = max_rows // block_m
    # one allocation for the three outputs
    buf = torch.empty(max_rows + num_blocks + 1, dtype=torch.int32, device=device)
    sorted_ids = buf[:max_rows]
    block_expert = buf[max_rows:max_rows + num_blocks]
    num_padded = buf[max_rows + num_blocks:]
    if mode == BATCHED:
        table = source
    else:
        table = expert_map if mode == MAPPED else source
    align_kernel[(1,)](source, table, sorted_ids, block_expert, num_padded, n,
                       tokens_per_expert, num_blocks, E=num_experts,
                       E_POW2=triton.next_power_of_2(num_experts), MODE=mode,
                       BLOCK_M=block_m, CHUNK=CHUNK,
                       num_warps=8 if num_experts > 64 else 4)
    return sorted_ids, block_expert, num_padded
