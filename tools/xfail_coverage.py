"""Whether every entry of an expected-failure list was used by the runs in a results folder.

    python tools/xfail_coverage.py conformance/harness/xfail-vllm.toml RESULTS_FOLDER
    python tools/xfail_coverage.py LIST RESULTS_FOLDER --requires amd-quark

One list serves several runs (tox -e vllm: the smoke suite, then one run per model folder),
and `moecert run` fails on an entry only where the run had rows the entry covers; an entry
that covers no case of any run (its backend renamed, its case id pattern off by one field)
would go unnoticed. This reads every run in the folder and exits 1, naming them, when an entry
(or a check it names) expected no failure of any run: an error, not a warning, as a stale
entry of one run is.

A list can serve environments that differ by an optional package (tox -e transformers, and
tox -e transformers-quark with amd-quark): an entry whose rows only a run with that package
reaches says `requires = ["amd-quark"]`. Without --requires the check covers the entries that
require nothing; with --requires PKG, those that require PKG (the other environment checks
the rest). The entries left out are counted, never silently.
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
    parser.add_argument("--requires", metavar="PKG", default=None,
                        help="check the entries that require PKG (default: those that "
                             "require nothing)")
    args = parser.parse_args(argv)
    xfail = XfailList.load(args.xfail)

    def in_scope(entry) -> bool:
        return args.requires in entry.requires if args.requires else not entry.requires

    frame = load(args.results, run="all")
    rows = frame[frame["status"] == "xfail"].astype(object).to_dict("records")
    for row in rows:  # an xfail row is one its first matching entry (of the whole list) expected
        xfail.match(row)
    unused = [e for e in xfail.unused() if in_scope(e)]
    scoped = sum(map(in_scope, xfail.entries))
    runs = frame["run_id"].nunique() if "run_id" in frame else "?"
    scope = f" requiring {args.requires}" if args.requires else ""
    print(f"{args.xfail}: {scoped} entries{scope} ({len(xfail.entries) - scoped} "
          f"checked elsewhere), {len(rows)} expected failures in {runs} run(s) under "
          f"{args.results}")
    for entry in unused:
        print(f"error: xfail entry expected no failure of any run: {entry}")
    return 1 if unused else 0


if __name__ == "__main__":
    sys.exit(main())
