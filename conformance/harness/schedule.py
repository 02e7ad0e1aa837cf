"""Which problem a free worker takes next (the runner's queue, conformance/harness/runner.py).

A problem's cases (one per backend) go to one worker, one after another: they share its
checkpoint, reference and exact structure (context.SharedSteps). Across problems:

- Model-size problems first, longest first, each as soon as its GPU has room for it: they are
  the longest, and started late they would be the run's tail. "Longest" is the problem's
  measured check time where the run was given an earlier run's costs (`costs`: {case id:
  seconds}, the table `--shard-costs` reads, shard_costs.read_costs), else its memory need
  (weights: the same order for the layers of one run). Room is a memory budget per GPU
  (`GpuBudget`), not exclusivity: small problems keep the other workers busy beside a model
  layer, and on an H200 two int4 DeepSeek-V3 layers run side by side. A worker whose GPU has no
  room for any waiting model-size problem takes a small one instead.
- Small problems by kernel specialization (`specialization`), with affinity: a worker goes on
  with a specialization it has run while that one has problems left, else starts the one nobody
  has started with the most work (`work`: measured seconds where costs were given, else the
  weight estimate), else helps with the one that has most work left; within a
  specialization the largest problem goes first. A Triton kernel specialization
  costs each process that calls it a compile (cold cache) or a load (warm) on its first call;
  with affinity each is paid by about one worker instead of all of them, and concurrent
  workers do not compile the same kernel at once. Measured before affinity (certify, two
  H200s, 24 workers): the triton backend's first-call check (`claims`) took 994 s of check
  time against torch's 85 s.

On several GPUs each worker is pinned to one (runner.Worker) and draws on that GPU's budget.
"""

from __future__ import annotations

import subprocess
import threading
from collections import deque

from .cases import Case
from .device_memory import case_device_need
from .execute import problem_groups
from .memory import host_need, host_total_bytes
from .shard_costs import case_cost

# Problems with more weights than this are model-size: scheduled first, against a GPU's budget
# (Qwen3-30B-A3B's layer is 6e8).
MODEL_SIZE_WEIGHTS = 1 << 28
# What a model-size case holds on its GPU at most: device_memory.case_device_need, per backend
# and weight format, an upper bound of every model-size case's reserved peak (the test holds
# it to each: tests/conformance/harness/data/model_size_peaks.csv, certify on two H200s,
# 2026-11-30 00:10, tree 1d30ecf). Largest peak per backend on DeepSeek-V3 there, and the
# model's: grouped 49.1 GiB (59.0), torch 33.4 (38.0), triton 33.4 (51.7), xpu 17.1 (22.1).
# Before 742023b, 356530c, 4055d80, 1a7c06b and a6e0cb9 cut what a case holds at once, the
# same run on 665c1e5 peaked at 52.4 / 38.4 / 38.4 / 18.3, and four grouped MXFP6
# Qwen3-30B-A3B cases at 7.4 GiB (3.8 since) above the model of then (6.3: it counted fp6
# codes at 6 bits, where the kernel format widens them to a byte, and not the widening's
# 4 GiB of temporaries). A problem is budgeted at its worst case (`problem_need`). The
# external engine vllm has a term of its own (device_memory.engine_term, held to vLLM's peaks:
# data/vllm_model_size_peaks.csv): its fp8-w8a16 DeepSeek-V3 case, 88.8 GiB, fits an H200.
# A worker running small cases holds its CUDA context and a small cache (measured: 1.4 GiB
# each beside a model layer); every worker but the model layer's own is reserved for that,
# and `-n auto` gives a GPU no more workers than its memory holds with every reserve counted.
WORKER_RESERVE_BYTES = 1536 << 20
USABLE_FRACTION = 0.97


def weights(case: Case) -> int:
    P = case.problem
    return P.E * P.K * P.N * 3


def model_size(case: Case) -> bool:
    return weights(case) > MODEL_SIZE_WEIGHTS


def device_need(case: Case) -> int:
    """Bytes of GPU memory a model-size case is budgeted at (0 for a small one: the workers'
    reserve covers it)."""
    return case_device_need(case) if model_size(case) else 0


