"""The runner: cases through worker processes, rows to disk as they finish.

Each of `workers` threads holds one worker process (conformance/harness/worker.py) and feeds it
the problems the work pool hands it (conformance/harness/schedule.py: model-size ones first,
against a memory budget per GPU; small ones by kernel specialization, with affinity). A backend
that raises or returns NaN costs its own rows (the worker catches it); one that kills the
process, hangs past the timeout, or leaves a CUDA error behind costs that case: the parent
records "crash" or "timeout" on the check in flight, starts a fresh worker, and goes on. A case
that runs out of memory (torch's OutOfMemoryError or CUDA's out-of-memory error in an error
row, or its worker killed for memory) is run once more, alone on its GPU (on a CPU alone on
the host), before its rows count; they say so in the `retried` column. On
several GPUs worker i is pinned to visible device i (mod count) through CUDA_VISIBLE_DEVICES
before it starts, so it never initializes another device. Under --mps (harness/mps.py) a case
that failed on the GPU (a crash, a CUDA error) is run once more outside the run's MPS daemon at
the end, as another client's fault would have failed it too; `retried` says so.
"""

from __future__ import annotations

import json
import os
import queue
import shlex
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field, replace
from pathlib import Path

from moecert.kernels import backend_names, get_backend
from moecert.reports.store import Journal

from .cases import Case
from .checks import Outcome
from .execute import result_row, triton_for
from .memory import death_words, gb, oom_kills
from .mps import gpu_fault
from .retries import out_of_memory, retried, retried_outside_mps
from .schedule import WorkPool, budgets, case_need, oversize
from .xfail import XfailList

# Whole seconds a case may take before its worker is killed (interpreted Triton on a CPU
# runs a small case in seconds; a model-size case on a GPU well under a minute).
DEFAULT_TIMEOUT_S = 600.0
_STDERR_TAIL = 40  # lines of a dead worker's stderr kept in its crash row
# Seconds a new worker may take to start (python, torch, the backends' imports) before its
# first case's own timeout begins: starting a process is not the case's time (a loaded
# 2-core machine took over 5 s to start one).
STARTUP_S = 120.0


@dataclass
class RunConfig:
    device: str = "cpu"
    workers: int = 1
    timeout_s: float = DEFAULT_TIMEOUT_S
    checks: list[str] | None = None
    imports: list[str] = field(default_factory=list)
    run_id: str = ""
    xfail: XfailList | None = None
    cache: bool = False  # synthesized checkpoints through the cache (checkpoint_cache.py)
    # {case id: seconds} of an earlier run (--shard-costs): the pool's order (schedule.py)
    costs: dict[str, float] | None = None
    # --mps: the environment of the run's private MPS daemon (mps.MpsDaemon), else None
    mps_env: dict[str, str] | None = None


class Worker:
    """One worker process and the thread reading its protocol stream."""

    def __init__(self, config: RunConfig, slot: int):
        env = dict(os.environ)
        # one share of the cores each, on a GPU host too (its workers still draw exact-tier
        # structures on the host): workers with a full thread pool each spend more time
        # contending than computing on small tensors (measured: a 9-row index_add_ took
        # 119 ms with 2 threads per worker on 2 cores, 8 us with 1)
        env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1)
                                                  // max(1, config.workers))))
        visible = visible_devices() if config.device.startswith("cuda") else []
        if visible:
            env["CUDA_VISIBLE_DEVICES"] = visible[slot % len(visible)]
        env.update(config.mps_env or {})  # --mps: the run's own daemon
        settings = {"device": config.device, "run_id": config.run_id,
                    "imports": list(config.imports), "cache": config.cache}
        cmd = [sys.executable, "-m", "moecert.conformance.harness.worker", json.dumps(settings)]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=env,
                                     start_new_session=True)
        self.messages: queue.Queue = queue.Queue()
        self.ready = False  # the worker said it finished starting
        self.stderr: deque[str] = deque(maxlen=_STDERR_TAIL)
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            try:
                self.messages.put(json.loads(line))
            except json.JSONDecodeError:
                self.stderr.append(line)
        self.messages.put(None)  # end of stream: the process is gone

    def _read_stderr(self):
        for line in self.proc.stderr:
            self.stderr.append(line.rstrip())

    def send(self, case: Case, checks) -> None:
        self.proc.stdin.write(json.dumps({"case": case.to_json(), "checks": checks}) + "\n")
        self.proc.stdin.flush()

    def kill(self):
        try:
            os.killpg(self.proc.pid, 9)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()

    def close(self):
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            self.kill()


