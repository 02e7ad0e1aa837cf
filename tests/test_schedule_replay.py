"""tools/schedule_replay.py: a finished run's cases replayed through this checkout's WorkPool
on a clock of its own. One worker takes the cases one after another (the wall is their sum);
two workers halve two equal problems; the run's own wall and spans are read from the rows."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pandas as pd

SCRIPT = Path(__file__).parents[1] / "tools" / "schedule_replay.py"


def load():
    spec = importlib.util.spec_from_file_location("schedule_replay", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _rows(seconds: dict[str, float]) -> pd.DataFrame:
    """Two checks per case, back to back, each case after the one before."""
    from moecert.conformance.harness.suites import build_suite

    cases = {c.case_id: c for c in build_suite("smoke", backends=["torch"], schemes=["bf16"])}
    rows, t = [], 1_000.0
    for case_id, s in seconds.items():
        for check in ("claims", "accuracy"):
            t += s / 2
            rows.append({"case_id": case_id, "check": check, "duration_s": s / 2,
                         "finished_at": pd.Timestamp(t, unit="s"),
                         "case_json": cases[case_id].to_json()})
    return pd.DataFrame(rows)


def test_one_worker_takes_the_cases_one_after_another_and_two_share_them(tmp_path):
    from moecert.conformance.harness.replay import replay
    from moecert.conformance.harness.schedule import GpuBudget, WorkPool
    from moecert.conformance.harness.suites import build_suite

    sr = load()
    ids = [c.case_id for c in build_suite("smoke", backends=["torch"], schemes=["bf16"])][:2]
    assert len(set(ids)) == 2  # one backend: two cases are two problems
    rows = _rows({ids[0]: 3.0, ids[1]: 3.0})
    spans, jsons, wall = sr.case_spans(rows)
    assert spans == {ids[0]: 3.0, ids[1]: 3.0} and wall == 6.0
    from moecert.conformance.harness.cases import Case

    cases = [Case.from_json(jsons[c]) for c in spans]
    for workers, expected in ((1, 6.0), (2, 3.0)):
        pool = WorkPool(cases, [GpuBudget(1 << 40, workers, 1 << 40)])
        predicted, big = replay(pool, workers, spans)
        assert predicted == expected and big == []  # small problems only
    path = tmp_path / "run.parquet"
    rows.to_parquet(path)
    assert sr.main([str(path), "--workers", "2"]) == 0
