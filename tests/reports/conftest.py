"""Synthetic result rows with known properties, written as real results files (the
`synthetic` fixture)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from moecert.reports.schema import threshold_columns
from moecert.reports.store import _frame, write_parquet

THRESHOLDS = {"rel_fro": 4e-3, "max_abs_scaled": 8e-3, "mismatch_frac": 1e-3,
              "max_expert_rel_fro": 5e-3, "cosine": 0.9999, "min_row_cosine": 0.999,
              "norm_ratio": (0.99, 1.01)}
# Metrics of a healthy accuracy row: every one at 1/4 of its threshold or less.
HEALTHY = {"nonfinite": 0.0, "max_abs": 1e-3, "max_abs_scaled": 1e-3, "rel_fro": 1e-3,
           "cosine": 0.99999, "min_row_cosine": 0.9999, "norm_ratio": 1.001,
           "mismatch_frac": 1e-4, "max_expert_rel_fro": 1e-3}


def case_rows(name: str, backend: str = "torch", scheme: str = "fp16", status: str = "pass",
              claimed: bool = True, run: str = "run-a", used: float = 0.25,
              message: str = "against the float64 reference", kernel_s=None, **metrics):
    """A case's claims and accuracy rows; `status` and the metrics go to the accuracy row."""
    case_id = f"{backend}/{scheme}/{name}/s0"
    common = {"run_id": run, "suite": "smoke", "case_id": case_id, "backend": backend,
              "scheme": scheme, "claimed": claimed, "device": "cpu",
              "finished_at": "2026-01-01T00:00:00+00:00",
              "case_json": json.dumps({"backend": backend, "scheme": scheme, "name": name})}
    claims = {**common, "check": "claims", "status": "pass" if claimed else "unsupported",
              "message": "claimed" if claimed else "not claimed: no fp16 here",
              "duration_s": 0.01}
    accuracy = {**common, "check": "accuracy", "status": status, "message": message,
                "tolerance": f"{scheme}/*/*/*/*", **threshold_columns(THRESHOLDS),
                **HEALTHY, **metrics, "used": used, "duration_s": 0.5,
                "kernel_s": kernel_s}
    return [claims, accuracy]


def write(path, rows):
    """Rows as a Parquet results file at `path` (a folder gets `<run>.smoke.parquet`)."""
    frame = _frame([r for rs in rows for r in rs] if rows and isinstance(rows[0], list)
                   else rows)
    if path.suffix != ".parquet":
        path.mkdir(parents=True, exist_ok=True)
        path = path / f"{frame['run_id'].iloc[0]}.smoke.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_parquet(frame, path)


@pytest.fixture
def synthetic():
    """case_rows and write, for the tests of this folder."""
    return SimpleNamespace(case_rows=case_rows, write=write, THRESHOLDS=THRESHOLDS)
