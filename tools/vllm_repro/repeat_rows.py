"""One case's accuracy row, run again and again: how far does an engine's verdict move when
nothing but the run changes? (issue 41: vLLM 0.25.1's w4a8-int8[g32] K160 row read a norm
ratio of 0.99724 in one GPU run and 0.99598 in another, against a band from 0.99606.)

Each run is its own `moecert run --case JSON --check accuracy` process (the case as a
failure prints it), on seeds 0..S-1 (the case's own inputs for seed 0, fresh ones for the
others), R runs per seed, J at a time. Prints one line per run (status, rel_fro, norm ratio,
max_abs_scaled) and per seed the spread of each metric over its runs: a deterministic backend
has none.

    python tools/vllm_repro/repeat_rows.py 'CASE JSON' [--seeds 4] [--runs 4] [-j 4]
        [--device cuda] [--out DIR]

Exit 0 when every run wrote its row, 1 otherwise, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

METRICS = ("rel_fro", "norm_ratio", "max_abs_scaled")


def seeded(case: dict, seed: int) -> dict:
    """The case with its inputs' seed set (the case id's `s` field and the problem's)."""
    out = json.loads(json.dumps(case))
    out["seed"] = seed
    out["problem"]["seed"] = seed
    return out


def run_one(case: dict, device: str, results: Path) -> dict | None:
    """One process, one accuracy row (None when it wrote none)."""
    import pandas as pd

    cmd = [sys.executable, "-m", "moecert.conformance.cli", "run", "--case", json.dumps(case),
           "--check", "accuracy", "--device", device, "--results", str(results)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    files = sorted(results.glob("*.parquet"))
    if not files:
        print(f"no results (exit {done.returncode}): {done.stderr.strip()[-300:]}")
        return None
    rows = pd.concat(pd.read_parquet(f) for f in files)
    rows = rows[rows["check"] == "accuracy"]
    return rows.iloc[0].to_dict() if len(rows) else None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("case", help="the case as JSON (as `moecert run` prints a failure's)")
    p.add_argument("--seeds", type=int, default=4)
    p.add_argument("--runs", type=int, default=4, help="runs per seed")
    p.add_argument("-j", type=int, default=4, help="runs at a time")
    p.add_argument("--device", default="cuda")
    p.add_argument("--out", type=Path, help="keep each run's results here")
    args = p.parse_args(argv)
    try:
        case = json.loads(args.case)
        case["problem"]["seed"]
    except (ValueError, KeyError, TypeError):
        p.error("case: expected the JSON `moecert run --case` takes, with a problem.seed")
    if min(args.seeds, args.runs, args.j) < 1:
        p.error("--seeds, --runs and -j: expected at least 1")
    out = args.out or Path(tempfile.mkdtemp(prefix="repeat-rows-"))
    jobs = [(s, r) for s in range(args.seeds) for r in range(args.runs)]
    with ThreadPoolExecutor(args.j) as pool:
        rows = list(pool.map(lambda sr: run_one(seeded(case, sr[0]), args.device,
                                                out / f"s{sr[0]}-r{sr[1]}"), jobs))
    missing = 0
    for seed in range(args.seeds):
        got = [row for (s, _), row in zip(jobs, rows, strict=True) if s == seed and row is not None]
        missing += args.runs - len(got)
        for row in got:
            print(f"seed {seed}: {row['status']:5} " + "  ".join(
                f"{m} {row.get(m, float('nan')):.6g}" for m in METRICS))
        if got:
            print(f"seed {seed}: spread over {len(got)} runs: " + "  ".join(
                f"{m} [{min(r.get(m) for r in got):.6g}, {max(r.get(m) for r in got):.6g}]"
                for m in METRICS) + f"; statuses {sorted({r['status'] for r in got})}")
    print(f"{len(jobs) - missing} of {len(jobs)} runs wrote their accuracy row")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
