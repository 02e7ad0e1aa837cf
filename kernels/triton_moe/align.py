"""Assignments grouped by expert and padded to the GEMM's row block, on the device with no
host synchronization (sizes are upper bounds; blocks past the real end exit at once in the
GEMM):

    sorted_ids    int32 [max_rows]  assignment ids, expert by expert in assignment order,
                  each expert's segment padded to a multiple of block_m with the sentinel n
                  (entries past num_padded are never read and left unwritten)
    block_expert  int32 [max_rows / block_m]  expert of each block in use (entries past
                  num_padded / block_m are never read and left unwritten)
    num_padded    int32 [1]  rows in use (the sum of the padded segments)

The assignment i -> local expert map comes from one of three sources (MODE):
    IDS      topk_ids (flat), already local
    MAPPED   expert_map[topk_ids]: -1 drops the assignment (expert on another rank)
    BATCHED  i = e * T + t is kept by expert e when t < expert_num_tokens[e]

Two launches of one program per CHUNK assignments (one launch for n <= CHUNK): (1) each
chunk's count per expert, from a one-hot [CHUNK, experts] matrix in registers, into a
[chunks, experts] table; (2) each program adds the table up (every expert's total and the
earlier chunks' counts), and places each kept assignment of its chunk at its expert's
segment start plus the earlier chunks' counts plus its rank among the earlier assignments
of its chunk with the same expert; program 0 also writes num_padded, the padding and
block_expert. The order is stable and the result deterministic (no atomics). (One program
walking the chunks twice took 32 us at 512 assignments of 128 experts on an H100, three
launches 12 us: docs/speed.md, "Change 5".)
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

IDS, MAPPED, BATCHED = range(3)
CHUNK = 64  # assignments per program
SCAN = 64  # chunks of the table read at a time


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
def _one_hot(key, E_POW2: tl.constexpr):
    return (key[:, None] == tl.arange(0, E_POW2)[None, :]).to(tl.int32)


@triton.jit
def _ranks(key, CHUNK: tl.constexpr):
    """Each assignment's count of earlier ones in its chunk with the same expert."""
    lanes = tl.arange(0, CHUNK)
    earlier = (key[:, None] == key[None, :]) & (lanes[None, :] < lanes[:, None])
    return tl.sum(earlier.to(tl.int32), axis=1)


@triton.jit
def _write_segments(counts, sorted_ids_ptr, block_expert_ptr, num_padded_ptr, n,
                    E_POW2: tl.constexpr, BLOCK_M: tl.constexpr):
    """Each expert's padded segment from its count: num_padded, the padding, block_expert."""
    experts = tl.arange(0, E_POW2)
    padded = (counts + BLOCK_M - 1) // BLOCK_M * BLOCK_M
    starts = tl.cumsum(padded, axis=0) - padded
    tl.store(num_padded_ptr, tl.sum(padded, axis=0))
    # the padding of each segment gets the sentinel n (disjoint from the placed rows)
    pad = tl.arange(0, BLOCK_M)
    pad_rows = starts[:, None] + counts[:, None] + pad[None, :]
    tl.store(sorted_ids_ptr + pad_rows, tl.full((E_POW2, BLOCK_M), 0, tl.int32) + n,
             mask=counts[:, None] + pad[None, :] < padded[:, None])
    # each expert's blocks name it: its j-th block in round j (as many rounds as the
    # largest segment has blocks; comparing every block with every segment end cost more)
    first_block = starts // BLOCK_M
    blocks = padded // BLOCK_M
    for j in range(0, tl.max(blocks, axis=0)):
        tl.store(block_expert_ptr + first_block + j, experts, mask=j < blocks)


@triton.jit
def count_kernel(ids_ptr, map_ptr, table_ptr, n, T, E_POW2: tl.constexpr,
                 MODE: tl.constexpr, CHUNK: tl.constexpr):
    """table[c, e]: assignments of chunk c kept by expert e."""
    c = tl.program_id(0)
    key = _local_experts(ids_ptr, map_ptr, c * CHUNK + tl.arange(0, CHUNK), n, T, MODE)
    tl.store(table_ptr + c * E_POW2 + tl.arange(0, E_POW2),
             tl.sum(_one_hot(key, E_POW2), axis=0))


