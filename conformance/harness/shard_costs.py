"""Shards balanced by measured cost: `--shard I/N --shard-costs RESULTS`.

Without costs a shard is the cases whose id hashes to it (suites.shard): equal counts, but a
certify shard that draws the model-size layers runs several times longer than one that does
not, and the run waits for the slowest shard. With costs, each case's cost is its check time
(`duration_s` summed over its rows) in an earlier run's results (a file, or a folder's newest
run, every shard of it), and problems (a case id less its backend: their cases share the
checkpoint and reference, so they stay in one shard) go to shards largest first, each to the
shard with the least cost so far (ties: the lowest shard). A case the earlier run did not have
costs the median of those it had. The split is a function of the case list and the cost table
only, so every host given the same RESULTS computes the same shards; the shard record keeps
the table's hash (`shard_costs_sha256`), and an assembled bundle whose shards used different
tables says so instead of certifying.
"""

from __future__ import annotations

import hashlib
import json
import statistics
from pathlib import Path

from moecert.reports.schema import problem_id

from .cases import Case
from .execute import problem_groups


def read_costs(path: str | Path) -> dict[str, float]:
    """{case id: seconds of check time} from the results at `path` (bench rows left out)."""
    from moecert.reports.store import load

    rows = load(path)
    rows = rows[rows["check"] != "bench"]
    return {str(k): float(v) for k, v in
            rows.groupby("case_id", observed=True)["duration_s"].sum().items()}


def costs_sha256(costs: dict[str, float]) -> str:
    """A hash of the table, the same on every host that read the same rows."""
    text = json.dumps(sorted((k, round(v, 6)) for k, v in costs.items()))
    return hashlib.sha256(text.encode()).hexdigest()


def case_cost(costs: dict[str, float]):
    """A case's cost under `costs`: its seconds there, else the median of those the table has
    (1 s for a table without any)."""
    known = [v for v in costs.values() if v > 0]
    default = statistics.median(known) if known else 1.0
    return lambda case: costs.get(case.case_id, default)


def balanced_shard(cases: list[Case], index: int, count: int,
                   costs: dict[str, float]) -> list[Case]:
    """Shard `index` of `count` (0-based) of `cases`, balanced by `costs` (module docstring);
    the cases in their given order."""
    if not 0 <= index < count:
        raise ValueError(f"shard index {index} outside 0..{count - 1}")
    cost = case_cost(costs)
    weight = {problem_id(g[0].case_id): sum(map(cost, g)) for g in problem_groups(cases)}
    load = [0.0] * count
    mine: set[str] = set()
    for problem in sorted(weight, key=lambda p: (-weight[p], p)):
        target = min(range(count), key=lambda i: (load[i], i))
        load[target] += weight[problem]
        if target == index:
            mine.add(problem)
    return [c for c in cases if problem_id(c.case_id) in mine]


def shard_loads(cases: list[Case], count: int, costs: dict[str, float]) -> list[float]:
    """Each shard's summed cost under `costs` (for a test, or to see the balance)."""
    cost = case_cost(costs)
    return [sum(map(cost, balanced_shard(cases, i, count, costs))) for i in range(count)]


__all__ = ["balanced_shard", "case_cost", "costs_sha256", "read_costs", "shard_loads"]