def run_isolated(cases: list[Case], config: RunConfig, journal: Journal,
                 on_case=None) -> None:
    """Run `cases` in worker processes; every row goes to `journal` as it arrives;
    `on_case(case, rows)` is called when a case is finished (progress, summary)."""
    visible = visible_devices() if config.device.startswith("cuda") else []
    gpus = budgets(config.device, visible, max(1, config.workers))
    lock = threading.Lock()
    stopping = threading.Event()  # interrupted: record nothing more, start nothing more
    runners: list[CaseRunner] = []

    def record(case, rows):
        rows = config.xfail.apply(rows) if config.xfail else rows
        with lock:
            if stopping.is_set():  # a case cut off by the interruption: it reruns on resume
                return
            journal.append(rows)
            if on_case:
                on_case(case, rows)

    too_big = oversize(cases, config.device, gpus)
    for case, need, room in too_big:
        record(case, [oversize_row(case, config, need, room)])
    skipped = {c.case_id for c, _, _ in too_big}
    faulted: dict[str, list[dict]] = {}  # under --mps: case id -> its rows there
    pools: list[WorkPool] = []
    threads: list[threading.Thread] = []

    def serve(slot: int, pool: WorkPool, cfg: RunConfig):
        runner, gpu = CaseRunner(cfg, slot), slot % len(pool.gpus)
        runners.append(runner)
        place = where(cfg.device, visible, slot)
        while (taken := pool.take(gpu, slot)) is not None:
            group, need = taken
            retry = []
            try:
                for case, keep in zip(group, pool.kept_after(group), strict=True):
                    rows = runner.run(case)
                    if out_of_memory(rows):
                        retry.append((case, rows))
                    elif cfg.mps_env and any(map(gpu_fault, rows)):
                        with lock:
                            faulted[case.case_id] = rows
                    elif case.case_id in faulted:  # the second pass, outside MPS
                        record(case, retried_outside_mps(rows, faulted[case.case_id], place))
                    else:
                        record(case, rows)
                    pool.shrink(gpu, need - keep)
                    need = min(need, keep)
            finally:
                pool.release(gpu, need)
            for case, first in retry:  # once, alone on this GPU: what it ran out of beside
                pool.take_alone(gpu)   # others may be there when nothing else runs
                try:
                    rows = runner.run(case)
                finally:
                    pool.release_alone(gpu)
                record(case, retried(rows, first, place))
        runner.close()

    def run_pass(todo: list[Case], cfg: RunConfig) -> None:
        pool = WorkPool(todo, gpus, need=lambda case: case_need(case, cfg.device),
                        costs=cfg.costs)
        pools.append(pool)
        started = [threading.Thread(target=serve, args=(i, pool, cfg), daemon=True)
                   for i in range(min(max(1, cfg.workers), max(1, len(todo))))]
        threads.extend(started)
        for t in started:
            t.start()
        for t in started:
            t.join()

    try:
        run_pass([c for c in cases if c.case_id not in skipped], config)
        # Under MPS one client's fatal fault reaches every client of its GPU: each case that
        # failed on the GPU is run once more outside the run's daemon, after every MPS worker
        # has gone, so that a bystander's rows are its own again
        if faulted:
            run_pass([c for c in cases if c.case_id in faulted], replace(config, mps_env=None))
    except BaseException:  # SIGTERM or Ctrl-C (run_command.interruptible): stop cleanly
        with lock:
            stopping.set()
        for pool in pools:
            pool.stop()
        for runner in list(runners):
            runner.abort()
        for t in threads:
            t.join(timeout=10)
        raise


def where(device: str, visible: list[str], slot: int) -> str:
    """The device a worker's cases run on, in words ("GPU 1", "the CPU")."""
    if not device.startswith("cuda"):
        return "the CPU" if device.split(":")[0] == "cpu" else device
    return f"GPU {visible[slot % len(visible)]}" if visible else "the GPU"


def oversize_row(case: Case, config: RunConfig, need: int, room: int) -> dict:
    """The one row of a case not run because it needs more memory than the machine has:
    status "oversize" where the backend claims it (or cannot say), else "unsupported" with
    the backend's reason: only a claimed case can be oversize; an unclaimed one is
    unsupported whatever its size (its claims check, which would build the layer, not run)."""
    claimed, reason = claim_here(case, config.device)
    words = oversize_words(config.device, need, room)
    outcome = (Outcome("oversize", words) if claimed is not False else Outcome(
        "unsupported", f"not claimed: {reason} (its claims check not run: it "
                       f"{words.removeprefix('not run: ')})"))
    row = result_row(case, config.device, config.run_id, "setup", outcome, None, 0.0)
    row["claimed"] = claimed
    return row


def claim_here(case: Case, device: str) -> tuple[bool | None, str | None]:
    """Whether the backend claims a case it was not run on (oversize), and its reason if not:
    its answer on this device, so that a case it claims but the machine cannot hold reads as
    claimed and one it does not claim as unclaimed; (None, None) where asking fails."""
    from .context import CaseRun

    try:
        with triton_for(device):
            reason = CaseRun(case, device).claim
    except Exception:  # an import or a folder that cannot be read: unknown, as before
        return None, None
    return reason is None, reason


