"""The spread of the FP8 error on a GPU: the grouped backend on the real torch._scaled_grouped_mm,
on its exact float64 emulation (tests/kernels/test_grouped_fp8.py), and triton, on the same
cases (issue 40, item 8: the tolerance table's cuda fp8-w8a8 entries are sized from this).
On a GPU machine from the repository root, PYTHONPATH as tools/gpu_ci.sh sets it:

    python tools/grouped_fp8_spread.py SEEDS [MODES]     (MODES: static-tensor,dynamic-token)

Cases: certify's row-wise fp8-w8a8 cases (tensor or channel weights) of those activation
modes, and the ct-fp8-static / modelopt-fp8 folders' ci cases, seeds 0..SEEDS-1; checks
accuracy and reload. Writes $OUT/spread.csv (one row per check and kernel) and prints the
status counts; the maxima per kernel are a groupby away."""
import dataclasses
import os
import sys
import time

import pandas as pd
from moecert.conformance.harness.context import SharedSteps
from moecert.conformance.harness.execute import run_case
from moecert.conformance.harness.suites import build_model_suite, build_suite
from moecert.kernels import grouped

sys.path.insert(0, "tests/kernels")
import test_grouped_fp8  # the emulation lives with its tests (after the path insert)

FOLDERS = ("ct-fp8-static-qwen3moe", "modelopt-fp8-qwen3moe")


def main(seeds: int, modes: list[str]) -> None:
    cases = [c for c in build_suite("certify", ["grouped"], ["fp8-w8a8"])
             if c.attrs.get("activation") in modes
             and c.attrs.get("weight_strategy") in ("tensor", "channel")]
    for f in FOLDERS:
        cases += build_model_suite("ci", f"tests/fixtures/checkpoints/{f}", [1], ["grouped"])
    on_triton = [dataclasses.replace(c, backend="triton") for c in cases]
    print(len(cases), "cases x", seeds, "seeds", flush=True)
    real, rows, t0 = grouped.scaled_grouped_mm, [], time.time()
    for kernel in ("real", "emulated", "triton"):
        grouped.scaled_grouped_mm = (test_grouped_fp8.emulated_scaled_grouped_mm
                                     if kernel == "emulated" else real)
        shared = SharedSteps()
        for case in on_triton if kernel == "triton" else cases:
            for seed in range(seeds):
                seeded = dataclasses.replace(case, seed=seed)
                for r in run_case(seeded, "cuda", ("accuracy", "reload"), "spread",
                                  shared=shared):
                    rows.append({k: v for k, v in r.items()
                                 if v is None or isinstance(v, (int, float, str, bool))}
                                | {"kernel": kernel, "case_id": seeded.case_id})
        print(kernel, "done", round(time.time() - t0), "s", flush=True)
    grouped.scaled_grouped_mm = real
    df = pd.DataFrame(rows)
    df.to_csv(os.path.join(os.environ.get("OUT", "/tmp"), "spread.csv"), index=False)
    print(df.groupby(["kernel", "check", "status"]).size())


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 4,
         sys.argv[2].split(",") if len(sys.argv) > 2 else ["static-tensor"])
