"""A finished run's schedule replayed on a clock of its own (issue 43): this checkout's
WorkPool (conformance/harness/schedule.py) hands the run's problems to N workers on one GPU
budget, each case taking the time it took in the run (its span: first check's start to last
check's end), and the replay reports the wall it predicts, beside the run's own. What changes
between the two is only the schedule: a policy or budget change is judged by the walls it
predicts on the same measured times, before a GPU call measures it.

    python tools/schedule_replay.py RESULTS.parquet [--workers 24] [--free-gib 140]
        [--costs]

--costs orders by the run's own measured times (what `--shard-costs` does on a later run);
without it the order is the memory need's, as a cold run's. A prediction: the case times of
a real run change with what runs beside them (the CPU's contention), which the replay keeps
as measured. Exit 0, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def case_spans(rows) -> tuple[dict, dict, float]:
    """{case id: seconds from its first check's start to its last's end}, {case id: its
    JSON}, and the run's wall (first start to last end)."""
    rows = rows[rows["check"] != "bench"]
    end = rows["finished_at"].astype("int64") / 1e9
    rows = rows.assign(t1=end, t0=end - rows["duration_s"].fillna(0.0))
    by_case = rows.groupby("case_id", observed=True).agg(
        t0=("t0", "min"), t1=("t1", "max"), case_json=("case_json", "first"))
    spans = (by_case["t1"] - by_case["t0"]).to_dict()
    return spans, by_case["case_json"].to_dict(), float(rows["t1"].max() - rows["t0"].min())

def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("results", type=Path)
    p.add_argument("--workers", type=int, default=24)
    p.add_argument("--free-gib", type=float, default=140.0,
                   help="the GPU's free memory when the run starts (an H200: about 140)")
    p.add_argument("--costs", action="store_true", help="order by the run's measured times")
    args = p.parse_args(argv)
    if args.workers < 1 or args.free_gib <= 0:
        p.error("--workers and --free-gib: expected positive numbers")
    if not args.results.is_file():
        p.error(f"results: no file {args.results}")
    import pandas as pd
    from moecert.conformance.harness.cases import Case
    from moecert.conformance.harness.replay import replay
    from moecert.conformance.harness.schedule import GpuBudget, WorkPool

    spans, jsons, wall = case_spans(pd.read_parquet(args.results))
    cases = [Case.from_json(jsons[c]) for c in spans]
    free = int(args.free_gib * 2**30)
    pool = WorkPool(cases, [GpuBudget(free, args.workers, free)],
                    costs=spans if args.costs else None)
    predicted, big = replay(pool, args.workers, spans)
    print(f"{len(cases)} cases, {len(big)} model-size problems, {args.workers} workers, "
          f"{args.free_gib:g} GiB free: the run's wall {wall:.0f} s; replayed "
          f"{predicted:.0f} s ({'measured-cost' if args.costs else 'memory'} order)")
    last = max(big, default=(0.0, 0.0, ""), key=lambda s: s[1])
    print(f"last model-size problem ends at {last[1]:.0f} s ({last[2]})")
    for t in range(0, int(predicted) + 10, 10):
        at = sum(1 for s in big if s[0] <= t < s[1])
        print(f"  {t:4d} s  model-size problems running {at}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
