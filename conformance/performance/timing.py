"""Timing on a device, one structure for CUDA and the CPU (`moecert bench`).

`Clock.median_s(calls, reps, warmup, budget_s)`: `warmup` untimed calls, then `reps` timed
ones (fewer once `budget_s` of wall time is spent, never fewer than MIN_REPS), the median.
The calls cycle through a list of callables, one per input set, so that consecutive calls read
different memory (the sets together exceed the cache: nothing is timed warm). On
CUDA each call is bracketed by CUDA events, which also count the gaps a host too slow to feed
the GPU leaves; on the CPU by `time.perf_counter` (torch's CPU ops return when done). The
CUDA-only lines are `Clock.stamp`, `Clock.seconds`, `Clock.sync`, `cache_bytes` and
`graph_replays`; everything else runs the same on both and is tested on the CPU.

The device's own rates, measured in the same run with the same clock:
    copy_bandwidth   a device-to-device copy, bytes read plus written per second
    matmul_rate      a square bf16 GEMM large enough to saturate the device, flop/s
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence

import torch

# (copy bytes, GEMM size) per device type: the copy many times the L2 of any GPU, the GEMM
# at the size vendors quote peak bf16 rates for; on the CPU small enough for a test.
RATE_SIZES = {"cuda": (1 << 30, 8192), "cpu": (64 << 20, 512)}
# The CPU has no one cache size torch can read: a large last-level cache.
CPU_CACHE_BYTES = 32 << 20
# Timed calls a median is taken over at the least, whatever the time budget.
MIN_REPS = 5


class Clock:
    def __init__(self, device: str | torch.device):
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"

    def stamp(self):
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def seconds(self, start, end) -> float:
        return start.elapsed_time(end) / 1e3 if self.cuda else end - start

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def median_s(self, calls: Sequence[Callable], reps: int, warmup: int,
                 budget_s: float | None = None) -> tuple[float, int]:
        """(the median seconds of one call, the calls timed): `reps` calls cycling through
        `calls`, or as many as `budget_s` seconds of wall time allow (at least MIN_REPS)."""
        if not calls or reps < 1:
            raise ValueError("median_s needs at least one callable and one repetition")
        for i in range(warmup):
            calls[i % len(calls)]()
        self.sync()
        stamps = []
        began = time.perf_counter()
        for i in range(reps):
            start = self.stamp()
            calls[i % len(calls)]()
            stamps.append((start, self.stamp()))
            if (budget_s is not None and i + 1 >= MIN_REPS
                    and time.perf_counter() - began > budget_s):
                break
        self.sync()
        return statistics.median(self.seconds(a, b) for a, b in stamps), len(stamps)


def cache_bytes(device: torch.device) -> int:
    """The cache the rotated inputs must overflow: the GPU's L2, or CPU_CACHE_BYTES."""
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).L2_cache_size)
    return CPU_CACHE_BYTES


def copy_bandwidth(clock: Clock, reps: int, warmup: int, nbytes: int | None = None) -> float:
    """Bytes read plus written per second by a device-to-device copy."""
    nbytes = nbytes or RATE_SIZES[clock.device.type][0]
    src = torch.empty(nbytes, dtype=torch.uint8, device=clock.device).fill_(7)
    dst = torch.empty_like(src)
    seconds, _ = clock.median_s([lambda: dst.copy_(src)], reps, warmup)
    return 2 * nbytes / seconds


def matmul_rate(clock: Clock, reps: int, warmup: int, n: int | None = None) -> float:
    """flop/s of a square bf16 GEMM of size `n`."""
    n = n or RATE_SIZES[clock.device.type][1]
    gen = torch.Generator(device=clock.device).manual_seed(0)
    a, b = (torch.randn(n, n, generator=gen, device=clock.device, dtype=torch.bfloat16)
            for _ in range(2))
    out = torch.empty_like(a)
    seconds, _ = clock.median_s([lambda: torch.matmul(a, b, out=out)], reps, warmup)
    return 2 * n**3 / seconds


def graph_replays(steps: Sequence[Callable], device: torch.device) -> list[Callable]:
    """Each step captured into its own CUDA graph (one memory pool: they replay one after
    another in capture order), as their replay functions. Raises whatever capture raises."""
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):  # capture wants its kernels warm on a side stream
        for step in steps:
            step()
    torch.cuda.current_stream(device).wait_stream(stream)
    pool = torch.cuda.graph_pool_handle()
    graphs = []
    for step in steps:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool):
            step()
        graphs.append(graph)
    return [graph.replay for graph in graphs]
