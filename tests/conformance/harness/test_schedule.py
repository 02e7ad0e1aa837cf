"""The work pool: model-size problems first and against a memory budget per GPU (never an
out-of-memory pile-up, never the whole GPU idle behind one layer), small problems interleaved
by kernel specialization, a problem's cases together."""

from __future__ import annotations

import threading

import pytest
from moecert.conformance.harness.cases import Case
from moecert.conformance.harness.execute import problem_groups
from moecert.conformance.harness.replay import replay
from moecert.conformance.harness.schedule import (
    MODEL_SIZE_WEIGHTS,
    USABLE_FRACTION,
    GpuBudget,
    SpecializationQueue,
    WorkPool,
    device_need,
    model_size,
)
from moecert.reference import MoEProblem

SMALL = MoEProblem(M=5, K=64, N=32, E=4, topk=2)
MIXTRAL = MoEProblem(M=16, K=4096, N=14336, E=8, topk=2)
DEEPSEEK = MoEProblem(M=16, K=7168, N=2048, E=256, topk=8)
GIB = 1 << 30


def _cases(problem, scheme="gptq-int4", seed=0, backends=("torch", "triton")):
    return [Case(b, scheme, problem, seed=seed) for b in backends]


def _total(limit):
    """A GPU's total memory that leaves `limit` bytes to model-size cases (one worker)."""
    return int(limit / USABLE_FRACTION)


def _ids(group):
    return {c.case_id for c in group}


def _blocked_take(pool, gpu=0):
    """Start a thread that calls pool.take(gpu); return (got, thread) once the thread waits
    inside take (the pool's condition): proof that nothing could be taken, whatever the
    thread's speed (a join timeout would let a slow thread pass as blocked)."""
    waiting, cond = threading.Event(), pool._cond
    wait = cond.wait

    def signalling_wait(*a, **kw):
        waiting.set()
        return wait(*a, **kw)

    cond.wait = signalling_wait
    got = []
    thread = threading.Thread(target=lambda: got.append(pool.take(gpu)), daemon=True)
    thread.start()
    waiting_or_done = waiting.wait(5)
    assert waiting_or_done and not got, "take returned instead of waiting"
    return got, thread


def test_model_size_is_the_weight_count_threshold():
    assert model_size(_cases(MIXTRAL)[0]) and not model_size(_cases(SMALL)[0])
    weights = [P.E * P.K * P.N * 3 for P in (SMALL, MIXTRAL)]
    assert weights[0] < MODEL_SIZE_WEIGHTS < weights[1]


def test_the_budget_follows_the_weights_bytes():
    int4, int8, bf16 = (device_need(Case("torch", s, DEEPSEEK))
                        for s in ("gptq-int4", "gptq-int8", "bf16"))
    assert int4 < int8 < bf16
    assert device_need(Case("torch", "bf16", SMALL)) == 0  # the workers' reserve covers it


def test_model_size_problems_come_first_largest_first_and_cases_stay_together():
    cases = (_cases(SMALL) + _cases(MIXTRAL, "gptq-int4") + _cases(SMALL, seed=1)
             + _cases(DEEPSEEK, "gptq-int8"))
    pool = WorkPool(cases, [GpuBudget(None, 1)])
    order = []
    while (taken := pool.take(0)) is not None:
        order.append(taken[0])
        pool.release(0, taken[1])
    assert [_ids(g) for g in order] == [_ids(_cases(DEEPSEEK, "gptq-int8")),
                                        _ids(_cases(MIXTRAL, "gptq-int4")),
                                        _ids(_cases(SMALL)), _ids(_cases(SMALL, seed=1))]


def test_small_problems_run_beside_a_model_layer_that_fits():
    big = _cases(MIXTRAL, "gptq-int4")
    pool = WorkPool(big + _cases(SMALL), [GpuBudget(80 * GIB, 4)])
    first, _ = pool.take(0)
    assert _ids(first) == _ids(big)
    second, _ = pool.take(0)  # does not block: the small problem fits beside it
    assert _ids(second) == _ids(_cases(SMALL))


def test_two_layers_share_a_gpu_only_when_both_fit():
    a, b = _cases(DEEPSEEK, "gptq-int8"), _cases(DEEPSEEK, "gptq-int8", seed=1)
    need = device_need(a[0])
    roomy = WorkPool(a + b, [GpuBudget(_total(2.1 * need), 1)])
    assert roomy.take(0) and roomy.take(0)  # both at once
    tight = WorkPool(a + b, [GpuBudget(_total(1.5 * need), 1)])
    tight.take(0)
    got, waiter = _blocked_take(tight)  # nothing to take: it waits
    tight.release(0, need)
    waiter.join(5)
    assert got and _ids(got[0][0]) == _ids(b)