def problem_need(group: list[Case], need=None) -> int:
    """A problem's budget: what its worst case needs (its cases run one after another on
    one worker, and each frees its layer before the next: worker.release_device_memory)."""
    need = need or device_need
    return max(need(c) for c in group)


def case_need(case: Case, device: str) -> int:
    """Bytes a model-size case is budgeted at on `device`'s memory: the GPU's
    (`device_need`), or on a CPU the host's (memory.host_need); 0 for a small case."""
    if not model_size(case):
        return 0
    return host_need(case) if device.split(":")[0] == "cpu" else device_need(case)


def oversize(cases: list[Case], device: str, gpus: list[GpuBudget]
             ) -> list[tuple[Case, int, int]]:
    """The cases that need more memory than the device has in all, even alone: (case, its
    need, the memory there is). They are not run (status "oversize")."""
    totals = [g.total for g in gpus if g.total is not None]
    if not totals:
        return []
    room = max(totals)
    needs = ((c, case_need(c, device)) for c in cases)
    return [(c, need, room) for c, need in needs if need > room * USABLE_FRACTION]


def specialization(case: Case) -> tuple:
    """What selects a kernel specialization: the scheme and its options, the activation dtype,
    function and bias (not the shape or seed)."""
    P = case.problem
    return (case.scheme, tuple(sorted(case.attrs.items())), P.dtype, P.activation, P.bias,
            P.activation_format)


def work(group: list[Case]) -> int:
    """A problem's work for ordering, not a time: its weight count times its cases (each
    backend's case builds and checks the layer; the shared checkpoint and reference grow with
    the weights too). On the H100's ci run the small problems in the upper fifth of weights
    took 0.87 s of check time each on average, the rest 0.33 s."""
    return weights(group[0]) * len(group)


def measured(costs: dict[str, float] | None):
    """A problem's measured check time under `costs` (summed over its cases; a case the table
    lacks costs the median of those it has), or None without costs: `work` orders then."""
    if not costs:
        return None
    cost = case_cost(costs)
    return lambda group: sum(map(cost, group))


class SpecializationQueue:
    """Small problems by kernel specialization, handed out with affinity to the worker that
    asks; the most work first: within a specialization the largest problem first, and a worker
    that starts or helps with one takes the one with the most work left, so that the run does
    not end on a long specialization that few workers hold (the FP4 ones on triton were such a
    tail: docs/speed.md)."""

    def __init__(self, groups: list[list[Case]], cost=None):
        """`cost(group)`: a problem's work (default `work`, the weight estimate)."""
        self.work = cost or work
        self.queues: dict[tuple, deque] = {}
        for group in sorted(groups, key=self.work, reverse=True):
            self.queues.setdefault(specialization(group[0]), deque()).append(group)
        self.left = {f: sum(map(self.work, q)) for f, q in self.queues.items()}
        self.started: set[tuple] = set()
        self.seen: dict[int, set[tuple]] = {}

    def __bool__(self) -> bool:
        return any(self.queues.values())

    def pop(self, worker: int) -> list[Case]:
        left = {f: q for f, q in self.queues.items() if q}
        mine = self.seen.setdefault(worker, set())
        most = sorted(left, key=lambda f: -self.left[f])  # stable: ties in suite order
        pick = (next((f for f in most if f in mine), None)
                or next((f for f in most if f not in self.started), None)
                or most[0])
        mine.add(pick)
        self.started.add(pick)
        group = self.queues[pick].popleft()
        self.left[pick] -= self.work(group)
        return group


