"""Running cases in this process: one row per (case, check), SPEC section 4.

The runner (conformance/harness/runner.py) calls this inside worker processes, so that a backend
that kills its process or hangs costs one case; tests and `moecert calibrate` call it directly.
"""

from __future__ import annotations

import contextlib
import datetime
import math
import os
import time
import uuid
from collections.abc import Iterable

import torch
from moecert.reports.schema import METRICS, problem_id, threshold_columns

from .cases import Case
from .checks import Outcome, checks_for, run_check
from .context import CaseRun, SharedSteps, exception_text
from .model_layers import source_columns
from .numerics import describe as describe_numerics
from .provenance import environment, problem_columns


def run_case(case: Case, device: str = "cpu", checks: Iterable[str] | None = None,
             run_id: str = "", table=None, shared: SharedSteps | None = None) -> list[dict]:
    """Every check of `case` (or those named in `checks`) as result rows; `shared` keeps the
    steps the problem's cases on other backends can reuse."""
    with triton_for(device):
        return list(iter_case(case, device, checks, run_id, table, shared=shared))


def iter_case(case: Case, device: str, checks=None, run_id: str = "", table=None,
              on_start=None, shared: SharedSteps | None = None):
    """Yield the case's rows one check at a time; `on_start(check)` is called before each
    (the worker reports it, so a crash is pinned on the check in flight)."""
    try:
        run = CaseRun(case, device, table, shared)
        names = checks_for(run, tuple(checks) if checks else None)
    except Exception as e:
        yield result_row(case, device, run_id, "setup",
                         Outcome("error", exception_text(e)), None, 0.0)
        return
    cuda = torch.device(device).type == "cuda"
    for name in names:
        if on_start:
            on_start(name)
        if cuda:
            with contextlib.suppress(RuntimeError):  # a poisoned context: the check says so
                torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        outcome = run_check(name, run)
        row = result_row(case, device, run_id, name, outcome, run, time.perf_counter() - start)
        if cuda:
            with contextlib.suppress(RuntimeError):
                row["device_peak_bytes"] = float(torch.cuda.max_memory_reserved())
        yield row


def run_cases(cases: Iterable[Case], device: str = "cpu", checks=None, run_id: str = ""
              ) -> list[dict]:
    run_id = run_id or new_run_id()
    rows: list[dict] = []
    shared = SharedSteps()
    for case in by_problem(cases):
        rows.extend(run_case(case, device, checks, run_id, shared=shared))
    return rows


def problem_groups(cases: Iterable[Case]) -> list[list[Case]]:
    """`cases` grouped by problem (the case without its backend), groups in order of first
    appearance: a problem's cases run one after another and share its steps."""
    groups: dict[str, list[Case]] = {}
    for case in cases:
        groups.setdefault(problem_id(case.case_id), []).append(case)
    return list(groups.values())


def by_problem(cases: Iterable[Case]) -> list[Case]:
    return [case for group in problem_groups(cases) for case in group]


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:6]


@contextlib.contextmanager
def triton_for(device: str):
    """On a CPU the triton backend runs through the interpreter (defined on first use)."""
    if torch.device(device).type != "cpu" or os.environ.get("TRITON_INTERPRET") == "1":
        yield
        return
    try:
        from moecert.kernels.triton_moe.interpret import load_interpreted_kernels
        load_interpreted_kernels()
    except ImportError:  # no triton here: the backend says so in its own rows
        yield
        return
    os.environ["TRITON_INTERPRET"] = "1"
    try:
        yield
    finally:
        os.environ.pop("TRITON_INTERPRET", None)


def available_here():
    """The one notion of "available here" for what names backends without running a case
    (`moecert list`, `moecert inspect`), as `moecert run` judges it on its default device:
    cuda where torch sees a GPU, else the CPU, where triton runs through the interpreter."""
    return triton_for("cuda" if torch.cuda.is_available() else "cpu")


def result_row(case: Case, device: str, run_id: str, check: str, outcome: Outcome,
         run: CaseRun | None, duration: float) -> dict:
    row = {"run_id": run_id, "case_id": case.case_id, "problem_id": problem_id(case.case_id),
           "backend": case.backend,
           "scheme": case.scheme, "config": "", **problem_columns(case),
           **environment(device, case.backend),
           "backend_detail": run.backend_detail if run is not None else "",
           **source_columns(case.source, run.loaded_layer() if run is not None else None),
           **({"model": case.model} if case.model else {}),  # a suite's model-size case
           "numerics": describe_numerics(run.numerics) if run is not None else "",
           "check": check, "status": outcome.status,
           "message": outcome.message, "duration_s": duration, "case_json": case.to_json(),
           "finished_at": datetime.datetime.now(datetime.UTC).isoformat()}
    row["claimed"] = None  # unknown when the case could not be set up
    if run is not None:
        row["config"] = run.variant.describe()
        with contextlib.suppress(Exception):  # a supports() that raises is the claims row's error
            row["claimed"] = run.claim is None
    for key in METRICS:
        row[key] = float(outcome.metrics.get(key, math.nan))
    if outcome.profile:
        row["error_profile"] = outcome.profile
    row["regime"] = outcome.regime if outcome.regime is not None else (
        run.regime if run is not None else "")
    v = outcome.verdict
    if v is not None:
        tol = run.tolerance if outcome.regime is None else run.tolerance_for(outcome.regime)
        row["tolerance"] = tol.key
        row.update(threshold_columns(v.thresholds))
        row["used"] = float(v.used)
    return row
