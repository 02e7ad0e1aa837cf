"""tools/run_breakdown.py: where a run's time went, from its rows."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from moecert.conformance.harness.cases import Case
from moecert.conformance.harness.execute import run_cases
from moecert.reference import MoEProblem
from moecert.reports.store import Journal

TOOL = Path(__file__).parents[2] / "tools" / "run_breakdown.py"


def test_it_sums_check_time_and_counts_what_ran_at_once(tmp_path):
    P = MoEProblem(M=3, K=64, N=32, E=4, topk=2)
    rows = run_cases([Case("torch", "bf16", P, seed=s, depth="light") for s in range(2)],
                     checks=("claims", "accuracy"))
    journal = Journal(tmp_path, "run.smoke")
    journal.append(rows)
    journal.finish()
    out = subprocess.run([sys.executable, str(TOOL), str(tmp_path), "--workers", "1"],
                         capture_output=True, text=True, check=True).stdout
    assert out.startswith("2 cases (0 model-size), 4 rows")
    total = sum(r["duration_s"] for r in rows)
    assert f"check time {total:.0f} s" in out
    table = out.split("check time (s) by check and backend:")[1]
    assert "claims" in table and "accuracy" in table and "torch" in table
    assert "of 1 workers" in out and "cases running at once: mean" in out


def test_it_prints_the_memory_model_beside_the_measured_peak(tmp_path):
    """Issue 43: the memory model's numbers beside what was measured. A model-size case's
    rows with a GPU peak planted: the breakdown prints the budget schedule.device_need gives
    that layer and the ratio of the peak to it."""
    from moecert.conformance.harness.schedule import device_need

    P = MoEProblem(M=3, K=64, N=32, E=4, topk=2)
    rows = run_cases([Case("torch", "gptq-int4", P, depth="light")], checks=("claims",))
    big = Case("torch", "gptq-int4", MoEProblem(M=16, K=7168, N=2048, E=256, topk=8))
    peak = 0.75 * device_need(big)
    rows = [{**r, "E": 256, "K": 7168, "N": 2048, "case_json": big.to_json(),
             "device_peak_bytes": peak} for r in rows]
    journal = Journal(tmp_path, "run.ci")
    journal.append(rows)
    journal.finish()
    out = subprocess.run([sys.executable, str(TOOL), str(tmp_path)],
                         capture_output=True, text=True, check=True).stdout
    section = out.split("memory model (schedule.device_need, GiB) beside the measured peak")[1]
    assert f"{device_need(big) / 2**30:.2f}" in section and f"{peak / 2**30:.2f}" in section
    assert "highest peak / need: 0.75" in section
