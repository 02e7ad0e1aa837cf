"""What an engine's run on a GPU claimed and what it found, from its results folder(s).

    python tools/engine_gpu_summary.py RESULTS [RESULTS ...] [--failures FILE.csv]

Prints one markdown table, a row per (backend, scheme, the kernel the engine's oracle chose:
the results' `backend_detail`): claimed cases, and per case status (a case's status is its
worst row's) how many; then the unclaimed cases per (backend, scheme) with their most common
reason. `--failures` writes every row that is not pass / unsupported / xfail (case, check,
status, metrics, message) for triage. Reads every run in each folder (`store.load(run="all")`).
"""

from __future__ import annotations

import argparse
import sys

import pandas as pd
from moecert.reports import store

OK = ("pass", "unsupported", "xfail", "skip")


def frame(folders: list[str]) -> pd.DataFrame:
    rows = [store.load(f, run="all") for f in folders]
    rows = [r for r in rows if len(r)]
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame()


def case_table(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per (backend, case): its worst status, whether claimed, the kernel, the
    folder (model) it came from, and its first message."""
    rows = rows.assign(rank=rows["status"].cat.codes)
    worst = rows.sort_values("rank").groupby(["backend", "case_id"], observed=True).head(1)
    detail = rows.groupby(["backend", "case_id"], observed=True)["backend_detail"].agg(
        lambda s: next((v for v in s if v), ""))
    worst = worst.set_index(["backend", "case_id"])
    worst["backend_detail"] = detail
    return worst.reset_index()


def claimed_markdown(cases: pd.DataFrame) -> str:
    claimed = cases[cases["claimed"].fillna(False).astype(bool)]
    if claimed.empty:
        return "no claimed case\n"
    # the kernel: the detail's first two parts (vLLM: "BACKEND (ExpertsClass)"; transformers:
    # the experts implementation and the quantizer), not what was loaded
    kernel = claimed["backend_detail"].map(lambda d: "; ".join(d.split("; ")[:2]) or "-")
    table = (claimed.assign(kernel=kernel)
             .groupby(["backend", "scheme", "kernel", "status"], observed=True).size()
             .unstack("status", fill_value=0))
    table = table.loc[:, (table != 0).any()]
    table.insert(0, "claimed", table.sum(axis=1))
    return table.reset_index().to_markdown(index=False) + "\n"


def unclaimed_markdown(cases: pd.DataFrame) -> str:
    un = cases[~cases["claimed"].fillna(False).astype(bool)]
    if un.empty:
        return ""
    out = (un.groupby(["backend", "scheme"], observed=True)
           .agg(unclaimed=("case_id", "size"),
                reason=("message", lambda s: s.fillna("").str.slice(0, 110).mode().iat[0]
                        if len(s) else ""))
           .reset_index())
    return out.to_markdown(index=False) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", nargs="+")
    ap.add_argument("--failures", default=None)
    a = ap.parse_args(argv)
    rows = frame(a.results)
    if rows.empty:
        print("no rows")
        return 1
    cases = case_table(rows)
    print(claimed_markdown(cases))
    print(unclaimed_markdown(cases))
    bad = rows[~rows["status"].astype(str).isin(OK)]
    if a.failures:
        keep = ["backend", "case_id", "model", "check", "status", "backend_detail", "numerics",
                "rel_fro", "max_abs_scaled", "cosine", "used", "tolerance", "message"]
        bad[[c for c in keep if c in bad.columns]].to_csv(a.failures, index=False)
    print(f"{len(cases)} case(s), {int(cases['claimed'].fillna(False).astype(bool).sum())} "
          f"claimed, {len(bad)} row(s) not pass / unsupported / xfail")
    return 0


if __name__ == "__main__":
    sys.exit(main())
