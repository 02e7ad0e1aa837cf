"""`moecert run` and the pytest plugin end to end, in subprocesses as a user runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from moecert.reports import COLUMNS, load

HELPERS = Path(__file__).parent / "helpers"


def _run(args, cwd):
    env = dict(os.environ, PYTHONPATH=str(HELPERS))
    return subprocess.run([sys.executable, "-m", "moecert.conformance.cli", *args],
                          capture_output=True, text=True, cwd=cwd, env=env, timeout=600)


def test_run_writes_parquet_rows_and_exits_zero(tmp_path):
    proc = _run(["run", "--suite", "smoke", "--backend", "torch", "--scheme", "bf16",
                 "--results", "out", "-n", "2"], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    frame = load(tmp_path / "out")
    assert list(frame.columns[:len(COLUMNS)]) == list(COLUMNS)
    assert set(frame["status"]) <= {"pass", "skip", "unsupported"}
    assert {"accuracy", "reload", "exact", "claims", "oracle"} <= set(frame["check"])
    assert frame["case_id"].nunique() > 10
    assert list((tmp_path / "out").glob("*.parquet")) and not list(
        (tmp_path / "out").glob("*.jsonl"))
    assert "torch" in proc.stdout


def test_a_failure_exits_one_and_prints_the_rerun_command(tmp_path):
    proc = _run(["run", "--backend", "test-nan", "--scheme", "bf16", "--results", "out",
                 "--import", "misbehaving_backends", "--check", "accuracy"], tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    line = next(x for x in proc.stdout.splitlines() if "rerun:" in x)
    case_json = line.split("--case ", 1)[1].strip("'")
    rerun = _run(["run", "--backend", "test-nan", "--import", "misbehaving_backends",
                  "--case", case_json, "--results", "again"], tmp_path)
    assert rerun.returncode == 1
    from moecert.conformance.cases import Case
    wanted = Case.from_json(case_json).case_id
    assert set(load(tmp_path / "again")["case_id"]) == {wanted}
    assert wanted in set(load(tmp_path / "out").query("status == 'fail'")["case_id"])


def test_resume_runs_only_what_is_left(tmp_path):
    first = _run(["run", "--backend", "torch", "--scheme", "fp16", "--results", "out",
                  "--check", "accuracy"], tmp_path)
    assert first.returncode == 0
    (done,) = list((tmp_path / "out").glob("*.parquet"))
    rows = load(done)
    keep = rows.iloc[: len(rows) // 2]
    journal = tmp_path / "out" / (done.stem + ".jsonl")
    journal.write_text("".join(json.dumps(r) + "\n" for r in keep.to_dict("records")))
    done.unlink()
    second = _run(["run", "--backend", "torch", "--scheme", "fp16", "--results", "out",
                   "--check", "accuracy", "--resume"], tmp_path)
    assert second.returncode == 0, second.stderr
    assert f"({len(keep)} already done)" in second.stderr
    merged = load(tmp_path / "out")
    assert sorted(merged["case_id"]) == sorted(rows["case_id"])


@pytest.mark.parametrize("backend, outcome", [("torch", "passed"), ("test-nan", "failed")])
def test_the_pytest_plugin_runs_the_suite(tmp_path, backend, outcome):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        filter(None, [str(HELPERS), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--pyargs", "moecert.conformance", "-q",
         "-p", "no:cacheprovider", "--moecert-backend", backend, "--moecert-scheme", "bf16",
         "--moecert-check", "accuracy", "--moecert-results", "rows", "--moecert-import",
         "misbehaving_backends", "-k", "M1.K128 or M17.K128", "--rootdir",
         str(tmp_path), "-c", os.devnull],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600)
    tail = proc.stdout.strip().splitlines()[-1]
    assert outcome in tail, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (proc.returncode == 0) == (outcome == "passed")
    assert len(load(tmp_path / "rows")) > 0
