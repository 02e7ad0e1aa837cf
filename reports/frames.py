"""The frames a maintainer reads, one call each, from loaded rows (`load`): the report's engine.
The renderers (reports/render.py) only format what these return.

    cases(frame)                  one row per case, worst first (status: STATUS_DTYPE)
    status_counts(frame)          cases per (backend, scheme) and status
    status_matrix(frame)          worst status per (backend, scheme) x check
    worst_used(frame)         per tolerance entry: the most of it used and by which case
    slowest(frame, n)             the n cases that took longest
    compare_runs(base, current)   what changed between two runs, matched on case id
    compare_backends(frame, a, b) two backends side by side on the same problems
    bench(frame)                  `moecert bench` rows: time, bandwidth, % of the floors

A case's status is its worst row's, except that a case its backend did not claim is
"unsupported" however its rows read (never counted as passed), as `moecert run` counts it.
"""

from __future__ import annotations

import math
import shlex

import pandas as pd

from .schema import (
    BENCH_CHECK,
    FAILING,
    GATED,
    STATUS_DTYPE,
    error_form,
    threshold_form,
    thresholds_of,
)

# --- comparing two runs ------------------------------------------------------------------------
# Kinds of change, most serious first. The first four are regressions (exit 1 in a report).
CHANGES = ("new_failure", "gone", "error_growth", "slower", "fixed", "new", "dropped")
REGRESSIONS = ("new_failure", "gone", "error_growth", "slower")
CHANGE_DTYPE = pd.CategoricalDtype(CHANGES, ordered=True)
CHANGE_COLUMNS = ("change", "case_id", "backend", "scheme", "check", "metric", "base",
                  "current", "detail")
# Error growth: a gated metric's error at least GROWTH times the baseline's, or the row's
# used crossing USED_WATCH from below. A metric whose error stays under GROWTH_FLOOR of
# its threshold is not counted: doubling an error of 1e-9 on a 1e-2 threshold is rounding
# noise (another device, another thread count), not drift.
GROWTH = 2.0
USED_WATCH = 0.8
GROWTH_FLOOR = 0.1
# Kernel time: slower when current / baseline exceeds the noise seen between the baseline's
# own repeated runs (its 95th percentile of max/min per case), at least MIN_TIME_NOISE; with one
# baseline run, DEFAULT_TIME_NOISE; or a ratio the caller gives (`moecert report
# --slower-than`).
MIN_TIME_NOISE = 1.1
DEFAULT_TIME_NOISE = 1.25


