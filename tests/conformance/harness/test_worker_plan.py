"""`-n auto` from the host's GPUs, their free memory and its cores, and a case that runs out
of memory beside others retried once alone (issue 32: a correct backend went red on a
64-core host with one GPU, whose 48 workers' contexts and caches filled it)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from moecert.conformance.harness.cases import Case
from moecert.conformance.harness.runner import RunConfig, run_isolated
from moecert.conformance.harness.schedule import (
    WORKER_RESERVE_BYTES,
    GpuBudget,
    WorkPool,
    budgets,
    device_need,
)
from moecert.conformance.harness.worker_plan import (
    MPS_CLIENTS_PER_GPU,
    UNKNOWN_MEMORY_WORKERS_PER_GPU,
    plan_workers,
)
from moecert.conformance.harness.xfail import XfailList
from moecert.reference import MoEProblem
from moecert.reports import load
from moecert.reports.store import Journal

SMALL = MoEProblem(M=5, K=64, N=32, E=4, topk=2)
MIXTRAL = MoEProblem(M=16, K=4096, N=14336, E=8, topk=2)
DEEPSEEK = MoEProblem(M=16, K=7168, N=2048, E=256, topk=8)
GIB = 1 << 30
HELPERS = Path(__file__).parents[1] / "helpers"


def _suite():
    """Small problems and two model-size layers, as certify mixes them."""
    small = [Case(b, "gptq-int4", SMALL, seed=s) for s in range(4) for b in ("torch", "triton")]
    return [*small, Case("torch", "gptq-int4", MIXTRAL), Case("torch", "gptq-int8", DEEPSEEK)]


def _gpus(**memory):
    """nvidia-smi planted: {name: (total, free)}."""
    return lambda name: memory[f"gpu{name}"]


def test_a_many_core_host_with_one_small_gpu_gets_what_its_memory_holds():
    cases = _suite()
    small_gpu = _gpus(gpu0=(40 * GIB, 39 * GIB))
    plan = plan_workers("cuda", cases, ["0"], cores=64, memory=small_gpu)
    assert 1 < plan.workers < 48  # three per four cores would be 48
    assert "set by GPU memory" in plan.why
    # the largest layer that fits the GPU still fits beside every other worker's reserve
    # with the planned count, and would not with one more
    largest = max(device_need(c) for c in cases if device_need(c) <= 39 * GIB * 0.97)
    (budget,) = budgets("cuda", ["0"], plan.workers, memory=small_gpu)
    assert budget.limit >= largest
    (more,) = budgets("cuda", ["0"], plan.workers + 1, memory=small_gpu)
    assert more.limit < largest


def test_four_large_gpus_on_the_same_host_are_decided_by_the_cores():
    big = (80 * GIB, 79 * GIB)
    plan = plan_workers("cuda", _suite(), ["0", "1", "2", "3"], cores=64,
                        memory=_gpus(gpu0=big, gpu1=big, gpu2=big, gpu3=big))
    assert plan.workers == 48 and "set by the cores" in plan.why
    one = plan_workers("cuda", _suite(), ["0"], cores=64, memory=_gpus(gpu0=big))
    assert one.workers < 48  # one of them alone holds fewer
    assert one.workers * 4 >= 48


def test_under_mps_the_cores_hold_one_worker_each():
    big = (141 * GIB, 140 * GIB)
    plain = plan_workers("cuda", _suite(), ["0"], cores=16, memory=_gpus(gpu0=big))
    shared = plan_workers("cuda", _suite(), ["0"], cores=16, memory=_gpus(gpu0=big), mps=True)
    assert (plain.workers, shared.workers) == (12, 16)
    small_cases = [Case("torch", "bf16", SMALL, seed=s) for s in range(100)]  # 90 would fit
    many = plan_workers("cuda", small_cases, ["0"], cores=128, memory=_gpus(gpu0=big),
                        mps=True)
    assert many.workers == MPS_CLIENTS_PER_GPU  # an MPS server's clients per GPU
    small = _gpus(gpu0=(40 * GIB, 39 * GIB))  # the memory bounds it all the same
    assert (plan_workers("cuda", _suite(), ["0"], cores=64, memory=small, mps=True).workers
            == plan_workers("cuda", _suite(), ["0"], cores=64, memory=small).workers)


def test_the_smallest_gpu_bounds_each_gpus_share():
    plan = plan_workers("cuda", _suite(), ["0", "1"], cores=128,
                        memory=_gpus(gpu0=(80 * GIB, 79 * GIB), gpu1=(40 * GIB, 39 * GIB)))
    alone = plan_workers("cuda", _suite(), ["1"], cores=128,
                         memory=_gpus(gpu1=(40 * GIB, 39 * GIB)))
    assert plan.workers == 2 * alone.workers  # pinned in turn: half on the small one


def test_memory_another_process_holds_is_not_counted():
    cases = [Case("torch", "gptq-int4", SMALL, seed=s) for s in range(100)]
    free = plan_workers("cuda", cases, ["0"], cores=256, memory=_gpus(gpu0=(80 * GIB, 79 * GIB)))
    held = plan_workers("cuda", cases, ["0"], cores=256, memory=_gpus(gpu0=(80 * GIB, 20 * GIB)))
    assert held.workers == int(20 * GIB * 0.97) // WORKER_RESERVE_BYTES < free.workers
    (budget,) = budgets("cuda", ["0"], 1, memory=_gpus(gpu0=(80 * GIB, 20 * GIB)))
    assert budget.limit <= 20 * GIB  # the budget starts from what is free, too


def test_unknown_memory_and_cpus():
    plan = plan_workers("cuda", _suite(), ["0", "1"], cores=64,
                        memory=_gpus(gpu0=(None, None), gpu1=(None, None)))
    assert plan.workers == 2 * UNKNOWN_MEMORY_WORKERS_PER_GPU
    assert plan_workers("cpu", _suite(), cores=7).workers == 7


def test_a_case_alone_waits_for_its_gpu_to_empty_and_holds_it():
    cases = [Case("torch", "bf16", SMALL, seed=s) for s in range(3)]
    pool = WorkPool(cases, [GpuBudget(80 * GIB, 3)])
    _, need = pool.take(0, 0)
    events = []
    alone = threading.Thread(target=lambda: (pool.take_alone(0), events.append("alone")))
    alone.start()
    alone.join(0.2)
    assert alone.is_alive()  # the other case still runs
    other = threading.Thread(target=lambda: events.append(pool.take(0, 1)))
    other.start()
    other.join(0.2)
    assert other.is_alive() and not events  # nothing new starts on the GPU meanwhile
    pool.release(0, need)
    alone.join(5)
    other.join(0.2)
    assert events == ["alone"]
    pool.release_alone(0)
    other.join(5)
    assert len(events) == 2 and events[1] is not None


@pytest.fixture
def oom_backends(monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(HELPERS))
    monkeypatch.setenv("PYTHONPATH", str(HELPERS))
    (tmp_path / "oom").mkdir()
    monkeypatch.setenv("MOECERT_TEST_OOM_DIR", str(tmp_path / "oom"))


def test_a_case_out_of_memory_is_retried_once_alone_and_says_so(tmp_path, oom_backends):
    cases = [Case(b, "bf16", SMALL, seed=0, depth="light")
             for b in ("torch", "test-oom-once", "test-oom-always")]
    journal = Journal(tmp_path, "run.smoke")
    config = RunConfig("cpu", 2, 60.0, None, ["misbehaving_backends"], "run", XfailList([]))
    run_isolated(cases, config, journal)
    journal.finish()
    rows = load(tmp_path)
    by = rows.groupby("backend", observed=True)
    assert set(by.get_group("test-oom-once")["status"]) == {"pass"}  # the second try's rows
    assert by.get_group("test-oom-once")["retried"].str.contains(
        "retried once alone on the CPU").all()
    assert "OutOfMemoryError" in by.get_group("test-oom-once")["retried"].iloc[0]
    always = by.get_group("test-oom-always")
    assert "error" in set(always["status"]) and always["retried"].str.len().gt(0).all()
    assert (by.get_group("torch")["retried"].fillna("") == "").all()
    # one set of rows per case: the first try's rows are replaced, not kept beside
    assert rows.drop_duplicates(["case_id", "check"]).shape[0] == len(rows)


def test_more_workers_than_the_memory_holds_are_run_with_a_warning(monkeypatch, capsys):
    from moecert.conformance.cli import run_command
    from moecert.conformance.harness import runner, worker_plan

    small_gpu = _gpus(gpu0=(40 * GIB, 39 * GIB))
    monkeypatch.setattr(runner, "visible_devices", lambda: ["0"])
    monkeypatch.setattr(run_command, "plan_workers", lambda device, cases, visible, mps:
                        worker_plan.plan_workers(device, cases, visible, cores=64,
                                              memory=small_gpu, mps=mps))
    planned = run_command.workers_for("auto", "cuda", _suite())
    assert f"-n auto: {planned} worker(s)" in capsys.readouterr().err
    assert run_command.workers_for(48, "cuda", _suite()) == 48  # as asked, but said
    assert f"warning: -n 48: the GPUs' memory holds {planned} worker(s)" in (
        capsys.readouterr().err)
    assert run_command.workers_for(planned, "cuda", _suite()) == planned
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("backend, first", [
    ("test-oom-killed-once", "out of memory, most likely: the worker process was killed"),
    ("test-cuda-oom-once", "CUDA error: out of memory"),
])
def test_a_worker_killed_for_memory_costs_one_retry_counted_in_the_verdict(
        tmp_path, oom_backends, backend, first):
    """Issue 43: a worker killed for memory (the kernel's OOM killer's SIGKILL), or the
    driver's out-of-memory error that is not torch's OutOfMemoryError, costs one retried case,
    never a red correct case, and the verdict line counts the retry."""
    from moecert.reports.verdict import tally_frame, verdict

    cases = [Case(b, "bf16", SMALL, seed=0, depth="light") for b in ("torch", backend)]
    journal = Journal(tmp_path, "run.smoke")
    config = RunConfig("cpu", 2, 60.0, None, ["misbehaving_backends"], "run", XfailList([]))
    run_isolated(cases, config, journal)
    journal.finish()
    rows = load(tmp_path)
    mine = rows[rows["backend"] == backend]
    assert set(mine["status"]) == {"pass"}, mine[["check", "status", "message"]]
    assert mine["retried"].str.contains(first).all()
    assert mine["retried"].str.contains("retried once alone on the CPU").all()
    line = verdict(tally_frame(rows)).line
    assert line.startswith("green: all 2 claimed case(s) passed")
    assert f"{backend} 1 of 1 claimed, 1 retried alone after running out of memory" in line
    assert "torch 1 of 1 claimed)" in line or "torch 1 of 1 claimed," in line
