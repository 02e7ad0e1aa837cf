"""`moecert report RESULTS [--baseline BASE] [--md FILE] [--html FILE] [--junit FILE]`: the
summary of a run on the terminal, and its Markdown, HTML and JUnit renderings.

Exit codes a CI job can gate on: 0 nothing regressed, 1 a regression (with --baseline: a new
failure, a case gone that the suite still has, error growth, a slower kernel in `moecert bench`
rows, --slower-than setting the ratio; without: any failing case), 2 bad input (a path that
does not exist, a file of another schema version, a truncated or corrupt file, no rows), one
line on stderr.

A case in the baseline but not in RESULTS is a regression unless the suite no longer has it:
the suite is the one the baseline's rows name, built for their backends (a backend that is not
registered here, e.g. one a module registers: give that module with --import).
"""

from __future__ import annotations

import shlex
from pathlib import Path

from moecert.reports import ResultsError, load, render
from moecert.reports.frames import DEFAULT_TIME_NOISE, MIN_TIME_NOISE
from moecert.reports.report import Report

from ..harness.imports import import_modules
from ..harness.option_values import (
    UsageError,
    output_file,
    positive_float,
)
from .arguments import add_import


def add_arguments(p) -> None:
    p.add_argument("results", metavar="RESULTS", help="results file or folder (its newest run)")
    p.add_argument("--baseline", metavar="BASE",
                   help="results to compare with, matched on case id (file or folder)")
    p.add_argument("--run", default=None, metavar="ID",
                   help="the run of RESULTS to report (default: the newest; 'all': every run)")
    p.add_argument("--slower-than", type=_ratio, default=None, metavar="X",
                   help="a kernel time (kernel_s) more than X times the baseline's is a "
                        "regression (default: the baseline's own run-to-run noise, at least "
                        f"{MIN_TIME_NOISE}; {DEFAULT_TIME_NOISE} when the baseline is one run)")
    p.add_argument("--md", metavar="FILE", type=output_file,
                   help="write Markdown (a CI job summary)")
    p.add_argument("--html", metavar="FILE", type=output_file,
                   help="write a self-contained HTML page")
    p.add_argument("--junit", metavar="FILE", type=output_file,
                   help="write JUnit XML (a failing testcase named for the verdict when the "
                        "run is not green)")
    add_import(p)


def main(args) -> int:
    import_modules(args.imports)
    current = _load(args.results, "RESULTS", args.run)
    baseline = _load(args.baseline, "--baseline") if args.baseline else None
    report = Report.build(current, baseline,
                          suite_ids(baseline) if baseline is not None else None,
                          rerun_prefix=_rerun_prefix(current, args.imports),
                          slower_than=args.slower_than,
                          completion=_completion(args.results, args.run))
    print(runs_line(args.results, args.run, current))
    print(render.terminal(report))
    for path, text in ((args.md, lambda: render.markdown(report)),
                       (args.html, lambda: render.html(report)),
                       (args.junit, lambda: render.junit(current, report.rerun_prefix,
                                                         verdict=report.run_verdict()))):
        if path:
            Path(path).write_text(text(), encoding="utf-8")
    return report.exit_code


_RUNS_SHOWN = 5


def runs_line(path: str, run: str | None, rows) -> str:
    """Which run of RESULTS the report shows, and the folder's other runs (newest first)."""
    from moecert.reports.store import result_files

    shown = ", ".join(sorted(rows["run_id"].dropna().unique()))
    if not Path(path).is_dir():
        return f"report of {path} (run {shown})"
    runs = list(result_files(path))
    if run is None and len(runs) > 1:
        listed = ", ".join(runs[:_RUNS_SHOWN]) + (
            f" and {len(runs) - _RUNS_SHOWN} more" if len(runs) > _RUNS_SHOWN else "")
        return (f"report of run {shown}, the newest of {len(runs)} runs in {path} ({listed}); "
                "--run ID reports another, --run all every one")
    return f"report of run {shown} in {path}"


def _ratio(text: str) -> float:
    value = positive_float(text, "ratio")
    if value <= 1:
        raise UsageError(f"expected a ratio above 1 (1.25: 25% slower), got {text!r}")
    return value


def _load(path: str, what: str, run: str | None = None):
    try:
        frame = load(path, run)
    except (OSError, KeyError, ResultsError) as e:
        message = e.args[0] if isinstance(e, KeyError) else str(e)
        raise UsageError(f"{what} {path}: {message}") from None
    if frame.empty:
        got = _completion(path, run)
        why = "" if got is None or got.complete else (
            f" (the run {got.words()}" + (f"; resume with: {got.resume[0]}" if got.resume
                                          else "") + ")")
        raise UsageError(f"{what} {path}: no result rows{why}")
    return frame


def _completion(path: str, run: str | None):
    """How far the reported run got (reports.store.completion: its plan and end)."""
    from moecert.reports.store import completion

    try:
        return completion(path, run)
    except (OSError, KeyError, ResultsError) as e:
        message = e.args[0] if isinstance(e, KeyError) else str(e)
        raise UsageError(f"RESULTS {path}: {message}") from None


def suite_ids(baseline) -> set[str] | None:
    """The case ids the suite of the baseline's rows holds today for the baseline's backends
    and schemes; None when the rows do not name one suite or a backend is not registered
    (then every case gone counts)."""
    from moecert.kernels import backend_names

    from ..harness.suites import SUITES, build_suite

    suites = set(baseline["suite"].dropna().unique())
    backends = sorted(map(str, baseline["backend"].dropna().unique()))
    if len(suites) != 1 or not suites <= set(SUITES) or not set(backends) <= set(backend_names()):
        return None
    schemes = sorted(map(str, baseline["scheme"].dropna().unique()))
    return {c.case_id for c in build_suite(suites.pop(), backends, schemes)}


def _rerun_prefix(rows, imports: list[str]) -> str | None:
    """`moecert run` on the rows' device, with the modules given here (None: from each row)."""
    if not imports:
        return None
    devices = rows["device"].dropna().unique()
    parts = ["moecert", "run", "--device", str(devices[0]) if len(devices) == 1 else "cpu"]
    for module in imports:
        parts += ["--import", module]
    return shlex.join(parts)