def cases(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per case: its worst row's check, status and message, whether the backend
    claimed it, the most of a tolerance it used and summed times; worst cases first, then
    by case id."""
    if frame.empty:
        return pd.DataFrame({c: pd.Series(dtype=frame[c].dtype) for c in _CASE_COLUMNS
                             if c in frame}).assign(status=pd.Series(dtype=STATUS_DTYPE))
    worst = (frame.sort_values(["status", "case_id", "check"], kind="stable")
             .drop_duplicates("case_id").set_index("case_id"))
    by_case = frame.groupby("case_id", sort=False)
    claimed = by_case["claimed"].apply(lambda s: bool(s.fillna(False).any()))
    status = worst["status"].copy()
    status[(~claimed.reindex(status.index)) & status.isin(["pass", "skip"])] = "unsupported"
    out = worst.assign(status=status, claimed=claimed,
                       used=by_case["used"].max(),
                       duration_s=by_case["duration_s"].sum(min_count=1),
                       kernel_s=by_case["kernel_s"].sum(min_count=1))
    out = out.reset_index()[list(_CASE_COLUMNS)]
    return out.sort_values(["status", "case_id"], kind="stable").reset_index(drop=True)


_CASE_COLUMNS = ("case_id", "problem_id", "backend", "scheme", "status", "check", "claimed",
                 "used", "duration_s", "kernel_s", "device", "message", "case_json")


def failing(frame: pd.DataFrame) -> pd.DataFrame:
    """The failing rows (crash, timeout, error, fail), worst first."""
    bad = frame[frame["status"].isin(FAILING)]
    return bad.sort_values(["status", "case_id", "check"], kind="stable").reset_index(drop=True)


def status_counts(frame: pd.DataFrame) -> pd.DataFrame:
    """Cases per (backend, scheme) and status (every status a column, worst first)."""
    per_case = cases(frame)
    counts = pd.crosstab([per_case["backend"], per_case["scheme"]], per_case["status"],
                         dropna=False)
    counts = counts.reindex(columns=list(STATUS_DTYPE.categories), fill_value=0)
    counts.columns = pd.Index(list(counts.columns), name="status")
    return counts[counts.sum(axis=1) > 0]


def status_matrix(frame: pd.DataFrame) -> pd.DataFrame:
    """The worst status of each (backend, scheme) x check over its claimed cases (unclaimed
    ones count where they failed, or where the backend claimed none of the scheme's cases:
    a backend claiming 14 of 18 cases, all passing, shows pass, not unsupported)."""
    keys = ["backend", "scheme", "check"]
    everything = frame.groupby(keys, observed=True)["status"].min()
    judged = frame[frame["claimed"].fillna(False).astype(bool) | frame["status"].isin(FAILING)]
    worst = judged.groupby(keys, observed=True)["status"].min()
    return worst.combine_first(everything).astype(STATUS_DTYPE).unstack("check")


def worst_used(frame: pd.DataFrame) -> pd.DataFrame:
    """Per tolerance entry: rows judged, rows failed, the most of it used (1 = at the
    threshold), the metric and case that showed it; the tightest entries first."""
    judged = frame[frame["tolerance"].notna() & frame["used"].notna()]
    if judged.empty:
        return pd.DataFrame(columns=["tolerance", "rows", "failed", "used", "metric",
                                     "backend", "case_id"])
    top = judged.sort_values("used", ascending=False).drop_duplicates("tolerance")
    per_entry = judged.groupby("tolerance")
    out = top.assign(rows=top["tolerance"].map(per_entry.size()),
                     failed=top["tolerance"].map(
                         per_entry["status"].apply(lambda s: int(s.isin(FAILING).sum()))),
                     metric=top.apply(_tightest_metric, axis=1))
    out = out[["tolerance", "rows", "failed", "used", "metric", "backend", "case_id"]]
    return out.reset_index(drop=True)


def _tightest_metric(row) -> str | None:
    """The gated metric nearest its threshold in a row (the one its `used` came from)."""
    best, name = -1.0, None
    for metric, threshold in thresholds_of(row).items():
        h = _metric_used(metric, row[metric], threshold)
        if h is not None and h > best:
            best, name = h, metric
    return name


def _metric_used(metric, value, threshold) -> float | None:
    if value is None or pd.isna(value):
        return None
    limit = threshold_form(metric, threshold)
    err = error_form(metric, float(value))
    return err / limit if limit > 0 else (0.0 if err <= 0 else math.inf)


def slowest(frame: pd.DataFrame, n: int = 10) -> pd.DataFrame:
    """The `n` cases that took longest (their checks' durations summed)."""
    per_case = cases(frame).dropna(subset=["duration_s"])
    return (per_case.nlargest(n, "duration_s")
            [["case_id", "backend", "scheme", "status", "duration_s", "kernel_s"]]
            .reset_index(drop=True))


def compare_runs(base: pd.DataFrame, current: pd.DataFrame,
                 suite_ids: set[str] | None = None,
                 slower_than: float | None = None) -> pd.DataFrame:
    """What changed from `base` to `current`, matched on case id, one row per change (kinds
    in CHANGES, REGRESSIONS among them), the most serious first:

        new_failure   failing now, not before (or a new case that fails)
        gone          in the baseline, not in this run, though the suite still has it
        error_growth  a gated metric's error up GROWTH x or more, or used crossing
                      USED_WATCH from below (the metric column says which)
        slower        kernel time beyond the baseline's own run-to-run noise (or more than
                      `slower_than` times the baseline's)
        fixed         failing before, not now
        new           a case the baseline lacks (not failing)
        dropped       gone, and the suite no longer has it

    `suite_ids`: the ids the current suite holds for the baseline's backends; None when
    unknown, and then every case gone is a regression."""
    b, c = cases(base).set_index("case_id"), cases(current).set_index("case_id")
    changes = []

    def add(kind, case_id, side, **kw):
        changes.append({"change": kind, "case_id": case_id, "backend": side.at[case_id, "backend"],
                        "scheme": side.at[case_id, "scheme"], **kw})

    for case_id in c.index.difference(b.index):
        if c.at[case_id, "status"] in FAILING:
            add("new_failure", case_id, c, check=c.at[case_id, "check"], base="(new case)",
                current=c.at[case_id, "status"], detail=_first_line(c.at[case_id, "message"]))
        else:
            add("new", case_id, c, current=c.at[case_id, "status"])
    for case_id in b.index.difference(c.index):
        dropped = suite_ids is not None and case_id not in suite_ids
        add("dropped" if dropped else "gone", case_id, b, base=b.at[case_id, "status"],
            detail="the suite no longer has it" if dropped else "missing from this run")
    both = b.index.intersection(c.index)
    was_bad, is_bad = b.loc[both, "status"].isin(FAILING), c.loc[both, "status"].isin(FAILING)
    for case_id in both[is_bad & ~was_bad]:
        add("new_failure", case_id, c, check=c.at[case_id, "check"],
            base=b.at[case_id, "status"], current=c.at[case_id, "status"],
            detail=_first_line(c.at[case_id, "message"]))
    for case_id in both[was_bad & ~is_bad]:
        add("fixed", case_id, c, check=b.at[case_id, "check"], base=b.at[case_id, "status"],
            current=c.at[case_id, "status"])
    steady = set(both[~is_bad])
    changes += [ch for ch in _error_growth(base, current) if ch["case_id"] in steady]
    changes += _slower(base, current, slower_than)
    out = pd.DataFrame(changes, columns=list(CHANGE_COLUMNS))
    out["change"] = out["change"].astype(CHANGE_DTYPE)
    for col in ("base", "current"):
        out[col] = out[col].astype("object").map(_text, na_action="ignore")
    return out.sort_values(["change", "case_id"], kind="stable").reset_index(drop=True)


def regressions(diff: pd.DataFrame) -> pd.DataFrame:
    """The changes of a `compare_runs` frame that are regressions."""
    return diff[diff["change"].isin(REGRESSIONS)].reset_index(drop=True)


def _error_growth(base: pd.DataFrame, current: pd.DataFrame) -> list[dict]:
    keys = ["case_id", "check"]
    cols = [*keys, "backend", "scheme", "used", *GATED,
            *(c for c in current.columns if c.startswith("thr_"))]
    pair = current[cols].merge(base[[*keys, "used", *GATED]], on=keys,
                               suffixes=("", "_base"))
    found = []
    for row in pair.to_dict("records"):
        common = {"case_id": row["case_id"], "backend": row["backend"], "scheme": row["scheme"],
                  "check": row["check"]}
        h0, h1 = row["used_base"], row["used"]
        if pd.notna(h0) and pd.notna(h1) and h0 < USED_WATCH <= h1:
            found.append({"change": "error_growth", **common, "metric": "used",
                          "base": h0, "current": h1,
                          "detail": f"used crossed {USED_WATCH} from below"})
        for metric, threshold in thresholds_of(row).items():
            v0, v1 = row[f"{metric}_base"], row[metric]
            if pd.isna(v0) or pd.isna(v1):
                continue
            e0, e1 = error_form(metric, v0), error_form(metric, v1)
            limit = threshold_form(metric, threshold)
            if e0 > 0 and e1 >= GROWTH * e0 and limit > 0 and e1 >= GROWTH_FLOOR * limit:
                found.append({"change": "error_growth", **common, "metric": metric,
                              "base": v0, "current": v1,
                              "detail": f"error x{e1 / e0:.1f} (now {e1 / limit:.2f} of the "
                                        "threshold)"})
    return found


def _slower(base: pd.DataFrame, current: pd.DataFrame, slower_than: float | None = None
            ) -> list[dict]:
    """Cases whose kernel time grew beyond the noise, or beyond `slower_than` x when given
    (only where both runs carry times)."""
    t0 = base.groupby(["case_id", "run_id"])["kernel_s"].sum(min_count=1).dropna()
    t1 = current.groupby("case_id")["kernel_s"].sum(min_count=1).dropna()
    if t0.empty or t1.empty:
        return []
    per_case = t0.groupby(level="case_id")
    spread = (per_case.max() / per_case.min())[per_case.size() > 1]
    noise = (max(MIN_TIME_NOISE, float(spread.quantile(0.95))) if len(spread)
             else DEFAULT_TIME_NOISE)
    if slower_than is not None:
        noise = slower_than
    typical = per_case.median()
    ratio = (t1 / typical).dropna()
    meta = current.drop_duplicates("case_id").set_index("case_id")
    return [{"change": "slower", "case_id": case_id, "backend": meta.at[case_id, "backend"],
             "scheme": meta.at[case_id, "scheme"], "metric": "kernel_s",
             "base": typical[case_id], "current": t1[case_id],
             "detail": f"x{r:.2f} the baseline's time (threshold x{noise:.2f})"}
            for case_id, r in ratio.items() if r > noise]


def compare_backends(frame: pd.DataFrame, a: str, b: str) -> pd.DataFrame:
    """Backends `a` and `b` side by side on the problems both ran (matched on problem id and
    check): status, used and rel_fro of each; rows whose status differs first."""
    if a == b:
        raise ValueError(f"compare_backends needs two different backends, got {a!r} twice")
    cols = ["problem_id", "check", "scheme", "status", "used", "rel_fro"]
    left = frame.loc[frame["backend"] == a, cols]
    right = frame.loc[frame["backend"] == b, cols].drop(columns="scheme")
    both = left.merge(right, on=["problem_id", "check"], suffixes=(f"_{a}", f"_{b}"))
    both.insert(3, "differs", both[f"status_{a}"].astype(str) != both[f"status_{b}"].astype(str))
    return both.sort_values(["differs", "problem_id", "check"], ascending=[False, True, True],
                            kind="stable").reset_index(drop=True)


# --- timings (`moecert bench`) ----------------------------------------------------------------

BENCH_COLUMNS = ("case_id", "backend", "config", "model", "M", "mode", "status", "us",
                 "achieved_GBps", "memory_floor_pct", "compute_floor_pct", "ratio_to_marlin",
                 "message")


def bench_metrics(kernel_s, min_bytes, flops, copy_bytes_s, matmul_flop_s, marlin_s) -> dict:
    """What a bench row's raw columns mean (floats or Series alike): the time in us, the
    bandwidth achieved on the bytes the call must move, the memory floor (those bytes at the
    copy bandwidth) and the compute floor (its flops at the GEMM rate) as % of the time, and
    the time as a multiple of Marlin's."""
    return {"us": kernel_s * 1e6,
            "achieved_GBps": min_bytes / kernel_s / 1e9,
            "memory_floor_pct": 100 * (min_bytes / copy_bytes_s) / kernel_s,
            "compute_floor_pct": 100 * (flops / matmul_flop_s) / kernel_s,
            "ratio_to_marlin": kernel_s / marlin_s}


def floor_points(bench_rows: pd.DataFrame) -> pd.DataFrame:
    """Per model, backend, scheme (config) and M: the % of the binding floor a timed bench row
    reached, the larger of its memory and compute floor % (the time cannot be below either
    floor, so the larger one is how near the kernel is to its roofline), the graph-replay row
    where a point has one (the forward without host work), else the apply row."""
    timed = bench_rows[bench_rows["status"] == "pass"].copy()
    pct = timed[["memory_floor_pct", "compute_floor_pct"]].astype("float64").max(axis=1)
    timed = timed.assign(floor_pct=pct, graph=timed["mode"] == "graph").dropna(
        subset=["floor_pct"])
    keys = ["model", "backend", "config", "M"]
    best = timed.sort_values("graph", ascending=False, kind="stable").drop_duplicates(keys)
    return best[[*keys, "mode", "floor_pct"]].sort_values(keys).reset_index(drop=True)


def bench(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per `moecert bench` row (ids backend/scheme-variant/model/M<m>/mode):
    BENCH_COLUMNS, the model and mode read from the id; by model, scheme, M and mode, the
    backends of one point next to each other."""
    rows = frame[frame["check"] == BENCH_CHECK]
    parts = rows["case_id"].str.rsplit("/", n=3, expand=True) if len(rows) else None
    metrics = bench_metrics(*(rows[c].astype("float64") for c in (
        "kernel_s", "min_bytes", "flops", "copy_bytes_s", "matmul_flop_s", "marlin_s")))
    out = rows.assign(model=parts[1] if parts is not None else [],
                      mode=parts[3] if parts is not None else [], **metrics)
    return (out[list(BENCH_COLUMNS)]
            .sort_values(["model", "config", "M", "mode", "backend"], kind="stable")
            .reset_index(drop=True))


def rerun_command(row, prefix: str | None = None) -> str:
    """The command that reruns a row's case: `prefix` (default `moecert run --device D`,
    the row's device, with `--import M` for each module the run imported) and `--case`
    with the case's JSON."""
    if not prefix:
        parts = ["moecert", "run", "--device", str(row["device"] or "cpu")]
        imports = row.get("imports")
        for module in (imports.split() if isinstance(imports, str) else ()):
            parts += ["--import", module]
        prefix = shlex.join(parts)
    return f"{prefix} --case {shlex.quote(str(row['case_json']))}"


def _first_line(text) -> str:
    return str(text).splitlines()[0] if isinstance(text, str) and text else ""


def _text(v) -> str:
    return f"{v:.3g}" if isinstance(v, float) else str(v)
