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
