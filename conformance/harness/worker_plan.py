"""`-n auto`: how many worker processes a run on this host gets (conformance/harness/
runner.py runs them, schedule.py hands them problems): bounded by the cores and by each GPU's
memory, where every worker holds its CUDA context and cache and the largest model-size case
must still fit beside them."""

from __future__ import annotations

import os
from dataclasses import dataclass

from .memory import gb
from .schedule import (
    USABLE_FRACTION,
    WORKER_RESERVE_BYTES,
    device_need,
    gpu_memory,
    model_size,
)

# `-n auto` on a GPU host: at most three workers per four cores (plan_workers) ...
WORKERS_PER_CORE = 0.75
# ... and one per core where they share each GPU through MPS (--mps): with the GPU no longer
# handed to one worker at a time, the cores bound the run. On one H200 with 16 cores (2026-12-01,
# cold caches, docs/speed.md "MPS") the `ci` suite's run took 50 s with 12 workers and 43 s
# with 16.
WORKERS_PER_CORE_MPS = 1.0
# ... and at most this many per GPU under MPS: the client contexts one MPS server takes per
# device (48 in NVIDIA's MPS documentation for Volta and later). A worker refused for it fails
# its case with a CUDA error, which the runner runs again outside MPS (mps.gpu_fault): slower,
# never wrong.
MPS_CLIENTS_PER_GPU = 48
# ... and per GPU whose memory nvidia-smi cannot read: the count that ran certify green on an
# 80 GB H100 (docs/speed.md).
UNKNOWN_MEMORY_WORKERS_PER_GPU = 12


@dataclass(frozen=True)
class WorkerPlan:
    """`-n auto`: how many workers, and why (one line for the run's first message)."""
    workers: int
    why: str


def plan_workers(device: str, cases=(), visible: list[str] | None = None,
                 cores: int | None = None, memory=gpu_memory, mps: bool = False) -> WorkerPlan:
    """`-n auto`. On a CPU one worker per core. On a GPU host the smallest of:

    - the cores: WORKERS_PER_CORE of them (each worker also draws checkpoints and exact-tier
      structures on the host), WORKERS_PER_CORE_MPS under --mps, over all visible GPUs;
    - each GPU's memory: every worker holds its CUDA context and its allocator's cache
      (WORKER_RESERVE_BYTES) all run long, and the largest model-size case of the run that
      fits the GPU must still fit beside the others' reserves, so a GPU of F free bytes holds
      1 + (F x USABLE_FRACTION - largest case) / reserve workers (F / reserve with no
      model-size case), at most MPS_CLIENTS_PER_GPU under --mps; with its memory unknown,
      UNKNOWN_MEMORY_WORKERS_PER_GPU.

    Workers are pinned to the visible GPUs in turn (runner.Worker), so each GPU gets the
    total / count, rounded: the total is at most count x the smallest GPU's share."""
    cores = cores or os.cpu_count() or 1
    if not device.startswith("cuda"):
        return WorkerPlan(cores, f"{cores} cores")
    visible = visible or ["0"]
    by_cores = max(1, int(cores * (WORKERS_PER_CORE_MPS if mps else WORKERS_PER_CORE)))
    needs = [device_need(c) for c in cases if model_size(c)]
    shares, free_words = [], []
    for name in visible:
        total, free = memory(name)
        room = free if free is not None else total
        if room is None:
            shares.append(UNKNOWN_MEMORY_WORKERS_PER_GPU)
            free_words.append("memory unknown")
            continue
        usable = int(room * USABLE_FRACTION)
        largest = max((n for n in needs if n <= usable), default=0)
        share = (1 + (usable - largest) // WORKER_RESERVE_BYTES if largest
                 else usable // WORKER_RESERVE_BYTES)
        shares.append(max(1, min(share, MPS_CLIENTS_PER_GPU) if mps else share))
        free_words.append(f"{gb(room)} free" + (f", largest case {gb(largest)}"
                                                 if largest else ""))
    by_memory = len(visible) * min(shares)
    workers = max(1, min(by_cores, by_memory))
    limit = "the cores" if by_cores <= by_memory else "GPU memory"
    why = (f"{len(visible)} GPU(s) ({'; '.join(dict.fromkeys(free_words))}), {cores} cores: "
           f"{min(shares)} per GPU fit its memory, {by_cores} the cores; set by {limit}")
    return WorkerPlan(workers, why)


__all__ = ["MPS_CLIENTS_PER_GPU", "UNKNOWN_MEMORY_WORKERS_PER_GPU", "WORKERS_PER_CORE",
           "WORKERS_PER_CORE_MPS", "WorkerPlan", "plan_workers"]
