"""Whether every entry of an expected-failure list was used by the runs in a results folder.

    python tools/xfail_coverage.py conformance/harness/xfail-vllm.toml RESULTS_FOLDER

One list serves several runs (tox -e vllm: the smoke suite, then one run per model folder),
and `moecert run` fails on an entry only where the run had rows the entry covers; an entry
that covers no case of any run (its backend renamed, its case id pattern off by one field)
would go unnoticed. This reads every run in the folder and exits 1, naming them, when an entry
(or a check it names) expected no failure of any run: an error, not a warning, as a stale
entry of one run is.
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    from moecert.conformance.harness.xfail import XfailList
    from moecert.reports import load

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("xfail", help="the expected-failure list (TOML)")
    parser.add_argument("results", help="the results folder the runs wrote")
    args = parser.parse_args(argv)
    xfail = XfailList.load(args.xfail)
    frame = load(args.results, run="all")
    rows = frame[frame["status"] == "xfail"].astype(object).to_dict("records")
    for row in rows:  # an xfail row is one its first matching entry expected
        xfail.match(row)
    unused = xfail.unused()
    runs = frame["run_id"].nunique() if "run_id" in frame else "?"
    print(f"{args.xfail}: {len(xfail.entries)} entries, {len(rows)} expected failures in "
          f"{runs} run(s) under {args.results}")
    for entry in unused:
        print(f"error: xfail entry expected no failure of any run: {entry}")
    return 1 if unused else 0


if __name__ == "__main__":
    sys.exit(main())
