"""Judge finished runs again with an expected-failure list, without running anything.

    python tools/rejudge.py conformance/harness/xfail-vllm-cuda.toml RESULTS...

A GPU run is scarce; its rows come back here, and a list edited afterwards (an entry added,
narrowed or widened from what the run showed) must be shown to fit those rows before it lands.
Each RESULTS (a results folder or file, one run each) has every row's own judgement undone
(an xfail row back to the failing status and message it had, an XPASS back to a pass) and is
judged again by the list, as `moecert run --xfail LIST` would have. Prints per run the rows
still failing (not expected), the rows the list expects and the entries stale in that run (an
entry covering rows of the run, none failing as it expects); exits 1 if any run has one of
either, as the run itself would.
"""

from __future__ import annotations

import argparse
import re
import sys

_XFAIL = re.compile(r"^expected failure \((\w+); .*?\): (.*)$", re.S)
_OTHER = re.compile(r" \[not the expected failure: .*\]$", re.S)
_XPASS = "XPASS (strict)"


def undo(row: dict) -> dict:
    """The row as the check wrote it, before any list judged it."""
    message = str(row.get("message") or "")
    if row["status"] == "xfail":
        m = _XFAIL.match(message)
        if m is None:
            raise ValueError(f"{row['case_id']} {row['check']}: an xfail row whose message "
                             f"does not say its failing status: {message[:120]!r}")
        return {**row, "status": m.group(1), "message": m.group(2)}
    if row["status"] == "fail" and message.startswith(_XPASS):
        return {**row, "status": "pass", "message": ""}
    return {**row, "message": _OTHER.sub("", message)}


def main(argv: list[str] | None = None) -> int:
    from moecert.conformance.harness.xfail import XfailList
    from moecert.reports import load
    from moecert.reports.schema import FAILING

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("xfail", help="the expected-failure list (TOML)")
    parser.add_argument("results", nargs="+", help="results folders or files, one run each")
    parser.add_argument("--show", type=int, default=5, metavar="N",
                        help="failing rows printed per run (default 5)")
    args = parser.parse_args(argv)
    bad = 0
    for path in args.results:
        xfail = XfailList.load(args.xfail)  # fresh per run: staleness is per run
        rows = [undo(r) for r in load(path).to_dict("records")]
        judged = xfail.apply(rows)
        failing = [r for r in judged if r["status"] in FAILING]
        expected = sum(r["status"] == "xfail" for r in judged)
        stale = xfail.unused(reached_only=True)
        print(f"{path}: {len(judged)} rows, {expected} xfail, {len(failing)} failing, "
              f"{len(stale)} stale entries")
        for r in failing[:args.show]:
            print(f"   {r['case_id']} {r['check']} {r['status']}: {str(r['message'])[:200]}")
        for entry in stale:
            print(f"   stale: {entry.reason[:160]}")
        bad += bool(failing or stale)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
