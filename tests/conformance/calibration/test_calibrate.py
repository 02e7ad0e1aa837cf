"""`moecert calibrate`: the summary arithmetic, and a real run of the torch backend."""

from __future__ import annotations

import argparse
import math

import pandas as pd
import pytest
from moecert.conformance.calibration.calibrate import (
    error_form,
    round_up_125,
    summarize,
    threshold_form,
)
from moecert.conformance.cli import calibrate_command
from moecert.conformance.harness import execute
from moecert.reports.schema import threshold_columns


@pytest.mark.parametrize("x, expected", [
    (1.13e-2, 2e-2), (2e-3, 2e-3), (2.1e-3, 5e-3), (5.01e-3, 1e-2), (7e-4, 1e-3), (1.0, 1.0),
    (0.0, 0.0), (math.inf, math.inf),
])
def test_round_up_125(x, expected):
    assert round_up_125(x) == pytest.approx(expected)


def test_error_and_threshold_forms():
    assert error_form("rel_fro", 3e-3) == 3e-3
    assert error_form("cosine", 0.999) == pytest.approx(1e-3)
    assert error_form("norm_ratio", 0.995) == pytest.approx(5e-3)
    assert error_form("norm_ratio", 1.002) == pytest.approx(2e-3)
    assert threshold_form("min_row_cosine", 0.9995) == pytest.approx(5e-4)
    assert threshold_form("norm_ratio", [0.99, 1.02]) == pytest.approx(1e-2)  # the nearer edge


def row(case_id, status="pass", tolerance="e/*/*/*/*", **metrics):
    thresholds = {"rel_fro": 4e-3, "cosine": 0.999, "norm_ratio": [0.99, 1.01]}
    return {"case_id": case_id, "check": "accuracy", "status": status, "tolerance": tolerance,
            **threshold_columns(thresholds), "rel_fro": 1e-3, "cosine": 0.9999,
            "norm_ratio": 1.0, **metrics}


def test_summarize_per_entry_and_metric():
    rows = [row(f"c{i}", rel_fro=(i + 1) * 1e-3) for i in range(3)]
    rows.append(row("bad", status="fail", rel_fro=math.nan, cosine=math.nan, norm_ratio=math.nan))
    rows.append(row("other", tolerance="f/*/*/*/*", norm_ratio=0.995))
    rows.append({"case_id": "skipped", "check": "accuracy", "status": "unsupported"})
    summary = {(r["tolerance"], r["metric"]): r for r in summarize(rows, safety=2.0)}
    assert set(summary) == {(e, m) for e in ("e/*/*/*/*", "f/*/*/*/*")
                            for m in ("rel_fro", "cosine", "norm_ratio")}
    rel = summary["e/*/*/*/*", "rel_fro"]
    assert (rel["rows"], rel["failed"]) == (4, 1)  # the NaN row counts, its metrics do not
    assert rel["median"] == pytest.approx(2e-3) and rel["max"] == pytest.approx(3e-3)
    assert rel["p95"] == pytest.approx(2.9e-3)
    assert rel["used"] == pytest.approx(0.75) and rel["worst_case"] == "c2"
    assert rel["suggested"] == pytest.approx(1e-2)  # 2 x 3e-3 = 6e-3, up to the next step
    band = summary["f/*/*/*/*", "norm_ratio"]
    assert band["max"] == pytest.approx(5e-3) and band["used"] == pytest.approx(0.5)


def parse(*argv):
    parser = argparse.ArgumentParser()
    calibrate_command.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_defaults():
    """No --device: resolved in main to every subcommand's default (cuda if present)."""
    args = parse()
    assert (args.suite, args.seeds, args.device, args.backend, args.out) == \
        ("smoke", 8, None, [], None)


def test_torch_backend_over_seeds(tmp_path, monkeypatch, capsys):
    seen = []

    def recording(case, device="cpu", checks=None, **kw):
        seen.append(case)
        return real(case, device, checks, **kw)

    real = execute.run_case
    monkeypatch.setattr(execute, "run_case", recording)
    out = tmp_path / "summary.csv"
    args = parse("--backend", "torch", "--scheme", "fp16", "--scheme", "int8-w8a8",
                 "--seeds", "2", "--out", str(out))
    assert calibrate_command.main(args) == 0
    assert {c.seed for c in seen} == {0, 1} and {c.backend for c in seen} == {"torch"}
    assert {c.scheme for c in seen} == {"fp16", "int8-w8a8"}
    text = capsys.readouterr().out
    for entry in ("*/fp16/*/*/*", "int8-w8a8[dynamic-token]/*/*/*/*"):
        assert entry in text
    frame = pd.read_csv(out)
    assert {"tolerance", "metric", "median", "p95", "max", "threshold", "suggested",
            "used", "worst_case"} <= set(frame.columns)
    assert (frame["used"] < 1).all() and (frame["failed"] == 0).all()


def test_a_failing_row_makes_the_exit_status_1(monkeypatch, capsys):
    monkeypatch.setattr(execute, "run_case", lambda case, device, checks: [
        row(case.case_id, status="fail", rel_fro=1.0)])
    args = parse("--backend", "torch", "--scheme", "bf16", "--seeds", "1")
    assert calibrate_command.main(args) == 1
    text = capsys.readouterr().out
    assert "e/*/*/*/*" in text and "fail" in text
