"""The runner survives backends that raise, return NaN, hang or kill their process: each
costs its own case, the other cases finish, every row is on disk, and a run resumes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from moecert.conformance.harness.cases import Case
from moecert.conformance.harness.runner import RunConfig, run_isolated
from moecert.conformance.harness.xfail import XfailList
from moecert.reference import MoEProblem
from moecert.reports import SCHEMA_VERSION, load
from moecert.reports.store import Journal

HELPERS = Path(__file__).parents[1] / "helpers"
PROBLEM = MoEProblem(M=5, K=64, N=32, E=4, topk=2)


@pytest.fixture
def helpers_importable(monkeypatch):
    monkeypatch.syspath_prepend(str(HELPERS))
    monkeypatch.setenv("PYTHONPATH", str(HELPERS))


def _case(backend, seed=0):
    return Case(backend, "bf16", PROBLEM, seed=seed, depth="light")


def _run(tmp_path, cases, timeout=60.0, workers=1):
    journal = Journal(tmp_path, "run.smoke")
    config = RunConfig("cpu", workers, timeout, None, ["misbehaving_backends"], "run",
                       XfailList([]))
    seen = []
    run_isolated(cases, config, journal, lambda case, rows: seen.append(case.case_id))
    journal.finish()
    return load(tmp_path), seen


def test_each_misbehaving_backend_costs_only_its_case(tmp_path, helpers_importable):
    cases = [_case("test-dies"), _case("torch"), _case("test-hangs"), _case("test-raises"),
             _case("test-nan"), _case("torch", seed=1)]
    frame, seen = _run(tmp_path, cases, timeout=20.0, workers=2)
    assert sorted(seen) == sorted(c.case_id for c in cases)
    status = frame.groupby("backend")["status"].agg(set)
    assert "crash" in status["test-dies"]
    assert "timeout" in status["test-hangs"]
    assert "error" in status["test-raises"]
    nan_rows = frame[frame.backend == "test-nan"].set_index("check")
    assert nan_rows.loc["accuracy", "status"] == "fail"
    assert nan_rows.loc["accuracy", "nonfinite"] == 1
    assert status["torch"] == {"pass"}
    crash = frame[(frame.backend == "test-dies") & (frame.status == "crash")].iloc[0]
    assert crash["check"] in ("accuracy", "claims") and "exit code 3" in crash["message"]


def test_rows_are_on_disk_before_the_run_ends(tmp_path):
    journal = Journal(tmp_path, "killed.smoke")
    journal.append([{"case_id": "a", "check": "accuracy", "status": "pass"}])
    # no finish(): the process died here
    frame = load(tmp_path)
    assert list(frame["case_id"]) == ["a"] and list(frame["status"]) == ["pass"]


def test_a_cut_short_last_line_is_ignored(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps({"moecert_schema_version": SCHEMA_VERSION}) + "\n"
                    + '{"case_id": "a", "rows": [{"case_id": "a", "status": "pass"}]}\n'
                    + '{"case_id": "b", "rows": [{"case_id": "b", "sta')
    assert list(load(path)["case_id"]) == ["a"]


def test_a_problems_cases_run_one_after_another_on_one_worker(tmp_path):
    # interleaved as a suite lists them: seed 0 and seed 1 on two backends
    cases = [_case("torch", 0), _case("torch", 1), _case("xpu", 0), _case("xpu", 1)]
    _, seen = _run(tmp_path, cases)
    assert seen == [cases[0].case_id, cases[2].case_id, cases[1].case_id, cases[3].case_id]


def test_a_workers_start_is_not_its_first_cases_time(tmp_path, helpers_importable):
    journal = Journal(tmp_path, "run.smoke")
    config = RunConfig("cpu", 1, 3.0, ["claims"], ["slow_to_import"], "run", XfailList([]))
    run_isolated([_case("torch")], config, journal)  # the import alone takes 4 s
    journal.finish()
    assert set(load(tmp_path)["status"]) == {"pass"}
