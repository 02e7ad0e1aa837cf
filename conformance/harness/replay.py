"""A WorkPool's schedule replayed on a clock of its own (conformance/harness/schedule.py): the
schedule's tests replay with it, and tools/schedule_replay.py a finished run's measured
times (issue 43)."""

from __future__ import annotations

import heapq

from .schedule import WorkPool


def replay(pool: WorkPool, workers: int, seconds: dict[str, float], shrink: bool = True
           ) -> tuple[float, list[tuple[float, float, str]]]:
    """`pool`'s schedule on one GPU on a clock of its own (no process runs): `workers`
    workers take problems as the runner's do, a worker runs its problem's cases in the order
    `take` gives them, each taking `seconds[case id]`, and (with `shrink`) hands back what
    the cases left do not need (runner.serve). Returns the wall (the last problem's end) and
    (start, end, first case id) of every model-size problem."""
    now, free, running, spans, started = 0.0, list(range(workers)), [], [], {}
    while True:
        waiting = []
        for w in free:
            got = pool.take(0, w, wait=False)
            if got is False:
                waiting.append(w)
            elif got is not None:
                group, need = got
                keeps = pool.kept_after(group) if shrink else [None] * len(group)
                started[w] = (now, group[0].case_id, need > 0)
                heapq.heappush(running, (now + seconds[group[0].case_id], w, need,
                                         list(zip(group, keeps, strict=True))[1:], keeps[0]))
        free = waiting
        if not running:
            return now, spans
        now, w, need, rest, keep = heapq.heappop(running)
        if shrink:
            pool.shrink(0, need - keep)
            need = keep
        if rest:
            (case, next_keep), *rest = rest
            heapq.heappush(running, (now + seconds[case.case_id], w, need, rest, next_keep))
        else:
            pool.release(0, need)
            t0, first, big = started.pop(w)
            if big:
                spans.append((t0, now, first))
            free.append(w)

