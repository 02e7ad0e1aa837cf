"""--mps on a GPU (tools/gpu_ci.sh runs this file): the run's own MPS daemon, the workers
joining it, and a real fatal fault (a device-side assert) among correct cases. Under MPS such
a fault reaches every client on the GPU; the correct cases must still read as passed, their
failure under MPS run once more outside it (runner.run_isolated). Skipped without a GPU or
without nvidia-cuda-mps-control."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from moecert.conformance.harness.mps import CONTROL
from moecert.reports import load

HELPERS = Path(__file__).parents[1] / "helpers"

pytestmark = [
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.skipif(shutil.which(CONTROL) is None, reason=f"needs {CONTROL} (MPS)"),
]


def test_a_fault_under_mps_costs_only_the_faulting_cases(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(HELPERS), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [sys.executable, "-m", "moecert.conformance.cli", "run", "--suite", "smoke",
         "--device", "cuda", "-n", "6", "--mps", "--import", "misbehaving_backends",
         "--backend", "torch", "--backend", "test-gpu-fault", "--scheme", "bf16",
         "--check", "accuracy", "--timeout", "120",
         "-k", "not M0.",  # no rows: its forward is never called, so it cannot fault
         "--results", str(tmp_path / "out")],
        capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "sharing each GPU through MPS" in proc.stderr
    assert "started no server" not in proc.stderr  # the workers did join the daemon
    rows = load(tmp_path / "out")
    by = rows.groupby("backend", observed=True)
    torch_rows = by.get_group("torch")
    assert set(torch_rows["status"]) == {"pass"}, torch_rows[["case_id", "status", "message"]]
    faulting = by.get_group("test-gpu-fault")
    assert "pass" not in set(faulting["status"])
    assert faulting["retried"].str.contains("under MPS").all()  # run again outside it
    retried = torch_rows["retried"].fillna("")
    print(f"{retried.str.len().gt(0).sum()} of {len(torch_rows)} correct rows failed under "
          "MPS beside the fault and passed outside it")