class GpuBudget:
    """The bytes model-size cases may hold on one GPU at once, beside the small cases of the
    other workers: what was free when the run started (else its total), less a reserve for
    every other live worker's context and cache. Memory unknown: a model-size case runs alone.

    A worker retires (its process ends, its reserve comes back) once no small problem is
    left and more workers wait on this GPU than the model-size problems left could use at
    once (`WorkPool.take`): otherwise the reserves of idle workers keep the run's last
    model-size problems one at a time (certify on one GPU of a 64-core host, 48 workers:
    70 GiB of reserves, DeepSeek-V3 layers of 60 GiB one at a time for the last 180 s)."""

    def __init__(self, total_bytes: int | None, workers: int, free_bytes: int | None = None):
        self.total = total_bytes
        room = free_bytes if free_bytes is not None else total_bytes
        self.room = None if room is None else int(room * USABLE_FRACTION)
        self.live = workers  # workers not retired
        self.held = 0  # by the model-size cases running
        self.running = 0  # cases of any size
        self.alone = False  # a case runs, or waits to run, with nothing else on this GPU
        self.waiting: set[int] = set()  # workers with nothing to take on this GPU now

    @property
    def limit(self) -> int | None:
        if self.room is None:
            return None
        return self.room - max(0, self.live - 1) * WORKER_RESERVE_BYTES

    def fits(self, need: int) -> bool:
        """Whether a case of `need` bytes (0: small) may start now."""
        if self.alone:
            return False
        if self.running == 0:
            return True
        if self.limit is None:
            return need == 0 and self.held == 0
        return self.held + need <= self.limit

    def oversize(self, need: int) -> bool:
        """Too large to share the GPU with anything: it waits for the GPU to empty."""
        if self.limit is None:
            return need > 0
        return need > self.limit

    def surplus(self, needs: list[int]) -> bool:
        """Whether one of the waiting workers is more than the problems of `needs` (the
        model-size ones left, in the order they are taken) could use: with w waiters kept
        and the others retired, the memory then free starts fewer than w of them at once.
        One waiter always stays; so do the workers running cases, which come back."""
        if self.room is None:
            return False
        waiters = len(self.waiting)
        keep = waiters
        while keep > 1:
            free = self.room - (self.live - (waiters - keep) - 1) * WORKER_RESERVE_BYTES
            free -= self.held
            started = 0
            for need in needs:
                if need <= free:
                    free -= need
                    started += 1
            if started >= keep:
                break
            keep -= 1
        return waiters > keep