def test_a_layer_larger_than_the_budget_runs_alone_and_small_ones_wait_for_it():
    big = _cases(DEEPSEEK, "bf16")
    pool = WorkPool(_cases(SMALL) + big + _cases(SMALL, seed=1), [GpuBudget(8 * GIB, 2)])
    first, need = pool.take(0)  # an idle GPU takes it
    assert _ids(first) == _ids(big)
    got, waiter = _blocked_take(pool)  # nothing to take: it waits
    pool.release(0, need)
    waiter.join(5)
    assert got and _ids(got[0][0]) == _ids(_cases(SMALL))


def test_small_problems_stop_starting_while_an_oversize_layer_waits():
    big = _cases(DEEPSEEK, "bf16")
    pool = WorkPool(big + _cases(SMALL) + _cases(SMALL, seed=1), [GpuBudget(8 * GIB, 2)])
    pool.big, queued = [], pool.big  # a small problem is running when the layer arrives
    _, small_need = pool.take(0)
    pool.big = queued
    got, waiter = _blocked_take(pool)  # nothing to take: it waits
    pool.release(0, small_need)
    waiter.join(5)
    assert got and _ids(got[0][0]) == _ids(big)


def test_unknown_memory_runs_model_size_problems_alone():
    big = _cases(MIXTRAL, "gptq-int4")
    pool = WorkPool(big + _cases(SMALL), [GpuBudget(None, 2)])
    _, need = pool.take(0)
    got, waiter = _blocked_take(pool)  # nothing to take: it waits
    pool.release(0, need)
    waiter.join(5)
    assert got


def test_each_gpu_has_its_own_budget():
    a, b = _cases(DEEPSEEK, "gptq-int8"), _cases(DEEPSEEK, "gptq-int8", seed=1)
    one_each = _total(1.2 * device_need(a[0]))
    pool = WorkPool(a + b, [GpuBudget(one_each, 1), GpuBudget(one_each, 1)])
    assert pool.take(0) and pool.take(1)  # one layer per GPU, at the same time
    assert pool.take(0) is None


def test_small_problems_go_by_kernel_specialization_with_affinity():
    cases = ([c for s in range(3) for c in _cases(SMALL, "gptq-int4", seed=s)]
             + [c for s in range(2) for c in _cases(SMALL, "bf16", seed=s)]
             + _cases(SMALL, "int8-w8a16"))
    queue = SpecializationQueue(problem_groups(cases))
    assert queue.pop(0)[0].scheme == "gptq-int4"
    assert queue.pop(1)[0].scheme == "bf16"  # a specialization nobody has started
    assert queue.pop(0)[0].scheme == "gptq-int4"  # its own specialization again
    assert queue.pop(2)[0].scheme == "int8-w8a16"
    assert queue.pop(2)[0].scheme == "gptq-int4"  # helps where most is left (1 against 1:
    assert queue.pop(1)[0].scheme == "bf16"  # the first); worker 1 finishes its own
    assert not queue


def test_small_problems_go_most_work_first():
    """The specialization with the most work starts first and is helped first; inside one the
    largest problem first: the run does not end on one long specialization."""
    wide = MoEProblem(M=5, K=256, N=128, E=8, topk=2)  # 32x SMALL's weights
    cases = (_cases(SMALL, "bf16") + _cases(SMALL, "nvfp4", seed=1)
             + _cases(wide, "nvfp4") + _cases(SMALL, "nvfp4", seed=2))
    queue = SpecializationQueue(problem_groups(cases))
    first = queue.pop(0)
    assert (first[0].scheme, first[0].problem) == ("nvfp4", wide)
    assert queue.pop(1)[0].scheme == "bf16"  # the only specialization nobody has started
    assert queue.pop(2)[0].scheme == "nvfp4"  # helps where most work is left
    assert queue.pop(1)[0].scheme == "nvfp4"
    assert not queue


