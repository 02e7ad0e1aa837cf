"""Re-measure the tolerance table: `moecert calibrate` over the smoke suite for one backend,
with the legitimate twins (conformance/mutants/legit.py) registered first, which the command
line cannot do (calibrate has no --import).

    python tools/calibrate_table.py --backend torch --seeds 8 --out cal-torch.csv
    python tools/calibrate_table.py --backend legit-act-dtype-weights --seeds 8 --out cal-twin.csv
    python tools/calibrate_table.py --backend triton --seeds 1 --out cal-triton.csv  # interpreted

Every option is `moecert calibrate`'s (--scheme, --suite, --device, --safety, --out, --results);
the summary it prints (and writes with --out) is one row per (tolerance entry, metric):
median, p95 and max of the metric's error form, the threshold and the share used. The numbers
in conformance/harness/tolerances.toml's `why` texts come from this script (the date and the
command are written next to them), and tests/conformance/harness/test_tolerance_reasons.py
re-measures a sample of each entry against them.
"""

from __future__ import annotations

import argparse
import sys

import pandas as pd


def main(argv: list[str] | None = None) -> int:
    from moecert.conformance.cli import calibrate_command
    from moecert.conformance.mutants import register_mutants

    register_mutants()  # the legitimate twins (and the mutants) become backends
    parser = argparse.ArgumentParser(prog="calibrate_table.py", description=__doc__.split("\n")[0])
    calibrate_command.add_arguments(parser)
    parser.add_argument("--rows", metavar="PATH",
                        help="also write the accuracy rows measured (.csv or .parquet)")
    args = parser.parse_args(argv)
    if not args.rows or args.results:
        return calibrate_command.main(args)
    from moecert.conformance.calibration.calibrate import (
        format_summary,
        run_seeds,
        summarize,
        write_summary,
    )
    from moecert.conformance.harness.option_values import device_or_default
    from moecert.reports.schema import FAILING

    args.device = device_or_default(args.device)
    rows = run_seeds(args)
    frame = pd.DataFrame(rows)
    frame.to_parquet(args.rows) if args.rows.endswith(".parquet") else frame.to_csv(args.rows)
    summary = summarize(rows, args.safety)
    print(format_summary(summary, rows))
    if args.out:
        write_summary(summary, args.out)
    return 1 if any(r["status"] in FAILING for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
