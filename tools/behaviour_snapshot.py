"""Snapshot what a refactor must not change, and compare two snapshots (issue 25).

    python tools/behaviour_snapshot.py ids OUT.json            # case ids, schema, records
    python tools/behaviour_snapshot.py verdicts RESULTS OUT.json   # (case, backend, check) -> status
    python tools/behaviour_snapshot.py compare OLD.json NEW.json

`ids` needs no run: every suite's case ids per backend (what each backend claims), the result
schema's columns and dtypes, and each scheme's format record as `moecert list --records` prints
it. `verdicts` reads a results folder written by `moecert run`. `compare` prints the differences
and exits 1 on any.
"""
from __future__ import annotations

import json
import subprocess
import sys


def ids(out: str) -> None:
    from moecert.conformance.harness.suites import SUITES, build_suite
    from moecert.kernels.registry import backend_names
    from moecert.reports.schema import COLUMN_DTYPES, SCHEMA_VERSION

    snap = {"schema_version": SCHEMA_VERSION,
            "columns": {k: str(v) for k, v in COLUMN_DTYPES.items()}, "suites": {}}
    for suite in SUITES:
        cases = build_suite(suite)
        snap["suites"][suite] = sorted(c.case_id for c in cases)
    snap["backends"] = sorted(backend_names())
    snap["records"] = subprocess.run(
        [sys.executable, "-m", "moecert.conformance.cli", "list", "--records", "--no-backends"],
        capture_output=True, text=True, check=True).stdout.splitlines()
    json.dump(snap, open(out, "w"), indent=0, sort_keys=True)
    print(out, {s: len(v) for s, v in snap["suites"].items()})


def verdicts(results: str, out: str) -> None:
    from moecert.reports.store import load

    df = load(results)
    snap = {f"{r.backend}|{r.case_id}|{r.check}": str(r.status)
            for r in df[["backend", "case_id", "check", "status"]].itertuples()}
    json.dump(snap, open(out, "w"), indent=0, sort_keys=True)
    print(out, len(snap), "rows")


def compare(old: str, new: str) -> int:
    a, b = json.load(open(old)), json.load(open(new))
    diffs = []

    def walk(x, y, path):
        if isinstance(x, dict) and isinstance(y, dict):
            for k in sorted(set(x) | set(y)):
                if k not in y:
                    diffs.append(f"{path}/{k}: only in {old}")
                elif k not in x:
                    diffs.append(f"{path}/{k}: only in {new}")
                else:
                    walk(x[k], y[k], f"{path}/{k}")
        elif isinstance(x, list) and isinstance(y, list) and x != y:
            sx, sy = set(map(str, x)), set(map(str, y))
            diffs.extend(f"{path}: - {v}" for v in sorted(sx - sy)[:20])
            diffs.extend(f"{path}: + {v}" for v in sorted(sy - sx)[:20])
            if sx == sy:
                diffs.append(f"{path}: same items, other order")
        elif x != y:
            diffs.append(f"{path}: {x!r} -> {y!r}")
    walk(a, b, "")
    print("\n".join(diffs[:200]) or "identical")
    return 1 if diffs else 0


if __name__ == "__main__":
    cmd, *args = sys.argv[1:]
    sys.exit({"ids": ids, "verdicts": verdicts, "compare": compare}[cmd](*args) or 0)