@pytest.mark.parametrize("workers", [1, 3])
def test_every_problem_is_taken_exactly_once(workers):
    cases = [c for s in range(6) for c in _cases(SMALL, "gptq-int4", seed=s)]
    cases += _cases(MIXTRAL, "gptq-int4") + _cases(DEEPSEEK, "gptq-int4")
    pool, taken, lock = WorkPool(cases, [GpuBudget(80 * GIB, workers)]), [], threading.Lock()

    def serve():
        while (t := pool.take(0)) is not None:
            with lock:
                taken.extend(t[0])
            pool.release(0, t[1])

    threads = [threading.Thread(target=serve) for _ in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert sorted(c.case_id for c in taken) == sorted(c.case_id for c in cases)


# --- measured costs order the pool (issue 43, item 2) ----------------------------------------

def _replay(pool: WorkPool, workers: int, costs: dict[str, float]) -> float:
    """The pool's schedule on a clock of its own: each problem takes its cases' measured
    seconds and holds its budget to its end; returns the wall (the last problem's end)."""
    return _replay_cases(pool, workers, costs, shrink=False)


def _costed_run():
    """Two short DeepSeek-V3 problems that need more memory than a long Mixtral one, and
    small problems enough to keep the other workers busy meanwhile; what an earlier run
    measured for each case."""
    deepseek = [c for s in (0, 1) for c in _cases(DEEPSEEK, "gptq-int8", seed=s)]
    mixtral = _cases(MIXTRAL, "gptq-int4")
    small = [c for s in range(50) for c in _cases(SMALL, seed=s)]
    costs = {**{c.case_id: 5.0 for c in deepseek}, **{c.case_id: 30.0 for c in mixtral},
             **{c.case_id: 1.5 for c in small}}
    return [*small, *deepseek, *mixtral], costs


def _needs(case):
    return (34 if case.problem.E == 256 else 30) * GIB if model_size(case) else 0


def test_measured_costs_start_the_longest_model_size_problem_first():
    cases, costs = _costed_run()
    first = WorkPool(cases, [GpuBudget(_total(70 * GIB), 1)], need=_needs, costs=costs)
    group, _ = first.take(0)
    assert group[0].problem == MIXTRAL  # 60 s measured, though it needs the least memory
    # without costs the memory need orders them, as before
    plain = WorkPool(cases, [GpuBudget(_total(70 * GIB), 1)], need=_needs)
    assert plain.take(0)[0][0].problem == DEEPSEEK


def test_measured_costs_leave_no_lone_model_size_tail():
    """Eight workers, one GPU that holds two model-size problems at once: ordered by measured
    cost the run ends when its longest problem must (no problem left to start late and run
    alone at the end); ordered by memory alone the long Mixtral problem starts after the
    DeepSeek ones and is the run's lone tail."""
    cases, costs = _costed_run()
    workers = 8
    bound = max(max(sum(costs[c.case_id] for c in g) for g in problem_groups(cases)),
                sum(costs.values()) / workers)
    from moecert.conformance.harness.schedule import WORKER_RESERVE_BYTES

    def gpu():  # 70 GiB for model-size cases beside the other workers' reserves
        return [GpuBudget(_total(70 * GIB + (workers - 1) * WORKER_RESERVE_BYTES), workers)]
    by_cost = _replay(WorkPool(cases, gpu(), need=_needs, costs=costs), workers, costs)
    by_need = _replay(WorkPool(cases, gpu(), need=_needs), workers, costs)
    assert by_cost <= 1.05 * bound, (by_cost, bound)
    assert by_need > 1.1 * bound  # the tail the costs remove


def test_idle_workers_retire_so_the_last_model_size_problems_run_side_by_side():
    """Certify on one GPU of a 64-core host (2026-11-29): 48 workers' reserves left room for
    one DeepSeek-V3 layer at a time, and the run's last 180 s finished them one by one while
    47 workers waited. Once no small problem is left, the waiting workers beyond what the
    model-size problems could use retire and their reserves come back: two such layers run
    side by side, and the run ends in about half the serial time of its layers."""
    from moecert.conformance.harness.schedule import WORKER_RESERVE_BYTES

    workers = 48
    layers = [c for s in range(6) for c in _cases(DEEPSEEK, "gptq-int8", seed=s)]
    small = [c for s in range(200) for c in _cases(SMALL, seed=s)]
    costs = {**{c.case_id: 10.0 for c in layers}, **{c.case_id: 0.5 for c in small}}
    need = 60 * GIB
    # one layer fits beside every worker's reserve, two only once most workers are gone
    room = need + (workers - 1) * WORKER_RESERVE_BYTES + 2 * GIB
    budget = GpuBudget(_total(room), workers)
    assert need <= budget.limit < 2 * need
    pool = WorkPool([*small, *layers], [budget],
                    need=lambda c: need if model_size(c) else 0)
    wall = _replay(pool, workers, costs)
    serial = sum(costs[c.case_id] for c in layers)  # 120 s: one layer at a time
    assert wall <= 0.6 * serial, wall
    assert budget.live < workers and budget.held == 0 and budget.running == 0


def test_measured_costs_order_small_specializations_too():
    """A specialization whose problems are larger by the weight estimate but measured
    shorter goes after one measured longer."""
    big_est = [c for s in range(3) for c in _cases(MoEProblem(M=5, K=256, N=128, E=8, topk=2),
                                                    "bf16", seed=s)]
    small_est = [c for s in range(3) for c in _cases(SMALL, "gptq-int4", seed=s)]
    costs = {**{c.case_id: 0.1 for c in big_est}, **{c.case_id: 2.0 for c in small_est}}
    groups = problem_groups([*big_est, *small_est])
    assert SpecializationQueue(groups).pop(0)[0].scheme == "bf16"  # the weight estimate
    from moecert.conformance.harness.schedule import measured

    assert SpecializationQueue(groups, measured(costs)).pop(0)[0].scheme == "gptq-int4"


def test_run_orders_one_host_by_the_costs_of_an_earlier_run(tmp_path, monkeypatch):
    """`moecert run --shard-costs RESULTS` without --shard (a usage error before issue 43):
    the earlier run's costs reach the pool."""
    from moecert.conformance.cli import app as cli
    from moecert.conformance.cli import run_command

    case = Case("torch", "bf16", SMALL, depth="light").to_json()
    common = ["run", "--case", case, "--check", "claims", "--device", "cpu", "-n", "1"]
    assert cli.main([*common, "--results", str(tmp_path / "first")]) == 0
    given = []

    def keep(cases, config, *args, **kwargs):
        given.append(config.costs)
        return real(cases, config, *args, **kwargs)
    real = run_command.run_isolated
    monkeypatch.setattr(run_command, "run_isolated", keep)
    assert cli.main([*common, "--results", str(tmp_path / "second"),
                     "--shard-costs", str(tmp_path / "first")]) == 0
    (costs,) = given
    assert list(costs) == [Case.from_json(case).case_id] and costs[Case.from_json(case).case_id] > 0


def _replay_cases(pool: WorkPool, workers: int, costs: dict[str, float], shrink: bool
                  ) -> float:
    """As `_replay`, one case at a time: a worker runs its problem's cases in the order
    `take` gives them and (with `shrink`) hands back what the cases left do not need, as the
    runner does (runner.serve): schedule.replay's wall."""
    return replay(pool, workers, costs, shrink)[0]

def test_a_problem_hands_back_memory_as_its_largest_cases_finish():
    """Measured on an H200 (2026-11-30): a DeepSeek-V3 problem's grouped case peaks at
    49 GiB, its torch case at 33 and its xpu case at 17, and the problem held its largest
    budget to its end, so two such problems never ran side by side in 101 GiB. Run largest
    first and shrinking, the next problem starts once the first is down to its small cases."""
    backends = ("grouped", "triton", "torch", "xpu")
    sizes = {"grouped": 59, "triton": 45, "torch": 38, "xpu": 22}
    layers = [c for s in range(8) for c in _cases(DEEPSEEK, "fp8-w8a8", s, backends)]
    costs = {c.case_id: 3.0 for c in layers}

    def need(case):
        return sizes[case.backend] * GIB

    def wall(shrink):
        budget = GpuBudget(_total(101 * GIB), 1)
        pool = WorkPool(list(reversed(layers)), [budget], need=need)
        got = _replay_cases(pool, 4, costs, shrink)
        assert budget.held == 0 and budget.running == 0
        return got

    held_to_the_end = wall(shrink=False)
    assert held_to_the_end == pytest.approx(8 * 4 * 3.0)  # one problem at a time
    assert wall(shrink=True) <= 0.75 * held_to_the_end


def test_take_gives_a_problems_largest_case_first():
    group = _cases(DEEPSEEK, "fp8-w8a8", 0, ("xpu", "torch", "grouped"))
    sizes = {"grouped": 59, "torch": 38, "xpu": 22}
    pool = WorkPool(group, [GpuBudget(_total(101 * GIB), 1)],
                    need=lambda c: sizes[c.backend] * GIB)
    taken, held = pool.take(0, 0, wait=False)
    assert [c.backend for c in taken] == ["grouped", "torch", "xpu"]
    assert held == 59 * GIB
    assert pool.kept_after(taken) == [38 * GIB, 22 * GIB, 0]


def test_take_reads_each_model_size_budget_once():
    """`take` scans the waiting model-size problems under the pool's lock on every call; their
    budgets are computed once, when the pool is made (issue 43: certify's 122 model-size
    problems took 92 ms a take on this project's CPU, 182 s over a run's 1970 takes, every
    other worker waiting on the lock; 0.7 ms since). Here 40 DeepSeek-V3-sized problems of
    which one fits at a time, and small problems to take beside it."""
    calls = []

    def need(case):
        calls.append(case.case_id)
        return 60 * GIB if model_size(case) else 0

    big = [c for seed in range(40) for c in _cases(DEEPSEEK, seed=seed)]
    small = [c for seed in range(60) for c in _cases(SMALL, seed=seed)]
    pool = WorkPool(big + small, [GpuBudget(_total(100 * GIB), 1)], need=need)
    made = len(calls)
    assert made <= 2 * len(big)  # the budgets, and the order that reads them
    taken = [pool.take(0, wait=False) for _ in range(30)]  # one layer, then small ones
    assert all(taken) and sum(len(group) for group, _ in taken) == 2 + 29 * 2
    during = len(calls) - made
    # per problem taken: its cases ordered, largest first; nothing per waiting problem
    assert during <= 2 * 2 * len(taken), during
