"""Waivers for `moecert certify`: failures a submitter declares, each with its reason, listed in
the bundle. A waived case still failed; the certificate lists it, and the bundle certifies.
The entries are the expectation record (harness/expectations.py), as expected failures are:

    [[waiver]]
    case_id = "xpu/gptq-int4/M0.K128.N128.E4.k2/bf16.silu/s0"   # an id, or an fnmatch pattern
    checks = ["accuracy"]                                       # every check if absent
    reason = "M = 0 not dispatched by the vendor kernel: tracked in vendor-x#12"

(`backend` may be given; the certified backend is the only one in the run.) A case is waived
when every failing row of it (crash, timeout, error, fail, xfail) matches an entry; a case
with one failing row no entry matches is a failure.
"""

from __future__ import annotations

from ..harness.expectations import Expectations, parse_expectations


def parse_waivers(text: str, where: str) -> Expectations:
    """The entries of a waiver file's text; a ValueError names `where`, the entry and what is
    wrong with it."""
    return Expectations(parse_expectations(text, where, "waiver", required=("case_id", "reason")))
