"""`moecert run`'s own summary shows the failures as `moecert report` does: one line per bug
(reports/groups.py), each with one example case and its rerun command, not the raw rows
(issue 40)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

HELPERS = Path(__file__).parents[1] / "helpers"


def _cli(args, cwd):
    path = os.pathsep.join(p for p in (str(HELPERS), os.environ.get("PYTHONPATH")) if p)
    return subprocess.run([sys.executable, "-m", "moecert.conformance.cli", *args],
                          capture_output=True, text=True, cwd=cwd, timeout=600,
                          env=dict(os.environ, PYTHONPATH=path))


def test_run_summary_lists_the_groups_report_prints(tmp_path):
    run = _cli(["run", "--backend", "test-nan", "--import", "misbehaving_backends", "--scheme",
                "bf16", "--check", "accuracy", "--check", "fully_written", "--results", "out",
                "-n", "1"], tmp_path)
    assert run.returncode == 1, run.stdout[-2000:] + run.stderr[-2000:]
    failed = int(re.search(r"not green: (\d+) case\(s\) failed", run.stdout)[1])
    assert failed > 1
    heading = re.search(rf"^{failed} failing case\(s\) in (\d+) group\(s\), one line per bug",
                        run.stdout, re.M)
    assert heading, run.stdout
    report = _cli(["report", "out"], tmp_path)
    groups = report.stdout.split("one line per bug (backend, check, how it failed):\n")[1]
    headlines = [line.strip() for line in groups.split("\n\n")[0].splitlines()]
    assert len(headlines) == int(heading[1]) >= 1
    for headline in headlines:  # the same lines, in the same order
        assert f"\n  {headline}\n    e.g. " in run.stdout
    assert headlines[0].startswith(f"test-nan: accuracy fails in {failed} case(s) of 1 scheme")
    # one example and one rerun command per group, not one per failing row
    assert run.stdout.count("rerun: ") == len(headlines)
