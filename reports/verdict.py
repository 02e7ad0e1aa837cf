"""The one verdict on a run: whether it is green, in one line, with its exit code. `moecert
run`, `moecert report` (without a baseline), `moecert certify` (the run's line, before the
bundle's) and the pytest plugin all say it with these words, from these counts:

    verdict(tallies)              -> Verdict(code, line); tallies: {backend: Tally}
    tally_frame(frame)            -> {backend: Tally} of loaded rows
    tally_rows(tallies, rows)     adds one case's rows (dicts), as a run goes

Green (exit 0) when at least one claimed case ran a check and none failed or was left
unrun for lack of memory; otherwise 1, the line saying why:

    green: all 18 claimed case(s) passed (backend torch 18 of 19 claimed)
    not green: 3 case(s) failed (backend torch 18 of 19 claimed)
    not green: 2 case(s) not run: they need more memory than this machine has (backend
        torch 6 of 6 claimed, 2 oversize)
    not green: no claimed case ran a check (backend xpu 0 of 19 claimed)

An unclaimed case (the backend does not claim it, and says so) never counts as passed; a
claimed case on which every check was skipped did not run a check. An oversize case (not run:
too large for the machine) is claimed or not as the backend answers for it (its row's
`claimed`), never counted as unclaimed for want of a run.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .schema import FAILING

GREEN, NOT_GREEN = 0, 1
# A claimed case's rows of these statuses ran no check.
NOT_EXECUTED = ("skip", "unsupported")


@dataclass
class Tally:
    """One backend's cases."""

    cases: int = 0
    claimed: int = 0
    ran: int = 0  # claimed cases on which at least one check ran
    failed: int = 0  # cases with a crash, timeout, error or fail row
    oversize: int = 0  # cases not run: more memory than the machine has

    def add(self, claimed: bool, ran: bool, failed: bool, oversize: bool = False) -> None:
        self.cases += 1
        self.claimed += bool(claimed)
        self.ran += bool(claimed and ran)
        self.failed += bool(failed)
        self.oversize += bool(oversize)


@dataclass(frozen=True)
class Verdict:
    code: int  # GREEN or NOT_GREEN
    line: str

    @property
    def green(self) -> bool:
        return self.code == GREEN


def tally_rows(tallies: dict[str, Tally], rows: Iterable[dict]) -> None:
    """Add one case's rows (dicts with backend, status, claimed) to `tallies`."""
    rows = list(rows)
    if not rows:
        return
    claimed = any(r.get("claimed") is True for r in rows)
    statuses = [str(r["status"]) for r in rows]
    tallies.setdefault(str(rows[0]["backend"]), Tally()).add(
        claimed, any(s not in NOT_EXECUTED for s in statuses),
        any(s in FAILING for s in statuses), "oversize" in statuses)


def tally_frame(frame) -> dict[str, Tally]:
    """The tallies of loaded rows (a results frame), case by case."""
    tallies: dict[str, Tally] = {}
    if not len(frame):
        return tallies
    status = frame["status"].astype(str)
    flags = frame.assign(_claimed=frame["claimed"].fillna(False).astype(bool),
                         _ran=~status.isin(NOT_EXECUTED), _failed=status.isin(FAILING),
                         _oversize=status.eq("oversize"))
    per_case = flags.groupby("case_id", sort=False).agg(
        backend=("backend", "first"), claimed=("_claimed", "any"), ran=("_ran", "any"),
        failed=("_failed", "any"), oversize=("_oversize", "any"))
    for row in per_case.itertuples(index=False):
        tallies.setdefault(str(row.backend), Tally()).add(row.claimed, row.ran, row.failed,
                                                          row.oversize)
    return tallies


def verdict(tallies: dict[str, Tally]) -> Verdict:
    """The run's verdict from its backends' tallies."""
    claimed = sum(t.claimed for t in tallies.values())
    failed = sum(t.failed for t in tallies.values())
    oversize = sum(t.oversize for t in tallies.values())
    ran = sum(t.ran for t in tallies.values())
    per_backend = ", ".join(f"{b} {t.claimed} of {t.cases} claimed"
                            + (f", {t.oversize} oversize" if t.oversize else "")
                            for b, t in sorted(tallies.items()))
    where = f" (backend {per_backend})" if tallies else " (no cases ran)"
    if failed:
        return Verdict(NOT_GREEN, f"not green: {failed} case(s) failed{where}")
    if oversize:
        return Verdict(NOT_GREEN, f"not green: {oversize} case(s) not run: they need more "
                                  f"memory than this machine has{where}")
    if not ran:
        return Verdict(NOT_GREEN, f"not green: no claimed case ran a check{where}")
    return Verdict(GREEN, f"green: all {claimed} claimed case(s) passed{where}")


__all__ = ["GREEN", "NOT_GREEN", "Tally", "Verdict", "tally_frame", "tally_rows", "verdict"]