class WorkPool:
    """The run's problems; `take(gpu)` blocks until one fits that GPU or none is left."""

    def __init__(self, cases, gpus: list[GpuBudget], need=device_need,
                 costs: dict[str, float] | None = None):
        """`need(case)`: the bytes a case is budgeted at (default: a GPU's, device_need);
        `costs`: {case id: seconds} of an earlier run, which order the problems (module
        docstring), or None."""
        groups = problem_groups(cases)
        big = [g for g in groups if model_size(g[0])]
        cost = measured(costs)
        # each model-size problem's budget, computed once: `take` scans the waiting ones
        # under the pool's lock on every call, and each need reads its backend's claims on
        # every simulated platform (0.04 s a scan of certify's 122 on this project's CPU,
        # twice a take, and every waiting worker rescans on each release)
        known = {id(g): (g, problem_need(g, need)) for g in big}

        def budget(group):
            hit = known.get(id(group))  # the group itself, not another that reused its id
            return hit[1] if hit is not None and hit[0] is group else problem_need(group, need)

        self.need = budget
        self.case_need = need
        self.big = sorted(big, key=lambda g: (-cost(g) if cost else 0.0, -self.need(g)))
        self.small = SpecializationQueue([g for g in groups if not model_size(g[0])], cost)
        self.gpus = gpus
        self._cond = threading.Condition()
        self.stopped = False

    def stop(self) -> None:
        """Hand out nothing more (an interrupted run): every `take` returns None."""
        with self._cond:
            self.stopped = True
            self._cond.notify_all()

    def take(self, gpu: int, worker: int = 0, wait: bool = True
             ) -> tuple[list[Case], int] | bool | None:
        """The next problem for `worker` on `gpu` and its budgeted bytes; `release` them.
        None: nothing is left. With `wait` False, False where it would wait (a replay of
        the schedule on a clock of its own, tests/conformance/harness/test_schedule.py)."""
        budget = self.gpus[gpu]
        with self._cond:
            while True:
                if self.stopped:
                    return None
                group = next((g for g in self.big if budget.fits(self.need(g))), None)
                # a layer that needs the whole GPU stops small problems from starting on it
                # until it has run, or it would wait for the end of the run
                draining = group is None and any(budget.oversize(self.need(g))
                                                 for g in self.big)
                if group is not None:
                    self.big.remove(group)
                elif self.small and not draining and budget.fits(0):
                    group = self.small.pop(worker)
                elif not self.big and not self.small:
                    budget.waiting.discard(worker)
                    return None
                else:
                    budget.waiting.add(worker)
                    if not self.small and budget.surplus([self.need(g) for g in self.big]):
                        budget.waiting.discard(worker)  # retires: its reserve comes back
                        budget.live -= 1
                        self._cond.notify_all()
                        return None
                    if not wait:
                        return False
                    self._cond.wait()
                    continue
                budget.waiting.discard(worker)
                need = self.need(group)
                budget.held += need
                budget.running += 1
                # the largest case first: the worker's hold shrinks as the problem goes on
                return sorted(group, key=self.case_need, reverse=True), need

    def kept_after(self, group: list[Case]) -> list[int]:
        """The bytes a problem's worker still needs after each of its cases (in the order
        `take` gave them): the largest need of the cases left, 0 after the last."""
        needs = [self.case_need(c) for c in group]
        return [max(needs[i + 1:], default=0) for i in range(len(needs))]

    def shrink(self, gpu: int, by: int) -> None:
        """A running problem hands back `by` of its bytes (its largest cases have run: each
        case frees its layer before the next, worker.release_device_memory); measured on an
        H200 (2026-11-30), DeepSeek-V3's grouped case peaks at 49 GiB, its torch case at 33,
        its xpu case at 17, and the problem held its largest budget until its last case."""
        if by <= 0:
            return
        with self._cond:
            self.gpus[gpu].held -= by
            self._cond.notify_all()

    def release(self, gpu: int, need: int) -> None:
        with self._cond:
            self.gpus[gpu].held -= need
            self.gpus[gpu].running -= 1
            self._cond.notify_all()

    def take_alone(self, gpu: int) -> None:
        """Wait until nothing else runs on `gpu`, and keep it so until `release_alone`: a case
        that ran out of memory beside others is retried alone (runner.run_isolated). No new
        case starts on the GPU from the moment this is asked."""
        budget = self.gpus[gpu]
        with self._cond:
            while budget.alone and not self.stopped:
                self._cond.wait()
            budget.alone = True
            while budget.running and not self.stopped:
                self._cond.wait()
            budget.running = 1

    def release_alone(self, gpu: int) -> None:
        with self._cond:
            self.gpus[gpu].running = 0
            self.gpus[gpu].alone = False
            self._cond.notify_all()


def gpu_memory(device: str) -> tuple[int | None, int | None]:
    """(total, free) bytes of a visible GPU (an index or UUID as CUDA_VISIBLE_DEVICES names
    it), from nvidia-smi, so that the parent never creates a CUDA context; None for what it
    cannot say."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.total,memory.free",
                              "--format=csv,noheader,nounits", "-i", device],
                             capture_output=True, text=True, timeout=30, check=True).stdout
        total, free = (int(v) << 20 for v in out.split(",")[:2])  # MiB
        return total, free
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None, None


def budgets(device: str, visible: list[str], workers: int, memory=gpu_memory
            ) -> list[GpuBudget]:
    """One budget per GPU the workers are pinned to (what is free on it now, less every other
    worker's reserve); on a CPU one of the host's memory (memory.host_total_bytes; unknown: a
    model-size case runs alone)."""
    if not device.startswith("cuda"):
        return [GpuBudget(host_total_bytes(), workers)]
    visible = visible or ["0"]
    count = len(visible)
    budgets = []
    for i, name in enumerate(visible):
        total, free = memory(name)
        budgets.append(GpuBudget(total, len(range(i, workers, count)), free))
    return budgets


__all__ = [
    "GpuBudget",
    "SpecializationQueue",
    "WorkPool",
    "budgets",
    "case_need",
    "device_need",
    "gpu_memory",
    "measured",
    "model_size",
    "oversize",
    "problem_need",
    "specialization",
    "work",
]
