"""`moecert calibrate`: run backends over many seeds and compare the error they show with the
tolerance table, entry by entry.

For each tolerance entry the accuracy rows fell under, and each metric the entry gates, it
prints the distribution of the metric's error form (median, p95, max over rows), the entry's
threshold, a suggested threshold, the share of the tolerance used (max / threshold;
above 1 fails) and the case
that showed the max (its id reruns it). Error
forms put every metric on one scale where larger is worse and 0 is exact:

    ceilings (rel_fro, max_abs_scaled, mismatch_frac, max_expert_rel_fro)   the metric
    floors (cosine, min_row_cosine)                                          1 - metric
    the band (norm_ratio)                                                    |metric - 1|

Suggested threshold: SAFETY x the measured max, rounded up to a 1-2-5 step (1e-3, 2e-3,
5e-3, 1e-2, ...), in the error form (a floor of 1 - that, a band of 1 -+ that). Run it when a
backend, the reference or the table changes: a `used` that creeps toward 1 shows drift before
anything fails. `--results PATH` summarizes rows a run already wrote (`moecert run`, the pytest
plugin) instead of running cases; `summarize` takes loaded rows (a DataFrame) as well.
"""

from __future__ import annotations

import math
import sys
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

from moecert.reports.schema import (
    BANDS,
    FAILING,
    FLOORS,
    GATED,
    error_form,
    threshold_form,
    thresholds_of,
)

from ..harness.option_values import UsageError, check_backends

SAFETY = 2.0


def loaded_rows(path: str) -> list[dict]:
    from moecert.reports import ResultsError, load

    try:
        frame = load(path)
    except (OSError, ResultsError) as e:
        raise UsageError(f"--results: {e}") from None
    frame = frame[frame["check"] == "accuracy"]
    if frame.empty:
        raise UsageError(f"--results {path}: no accuracy rows")
    return _records(frame)


def run_seeds(args) -> list[dict]:
    """The accuracy rows of args.suite's cases (args.backend, args.scheme) over seeds
    0..args.seeds-1 on args.device."""
    from ..harness.execute import run_case
    from ..harness.suites import build_suite

    cases = build_suite(args.suite, check_backends(args.backend) or None, args.scheme or None)
    runs = [replace(case, seed=seed) for case in cases for seed in range(args.seeds)]
    rows = []
    for i, case in enumerate(runs, 1):
        _progress(f"[{i}/{len(runs)}] {case.case_id}")
        rows.extend(run_case(case, args.device, checks=("accuracy",)))
    _progress("")
    return rows


# --- pure functions: rows in, summary out ----------------------------------------------------
# error_form and threshold_form (reports/schema.py) put every metric on one scale.

def round_up_125(x: float) -> float:
    """The smallest 1, 2 or 5 times a power of ten that is >= x (0 stays 0)."""
    if x <= 0 or not math.isfinite(x):
        return x if x <= 0 else math.inf
    exponent = math.floor(math.log10(x))
    for step in (1, 2, 5, 10):
        candidate = step * 10.0 ** exponent
        if candidate >= x * (1 - 1e-12):
            return float(f"{candidate:.0e}")
    raise AssertionError("unreachable")


def summarize(rows, safety: float = SAFETY) -> list[dict]:
    """One record per (tolerance entry, metric) over the accuracy rows that carry a verdict.
    `rows`: dicts, or a DataFrame of loaded results (rows without a tolerance entry, NaN or
    None, are not judged by one and are left out)."""
    by_entry: dict[str, list[dict]] = defaultdict(list)
    for row in _records(rows):
        if row.get("check") == "accuracy" and isinstance(row.get("tolerance"), str) \
                and row["tolerance"]:
            by_entry[row["tolerance"]].append(row)
    summary = []
    for entry in sorted(by_entry):
        group = by_entry[entry]
        thresholds = thresholds_of(group[0])
        failed = sum(r["status"] in FAILING for r in group)
        for metric in GATED:
            if metric not in thresholds:
                continue
            measured = [(error_form(metric, r[metric]), r["case_id"]) for r in group
                        if _finite(r.get(metric))]
            if not measured:
                continue
            values = [v for v, _ in measured]
            limit = threshold_form(metric, thresholds[metric])
            worst, worst_case = max(measured)
            summary.append({
                "tolerance": entry, "metric": metric, "rows": len(group),
                "failed": failed, "median": _quantile(values, 0.5),
                "p95": _quantile(values, 0.95), "max": worst, "threshold": limit,
                "suggested": round_up_125(safety * worst),
                "used": worst / limit if limit > 0 else (0.0 if worst <= 0 else math.inf),
                "worst_case": worst_case,
            })
    return summary


def _records(rows) -> list[dict]:
    """Rows as dicts, a DataFrame's missing values as None."""
    if hasattr(rows, "to_dict"):
        frame = rows.astype(object).where(rows.notna(), None)
        return frame.to_dict("records")
    return list(rows)


def _finite(v) -> bool:
    return isinstance(v, int | float) and not math.isnan(v)


def _quantile(values: list[float], q: float) -> float:
    """Linear-interpolated quantile (numpy's default rule)."""
    s = sorted(values)
    pos = q * (len(s) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def format_summary(summary: list[dict], rows: list[dict] = ()) -> str:
    statuses: dict[str, int] = defaultdict(int)
    for row in rows:
        statuses[row["status"]] += 1
    lines = []
    if rows:
        lines.append("accuracy rows: " + ", ".join(f"{n} {s}" for s, n in sorted(statuses.items())))
    entry = None
    for rec in summary:
        if rec["tolerance"] != entry:
            entry = rec["tolerance"]
            lines += ["", f"{entry}  ({rec['rows']} rows, {rec['failed']} failed)",
                      f"  {'metric':<20}{'median':>10}{'p95':>10}{'max':>10}{'threshold':>11}"
                      f"{'suggested':>11}{'used':>10}  worst case"]
        name = rec["metric"] + (" (1-x)" if rec["metric"] in FLOORS else
                                " |x-1|" if rec["metric"] in BANDS else "")
        lines.append(f"  {name:<20}{rec['median']:>10.2e}{rec['p95']:>10.2e}{rec['max']:>10.2e}"
                     f"{rec['threshold']:>11.2e}{rec['suggested']:>11.0e}"
                     f"{rec['used']:>10.2f}  {rec['worst_case'] if rec['max'] > 0 else ''}")
    return "\n".join(lines)


def write_summary(summary: list[dict], path: str) -> None:
    import pandas as pd

    frame = pd.DataFrame(summary)
    if Path(path).suffix == ".parquet":
        frame.to_parquet(path, index=False)
    else:
        frame.to_csv(path, index=False)


def _progress(text: str) -> None:
    if sys.stderr.isatty():
        sys.stderr.write(f"\r\x1b[K{text[:120]}")
        sys.stderr.flush()
