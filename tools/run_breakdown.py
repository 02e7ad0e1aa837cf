"""Where a run's time went, from its results (docs/speed.md's breakdowns are made with this).

    python tools/run_breakdown.py RESULTS [--workers N]

RESULTS: a results file or folder (`moecert run --results`). Prints the wall time (first
check's start to last row), the check time summed over rows by check and backend, how many
cases were running at once over time (the workers' use), the model-size problems' share,
the tail (what still ran in the last quarter of the wall), the triton `claims` rows of compile
size (a kernel's first call in a worker: over 1 s, against a median near 0.13 s on an H200
host) per kernel family, and each model-size layer's GPU
memory high-water mark per scheme (`device_peak_bytes`), from which the runner's memory
budget is sized (conformance/harness/schedule.py), and that budget beside it per layer.
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd
from moecert.conformance.harness.cases import Case
from moecert.conformance.harness.schedule import MODEL_SIZE_WEIGHTS, device_need
from moecert.reports.store import ResultsError, load

STEP_S = 0.5


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results")
    parser.add_argument("--workers", type=int, default=None,
                        help="the run's worker count (for the use column)")
    args = parser.parse_args(argv)
    try:
        rows = load(args.results)
    except ResultsError:  # an older schema: the columns read here have not changed
        rows = pd.read_parquet(args.results)
    rows = rows[rows["check"] != "bench"]
    end = rows["finished_at"].astype("int64") / 1e9
    rows = rows.assign(t1=end, t0=end - rows["duration_s"].fillna(0.0))
    cases = rows.groupby("case_id").agg(t0=("t0", "min"), t1=("t1", "max"),
                                        E=("E", "first"), K=("K", "first"), N=("N", "first"))
    start = cases["t0"].min()
    wall = cases["t1"].max() - start
    big = cases["E"] * cases["K"] * cases["N"] * 3 > MODEL_SIZE_WEIGHTS
    print(f"{len(cases)} cases ({int(big.sum())} model-size), {len(rows)} rows, "
          f"wall {wall:.0f} s, check time {rows['duration_s'].sum():.0f} s")
    print("\ncheck time (s) by check and backend:")
    table = rows.pivot_table(index="check", columns="backend", values="duration_s",
                             aggfunc="sum", observed=True).fillna(0.0)
    table["all"] = table.sum(axis=1)
    print(table.sort_values("all", ascending=False).round(1).to_string())
    t = np.arange(0.0, wall, STEP_S)
    t0, t1 = (cases["t0"] - start).to_numpy(), (cases["t1"] - start).to_numpy()
    running = ((t0[None, :] <= t[:, None]) & (t1[None, :] > t[:, None]))
    busy = running.sum(axis=1)
    layers = running[:, big.to_numpy()].sum(axis=1)
    print(f"\ncases running at once: mean {busy.mean():.1f}"
          + (f" of {args.workers} workers ({100 * busy.mean() / args.workers:.0f}%)"
             if args.workers else "")
          + f"; a model-size case running {STEP_S * (layers > 0).sum():.0f} s of the wall")
    for w in range(0, int(wall) + 1, 30):
        window = (t >= w) & (t < w + 30)
        if window.any():
            print(f"  {w:4d}-{w + 30:<4d} s  running {busy[window].mean():5.1f}"
                  f"  model-size {layers[window].mean():4.2f}")
    tail(cases.assign(t0=cases["t0"] - start, t1=cases["t1"] - start, big=big), wall)
    first_calls(rows)
    if "device_peak_bytes" in rows and rows["device_peak_bytes"].notna().any():
        sized = rows[rows["E"] * rows["K"] * rows["N"] * 3 > MODEL_SIZE_WEIGHTS]
        peak = sized.groupby(["E", "K", "N", "scheme", "backend"], observed=True)[
            "device_peak_bytes"].max().dropna() / 2**30
        print("\nmodel-size layers, GPU memory high-water mark (GiB), the worst check:")
        print(peak.unstack("backend").round(1).to_string())
        budget_against_peaks(sized)
    return 0


def budget_against_peaks(sized: pd.DataFrame) -> None:
    """The memory model beside what was measured: each model-size problem's budget
    (schedule.device_need, what the runner reserves on its GPU) against the highest peak of
    its cases, per model layer and scheme; a ratio above 1 means the model under-budgets."""
    first = sized.dropna(subset=["device_peak_bytes"]).groupby(
        ["E", "K", "N", "scheme"], observed=True)
    table = first.agg(peak=("device_peak_bytes", "max"), case_json=("case_json", "first"))
    if table.empty:
        return
    table["need"] = [device_need(Case.from_json(j)) for j in table["case_json"]]
    table["peak / need"] = table["peak"] / table["need"]
    gib = table[["need", "peak"]] / 2**30
    print("\nmemory model (schedule.device_need, GiB) beside the measured peak, per layer:")
    print(gib.assign(**{"peak / need": table["peak / need"]}).to_string(
        float_format=lambda v: f"{v:.2f}"))  # 50.20, not 50.2: two decimals always
    print(f"highest peak / need: {table['peak / need'].max():.2f} "
          f"(median {table['peak / need'].median():.2f})")


# The case fields that choose a triton kernel's specialization: its constexpr flags follow
# the scheme and variant (config), the dtype, activation, bias, router placement and format;
# its tiles follow K and N (and M's bucket). Rows of one family share compiled kernels.
FAMILY = ["scheme", "config", "dtype", "activation", "bias", "router_on_input",
          "activation_format", "K", "N"]


def first_calls(rows: pd.DataFrame, backend: str = "triton", compile_s: float = 1.0) -> None:
    """How much of `backend`'s `claims` time is compile-sized first calls, and whether the
    same family compiled more than once (two workers at once, before the shared Triton cache
    held it): only that part would a compile-once-before-the-pool step remove."""
    claims = rows[(rows["backend"] == backend) & (rows["check"] == "claims")
                  & (rows["status"] != "unsupported")]
    if claims.empty:
        return
    slow = claims[claims["duration_s"] > compile_s]
    per_family = slow.groupby([c for c in FAMILY if c in slow], dropna=False,
                              observed=True).size()
    again = int((per_family - 1).sum())
    print(f"\n{backend} claims: {len(claims)} rows, {claims['duration_s'].sum():.0f} s; "
          f"{len(slow)} over {compile_s:g} s ({slow['duration_s'].sum():.0f} s) in "
          f"{len(per_family)} kernel families; {again} of them a family's second or later "
          f"(median claims row {claims['duration_s'].median():.2f} s)")


def tail(cases: pd.DataFrame, wall: float, share: float = 0.25) -> None:
    """The run's tail: what was still running in its last quarter, and the model-size
    problems' work against the wall (when they hold the wall, sharing more CPU work does not
    shorten it: docs/speed.md, issue 32)."""
    late = cases[cases["t1"] > (1 - share) * wall]
    span = cases["t1"] - cases["t0"]
    print(f"\nthe last {100 * share:.0f}% of the wall ({share * wall:.0f} s): {len(late)} cases "
          f"finished, {int(late['big'].sum())} of them model-size; longest there:")
    longest = late.assign(s=span[late.index]).sort_values("s", ascending=False).head(5)
    for case_id, row in longest.iterrows():
        print(f"  {row['s']:6.1f} s  ends {row['t1']:5.0f} s  {case_id}")
    print(f"model-size cases: {int(cases['big'].sum())}, {span[cases['big']].sum():.0f} s of "
          f"case time; the last ends at {cases.loc[cases['big'], 't1'].max():.0f} s"
          if cases["big"].any() else "no model-size cases")


if __name__ == "__main__":
    raise SystemExit(main())