def oversize_words(device: str, need: int, room: int) -> str:
    where = "host" if device.split(":")[0] == "cpu" else "GPU"
    hint = " (or on a GPU: --device cuda)" if where == "host" else ""
    return (f"not run: needs about {gb(need)} of {where} memory, this machine has "
            f"{gb(room)}; run it on a host with more memory{hint}")


class CaseRunner:
    """Case after case through one worker process, started on first use and started afresh
    after a crash, a timeout, or (on a GPU) an error that may have poisoned its CUDA context.
    The rows are as the worker sent them, plus the "crash" or "timeout" row of a lost case;
    no xfail list is applied."""

    def __init__(self, config: RunConfig, slot: int = 0):
        self.config, self.slot = config, slot
        self.worker: Worker | None = None
        self.aborted = False

    def abort(self) -> None:
        """Kill the worker and start no other (the run was interrupted)."""
        self.aborted = True
        worker = self.worker
        if worker is not None:
            worker.kill()

    def run(self, case: Case) -> list[dict]:
        if self.aborted:
            return []
        self.worker = self.worker or Worker(self.config, self.slot)
        rows, alive = _run_one(self.worker, case, self.config)
        if not alive or (self.config.device != "cpu" and _any_error(rows)):
            self.worker.kill()
            self.worker = None
        return rows

    def close(self) -> None:
        if self.worker:
            self.worker.close()
            self.worker = None


def _run_one(worker: Worker, case: Case, config: RunConfig) -> tuple[list[dict], bool]:
    """The case's rows, and whether the worker is still usable."""
    rows: list[dict] = []
    in_flight = "setup"
    deadline = time.monotonic() + config.timeout_s + (0 if worker.ready else STARTUP_S)
    oom_before = oom_kills()
    try:
        worker.send(case, config.checks)
    except (BrokenPipeError, OSError):
        return [_lost(case, config, "crash", in_flight, worker, "the worker was gone")], False
    while True:
        try:
            message = worker.messages.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            worker.kill()
            rows.append(_lost(case, config, "timeout", in_flight, worker,
                              f"no result after {config.timeout_s:g} s (--timeout); worker "
                              "killed"))
            return rows, False
        if message is None:
            code = worker.proc.wait()
            rows.append(_lost(case, config, "crash", in_flight, worker,
                              death_words(code, oom_before)))
            return rows, False
        if "ready" in message:
            worker.ready = True
            deadline = time.monotonic() + config.timeout_s
        elif "start" in message:
            in_flight = message["start"]
        elif "row" in message:
            rows.append(message["row"])
        elif "done" in message:
            return rows, True


def _lost(case, config, status, check, worker, why) -> dict:
    tail = "\n".join(list(worker.stderr)[-8:])
    message = f"{why} during check {check}" + (f"; stderr tail:\n{tail}" if tail else "")
    return result_row(case, config.device, config.run_id, check, Outcome(status, message),
                      None, 0.0)


def _any_error(rows: list[dict]) -> bool:
    return any(r["status"] == "error" for r in rows)


def visible_devices() -> list[str]:
    """The caller's visible GPUs (indices or UUIDs), as CUDA_VISIBLE_DEVICES names them."""
    named = os.environ.get("CUDA_VISIBLE_DEVICES")
    if named is not None:
        return [d.strip() for d in named.split(",") if d.strip()]
    try:
        import torch
        return [str(i) for i in range(torch.cuda.device_count())]
    except Exception:
        return []


__all__ = ["DEFAULT_TIMEOUT_S", "CaseRunner", "RunConfig", "claim_here", "out_of_memory",
           "oversize_row",
           "oversize_words", "retried", "retried_outside_mps", "run_isolated"]


# --- shared by `moecert run` and the pytest plugin ----------------------------------------

def write_junit(path: str, rows, rerun: str | None, verdict=None) -> None:
    """The rows as JUnit XML (reports/render.py junit), with a failing testcase for a
    verdict that is not green (default: the rows' own run verdict)."""
    from moecert.reports.render import junit

    Path(path).write_text(junit(rows, rerun, verdict=verdict), encoding="utf-8")


def available_backends(device: str) -> list[str]:
    """Backends that can run on `device` (triton on a CPU through the interpreter)."""
    with triton_for(device):
        return [n for n in backend_names() if get_backend(n).available() is None]


def rerun_command(device: str, imports=(), xfail: str | None = None, checks=(),
                  timeout: float = DEFAULT_TIMEOUT_S) -> str:
    """`moecert run` with every option that changes a case's verdict; a case's JSON follows."""
    parts = ["moecert", "run", "--device", device]
    for module in imports:
        parts += ["--import", module]
    if xfail:
        parts += ["--xfail", xfail]
    for check in checks or ():
        parts += ["--check", check]
    if timeout != DEFAULT_TIMEOUT_S:
        parts += ["--timeout", f"{timeout:g}"]
    return shlex.join(parts)
