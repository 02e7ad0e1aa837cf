"""The caught-bug ladder of the tolerance table: per entry, the smallest planted scale error
its thresholds catch.

    python tools/scale_ladder.py [--factors 1.0025 1.005 1.01 1.02 1.05 1.1] [--seeds 2]

The planted bug is the torch backend with every expert's w2 weights times a factor (a w2 scale
off by that factor: the output off by about as much), run on each entry's sample cases
(tolerances.toml `[entry.measured]` sample; seeds 0..N-1, CPU) with the accuracy check only.
A factor is caught when every sample case fails; the table (markdown, docs/tolerances.md)
gives per entry the share caught at each factor and the smallest factor caught on every case.
The same sample, unplanted, passes (the legitimate error the thresholds admit is measured on
it: tests/conformance/harness/test_tolerance_reasons.py).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

FACTORS = (1.0025, 1.005, 1.01, 1.02, 1.05, 1.1)


def planted_backend(factor: float):
    from moecert.kernels.native import TorchBackend

    class PlantedW2Scale(TorchBackend):
        """The torch backend with w2 times `factor` (every expert)."""

        name = f"planted-w2-x{factor:g}"

        def expert_weight(self, layer, p, e):
            w = super().expert_weight(layer, p, e)
            return w * factor if p == "w2" else w

    return PlantedW2Scale()


def main(argv: list[str] | None = None) -> int:
    from moecert.conformance.harness.execute import run_case
    from moecert.conformance.harness.measured_sample import sample_cases
    from moecert.conformance.harness.tolerances import load_table
    from moecert.kernels import backend_names, register_backend

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--factors", type=float, nargs="+", default=list(FACTORS))
    parser.add_argument("--seeds", type=int, default=2)
    args = parser.parse_args(argv)
    names = {}
    for f in args.factors:
        backend = planted_backend(f)
        if backend.name not in backend_names():
            register_backend(backend)
        names[f] = backend.name
    print("| entry | rel_fro threshold | " + " | ".join(f"x{f:g}" for f in args.factors)
          + " | smallest caught on every case |")
    print("|---|---|" + "---|" * len(args.factors) + "---|")
    for entry in load_table().entries:
        if not entry.measured or not entry.measured.get("sample"):
            # a saturated entry's measurement has no smoke sample (its rows exist only on
            # model folders): the ladder runs smoke cases
            print(f"| {entry.key} | {entry.thresholds['rel_fro']:.3g} | "
                  + " | ".join("-" for _ in args.factors) + " | no smoke sample |", flush=True)
            continue
        cells, smallest = [], None
        for f in args.factors:
            caught = total = 0
            for case in sample_cases(entry, "torch"):
                for seed in range(args.seeds):
                    planted = replace(case, backend=names[f], seed=seed)
                    (row,) = run_case(planted, "cpu", checks=("accuracy",))
                    assert row["tolerance"] == entry.key, (planted.case_id, row["tolerance"])
                    total += 1
                    caught += row["status"] == "fail"
            cells.append(f"{caught}/{total}")
            if smallest is None and caught == total:
                smallest = f
        caught_at = f"x{smallest:g}" if smallest else f"none up to x{args.factors[-1]:g}"
        print(f"| {entry.key} | {entry.thresholds['rel_fro']:.3g} | " + " | ".join(cells)
              + f" | {caught_at} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
