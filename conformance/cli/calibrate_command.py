"""`moecert calibrate`: the command line of the calibration (conformance/calibration/calibrate.py:
what it measures, and how a threshold is suggested)."""

from __future__ import annotations

import argparse

from moecert.reports.schema import FAILING

from ..calibration.calibrate import (
    SAFETY,
    format_summary,
    loaded_rows,
    run_seeds,
    summarize,
    write_summary,
)
from ..harness.option_values import (
    device_or_default,
    output_file,
    positive_float,
    positive_int,
)
from .arguments import add_backends, add_device, add_schemes, add_suite


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_backends(parser)
    add_schemes(parser)
    add_suite(parser)
    parser.add_argument("--seeds", type=positive_int, default=8, help="seeds 0..N-1 per case")
    add_device(parser)
    parser.add_argument("--safety", type=positive_float, default=SAFETY,
                        help="suggested threshold = this x the measured max, 1-2-5 rounded")
    parser.add_argument("--out", metavar="PATH", type=output_file,
                        help="write the summary table (.csv, or .parquet)")
    parser.add_argument("--results", metavar="PATH",
                        help="summarize the rows of this results file or folder (its newest "
                             "run) instead of running cases")


def main(args) -> int:
    """Run, summarize, print; 1 if any accuracy row failed or errored."""
    args.device = device_or_default(args.device)
    rows = loaded_rows(args.results) if args.results else run_seeds(args)
    summary = summarize(rows, args.safety)
    print(format_summary(summary, rows))
    if args.out:
        write_summary(summary, args.out)
    return 1 if any(r["status"] in FAILING for r in rows) else 0
