"""Host memory a case really holds on the CPU, beside what the runner budgets it at
(conformance/harness/memory.py's host_need): the numbers behind that estimate.

    python tools/host_peaks.py [--shape E,K,N]... [--scheme NAME]... [--backend NAME]...
                               [--M 16] [--depth light|full]

Each (shape, scheme, backend) runs as a runner's worker would, in a fresh process of its own
(every check of its depth, one thread), and that process's peak resident set (VmHWM) is its
peak. Prints one row per case: weights, weight bits, measured peak, host_need, and
measured / estimate (below 1: the estimate holds).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

DEFAULT_SHAPES = ("32,2048,1536", "64,2048,1536")


def peak_rss() -> int:
    """This process's peak resident set, bytes (Linux /proc)."""
    status = Path("/proc/self/status").read_text()
    return int(re.search(r"VmHWM:\s+(\d+) kB", status)[1]) << 10


def run_one(case_json: str) -> None:
    """Child: run the case's checks in this process, print its peak and statuses as JSON."""
    import torch
    from moecert.conformance.harness.cases import Case
    from moecert.conformance.harness.execute import run_case

    torch.set_num_threads(1)
    rows = run_case(Case.from_json(case_json), "cpu")
    print(json.dumps({"peak": peak_rss(), "statuses": sorted({r["status"] for r in rows}),
                      "seconds": sum(r["duration_s"] for r in rows)}))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", action="append", help="E,K,N (default: "
                        + " and ".join(DEFAULT_SHAPES) + ")")
    parser.add_argument("--scheme", action="append", help="default: gptq-int4 and bf16")
    parser.add_argument("--backend", action="append", help="default: torch, grouped, xpu")
    parser.add_argument("--M", type=int, default=16)
    parser.add_argument("--depth", choices=("light", "full"), default="light")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # the child's case JSON
    args = parser.parse_args(argv)
    if args.one:
        run_one(args.one)
        return 0
    from moecert.conformance.harness.cases import Case
    from moecert.conformance.harness.memory import gb, host_need, weights
    from moecert.reference import MoEProblem
    from moecert.reference.schemes import get_scheme

    print("| case | weights | bits | peak | host_need | peak / need | statuses | s |")
    print("|---|---|---|---|---|---|---|---|")
    for shape in args.shape or DEFAULT_SHAPES:
        try:
            E, K, N = (int(v) for v in shape.split(","))
        except ValueError:
            parser.error(f"--shape {shape!r}: expected E,K,N such as 32,2048,1536")
        problem = MoEProblem(M=args.M, K=K, N=N, E=E, topk=min(8, E))
        for scheme in args.scheme or ("gptq-int4", "bf16"):
            for backend in args.backend or ("torch", "grouped", "xpu"):
                case = Case(backend, scheme, problem, depth=args.depth)
                done = subprocess.run([sys.executable, __file__, "--one", case.to_json()],
                                      capture_output=True, text=True)
                if done.returncode:
                    tail = (done.stderr.strip().splitlines() or ["?"])[-1]
                    print(f"| {case.case_id} | exit {done.returncode}: {tail} |")
                    continue
                got = json.loads(done.stdout.strip().splitlines()[-1])
                need = host_need(case)
                print(f"| {case.case_id} | {weights(case) / 1e6:.0f}M | "
                      f"{get_scheme(scheme).weight_bits} | {gb(got['peak'])} | {gb(need)} | "
                      f"{got['peak'] / need:.2f} | {','.join(got['statuses'])} | "
                      f"{got['seconds']:.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
