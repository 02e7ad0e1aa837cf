"""Failures grouped so that a person reads one line per bug: by backend, then by check and
how the check failed, across schemes (`moecert report`'s terminal and Markdown summaries
and the HTML page show the groups' headlines).

    failure_groups(rows)   the groups, largest first, each with its one-line headline
"""

from __future__ import annotations

import math
import re

import pandas as pd

from .frames import FAILING, _metric_used
from .schema import BANDS, FLOORS, error_form, shape_class, thresholds_of


def _num(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA:
        return ""
    return f"{v:.4g}" if isinstance(v, float) else str(v)


# What a group's members always share (the signature): the backend, the check, and how the
# check failed: a tolerance judged it ("tolerance"; which metric was worst varies with the
# scheme and seed, so it is described, not keyed on), or, where none did (exact, canonical,
# a crash), the status and the first line of the message with its numbers taken out. A planted
# scale bug failing 36 cases over two schemes is then one group, one line to read.
SIGNATURE = ("backend", "check", "kind")
DESCRIBED = ("backend", "scheme", "config", "shape", "check", "metric", "direction")
VARIES = ("scheme", "config", "shape", "M", "K", "N", "E", "topk", "dtype", "activation",
          "bias", "router_on_input", "expert_map", "activation_format", "routing", "seed")


def worst_metric(row) -> tuple[str, str, float, float] | None:
    """(metric, direction, value, error) of the gated metric farthest past its threshold in
    a judged row: "above" a ceiling or a band, "below" a floor or a band, and the metric's
    error form (0 exact); None if no tolerance judged the row."""
    best = None
    for metric, threshold in thresholds_of(row).items():
        value = row.get(metric)
        used = _metric_used(metric, value, threshold)
        if used is not None and (best is None or used > best[0]):
            direction = ("below" if metric in FLOORS
                         or (metric in BANDS and float(value) < 1.0) else "above")
            best = (used, metric, direction, float(value), error_form(metric, float(value)))
    return None if best is None else best[1:]


def signature(row) -> dict:
    """What makes failing cases one finding (their primary failing rows, `primary_rows`):
    the backend, the check and `kind`: "tolerance" where a tolerance entry judged the row,
    else its status and its message's first line with the numbers taken out. Alongside: the
    worst metric and its direction ("above" a ceiling or band, "below" a floor or band), the
    scheme, variant (config) and shape class."""
    worst = worst_metric(row)
    if worst is not None:
        metric, direction, _, _ = worst
        kind = "tolerance"
    else:
        metric, direction = str(row["status"]), ""
        first = str(row.get("message") or "").splitlines()
        kind = (f"{row['status']}: "
                + re.sub(r"\d+(\.\d+)?(e-?\d+)?", "#", first[0] if first else "")[:120])
    shape = (shape_class(int(row["K"]), int(row["N"]))
             if pd.notna(row.get("K")) and pd.notna(row.get("N")) else "")
    return {"backend": str(row["backend"]), "scheme": str(row["scheme"]),
            "check": str(row["check"]), "kind": kind, "metric": metric,
            "direction": direction, "config": str(row.get("config") or ""), "shape": shape}


def primary_rows(rows: pd.DataFrame) -> list[dict]:
    """Each failing case's one row that names its failure: its failing accuracy row if it
    has one, else its first failing row (worst status, then check)."""
    bad = rows[rows["status"].isin(FAILING)]
    order = bad.assign(_acc=bad["check"].astype(str) != "accuracy").sort_values(
        ["case_id", "_acc", "status", "check"], kind="stable")
    return order.drop_duplicates("case_id").drop(columns="_acc").to_dict("records")


def failure_groups(rows: pd.DataFrame) -> list[dict]:
    """The failing cases grouped by signature (backend, check, how it failed), largest group
    first: each {"signature" (what they share: DESCRIBED fields with one value), "rows" (each
    member's primary row), "varies" {field: distinct values}, "also" {other failing checks:
    cases}, "metrics" [(metric, direction, cases)] most cases first, "metric" and
    "direction" (the first of them), "value" (the median of that metric over the members it
    was worst in), "schemes" (the distinct schemes), "headline" (one line: backend, check,
    metric, how many cases and schemes)}."""
    bad = rows[rows["status"].isin(FAILING)]
    # plain Python, not groupby().agg(set): pandas 3.0.6 (the GPU machines'; not 3.1) casts
    # the sets back to the categorical `check` column and raises
    checks_of: dict[str, set[str]] = {}
    for case_id, check in zip(bad["case_id"].astype(str), bad["check"].astype(str),
                              strict=True):
        checks_of.setdefault(case_id, set()).add(check)
    groups: dict[tuple, list[dict]] = {}
    for row in primary_rows(rows):
        sig = signature(row)
        groups.setdefault(tuple(sig[k] for k in SIGNATURE), []).append({**row, "_sig": sig})
    out = []
    for _, members in sorted(groups.items(), key=lambda kv: (-len(kv[1]), str(kv[0]))):
        sigs = [m["_sig"] for m in members]
        shared = {k: sigs[0][k] for k in DESCRIBED if len({s[k] for s in sigs}) == 1}
        varies = {}
        for field in VARIES:
            values = sorted({_num(m["_sig"][field] if field in ("scheme", "config", "shape")
                                  else m.get(field)) for m in members})
            if len(values) > 1:
                varies[field] = values
        also: dict[str, int] = {}
        for m in members:
            for check in checks_of.get(m["case_id"], ()) - {str(m["check"])}:
                also[check] = also.get(check, 0) + 1
        counts: dict[tuple[str, str], int] = {}
        for sig in sigs:
            counts[sig["metric"], sig["direction"]] = counts.get(
                (sig["metric"], sig["direction"]), 0) + 1
        metrics = sorted(((m, d, n) for (m, d), n in counts.items()), key=lambda t: -t[2])
        metric, direction, _ = metrics[0]
        values = [float(m[metric]) for m in members
                  if m["_sig"]["metric"] == metric and isinstance(m.get(metric), int | float)
                  and math.isfinite(m[metric])]
        group = {"signature": shared, "rows": members, "varies": varies, "also": also,
                 "metrics": metrics, "metric": metric, "direction": direction,
                 "value": float(pd.Series(values).median()) if values else None,
                 "schemes": sorted({s["scheme"] for s in sigs})}
        out.append({**group, "headline": headline(group)})
    return out


def headline(group: dict) -> str:
    """A group in one line: "mutant-scales-x1.005: accuracy fails in 36 case(s) of 2
    scheme(s) (fp8-w8a16, gptq-int4): norm_ratio above its threshold (median 1.01) in 32,
    mismatch_frac above in 4"."""
    first = group["rows"][0]["_sig"]
    schemes = group["schemes"]
    named = ", ".join(schemes[:6]) + (f" and {len(schemes) - 6} more" if len(schemes) > 6
                                      else "")
    head = (f"{first['backend']}: {first['check']} fails in {len(group['rows'])} case(s) of "
            f"{len(schemes)} scheme(s) ({named})")
    if first["kind"] != "tolerance":
        return f"{head}: {first['kind']}"
    parts = []
    for i, (metric, direction, n) in enumerate(group["metrics"][:4]):
        median = (f" its threshold (median {group['value']:.4g})"
                  if i == 0 and group["value"] is not None else "")
        parts.append(f"{metric} {direction}{median} in {n}")
    more = len(group["metrics"]) - 4
    return f"{head}: " + ", ".join(parts) + (f" and {more} other metric(s)" if more > 0 else "")