@triton.jit
def place_kernel(ids_ptr, map_ptr, table_ptr, sorted_ids_ptr, block_expert_ptr,
                 num_padded_ptr, n, T, chunks, E_POW2: tl.constexpr, MODE: tl.constexpr,
                 BLOCK_M: tl.constexpr, CHUNK: tl.constexpr, SCAN: tl.constexpr,
                 ONE_CHUNK: tl.constexpr):
    """Kept assignments of chunk c to their rows, in assignment order within each expert:
    the expert's segment start, plus the earlier chunks' counts for it (read from the
    table, SCAN chunks at a time: every program adds up the whole table, which is small
    beside a launch), plus the assignment's rank in its chunk. Program 0 also writes the
    segments. ONE_CHUNK (n <= CHUNK): the counts are this program's own, no table."""
    c = tl.program_id(0)
    offs = c * CHUNK + tl.arange(0, CHUNK)
    key = _local_experts(ids_ptr, map_ptr, offs, n, T, MODE)
    onehot = _one_hot(key, E_POW2)
    if ONE_CHUNK:
        counts = tl.sum(onehot, axis=0)
        before = tl.zeros((E_POW2,), dtype=tl.int32)
    else:
        experts = tl.arange(0, E_POW2)
        steps = tl.arange(0, SCAN)
        counts = tl.zeros((E_POW2,), dtype=tl.int32)
        before = tl.zeros((E_POW2,), dtype=tl.int32)
        for c0 in range(0, chunks, SCAN):
            rows = c0 + steps
            tile = tl.load(table_ptr + rows[:, None] * E_POW2 + experts[None, :],
                           mask=(rows < chunks)[:, None], other=0)
            counts += tl.sum(tile, axis=0)
            before += tl.sum(tl.where((rows < c)[:, None], tile, 0), axis=0)
    if c == 0:
        _write_segments(counts, sorted_ids_ptr, block_expert_ptr, num_padded_ptr, n, E_POW2,
                        BLOCK_M)
    padded = (counts + BLOCK_M - 1) // BLOCK_M * BLOCK_M
    first = tl.cumsum(padded, axis=0) - padded + before
    row = tl.sum(onehot * first[None, :], axis=1) + _ranks(key, CHUNK)
    tl.store(sorted_ids_ptr + row, offs, mask=key >= 0)


def align_assignments(source: torch.Tensor, num_experts: int, block_m: int, *, n: int,
                      mode: int = IDS, expert_map: torch.Tensor | None = None,
                      tokens_per_expert: int = 1):
    """(sorted_ids, block_expert, num_padded) for n assignments. `source`: flat topk ids
    (IDS, MAPPED with `expert_map` int32 [global E]) or expert_num_tokens [E] (BATCHED with
    `tokens_per_expert` = T, n = E * T)."""
    device = source.device
    max_rows = max_padded_rows(n, num_experts, block_m)
    num_blocks = max_rows // block_m
    e_pow2 = triton.next_power_of_2(num_experts)
    chunks = max(1, triton.cdiv(n, CHUNK))
    # one allocation for the three outputs and the chunk table
    buf = torch.empty(max_rows + num_blocks + 1 + chunks * e_pow2, dtype=torch.int32,
                      device=device)
    sorted_ids = buf[:max_rows]
    block_expert = buf[max_rows:max_rows + num_blocks]
    num_padded = buf[max_rows + num_blocks:max_rows + num_blocks + 1]
    table = buf[max_rows + num_blocks + 1:]
    if mode == BATCHED:
        keys = source
    else:
        keys = expert_map if mode == MAPPED else source
    warps = 8 if num_experts > 64 else 4
    if chunks > 1:
        count_kernel[(chunks,)](source, keys, table, n, tokens_per_expert, E_POW2=e_pow2,
                                MODE=mode, CHUNK=CHUNK, num_warps=warps)
    place_kernel[(chunks,)](source, keys, table, sorted_ids, block_expert, num_padded, n,
                            tokens_per_expert, chunks, E_POW2=e_pow2, MODE=mode,
                            BLOCK_M=block_m, CHUNK=CHUNK, SCAN=SCAN, ONE_CHUNK=chunks == 1,
                            num_warps=warps)
    return sorted_ids, block_expert, num_padded
