"""The one verdict on a run: whether it is green, in one line, with its exit code. `moecert
run`, `moecert report` (without a baseline), `moecert certify` (the run's line, before the
bundle's) and the pytest plugin all say it with these words, from these counts:

    verdict(tallies, completion)  -> Verdict(code, line); tallies: {backend: Tally}
    tally_frame(frame)            -> {backend: Tally} of loaded rows
    tally_rows(tallies, rows)     adds one case's rows (dicts), as a run goes
    Completion                    how many of its planned cases a run has done, and whether
                                  it reached its end (reports/store.py reads it from the store)

Green (exit 0) when the run finished every case it planned, at least one claimed case ran a
check and none failed or was left unrun for lack of memory; otherwise 1, the line saying
every reason that holds:

    green: all 18 claimed case(s) passed (backend torch 18 of 19 claimed)
    not green: 3 case(s) failed: 2 fail, 1 timeout (backend torch 18 of 19 claimed)
    not green: 2 claimed case(s) not run: they need more memory than this machine has
        (backend torch 6 of 6 claimed, 2 oversize)
    not green: no claimed case ran a check (backend xpu 0 of 19 claimed)
    not green: not finished: 59 of 648 cases (backend torch 59 of 59 claimed)
    green: all 3 claimed case(s) passed (backend torch 3 of 3 claimed, 1 retried alone
        after running out of memory)

A case that ran out of memory beside others and passed alone, or (under --mps) failed on the
GPU and passed outside MPS (its rows' `retried` column, conformance/harness/runner.py), is
counted per backend, never as a failure.

An unclaimed case (the backend does not claim it, and says so) never counts as passed; a
claimed case on which every check was skipped did not run a check. Only a claimed case can be
oversize (not run: too large for the machine): an unclaimed case that would not fit either is
unclaimed. A case lost (crash, timeout) before the backend was asked whether it claims it is
counted as failed and, per backend, as "with its claim unknown", never as unclaimed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from .schema import FAILING, RETRIED_UNDER_MPS, STATUSES, case_status

GREEN, NOT_GREEN = 0, 1
# A claimed case's rows of these statuses ran no check.
NOT_EXECUTED = ("skip", "unsupported")


@dataclass
class Tally:
    """One backend's cases."""

    cases: int = 0
    claimed: int = 0
    unknown: int = 0  # cases no row of which knows the claim (lost before it was asked)
    ran: int = 0  # claimed cases on which at least one check ran
    failed: int = 0  # cases with a crash, timeout, error or fail row
    failures: Counter = field(default_factory=Counter)  # failed cases by their worst status
    oversize: int = 0  # claimed cases not run: more memory than the machine has
    retried: int = 0  # cases run a second time, alone, after running out of memory
    retried_mps: int = 0  # cases run a second time outside MPS after failing under it

    def add(self, claimed: bool | None, ran: bool, failed: bool | str,
            oversize: bool = False, retried: bool = False, retried_mps: bool = False) -> None:
        """One case. `claimed` None: no row knows (the case was lost before its claim was
        asked); `failed` a failing status, or True where which one is not known."""
        self.cases += 1
        self.claimed += claimed is True
        self.unknown += claimed is None
        self.ran += bool(claimed is True and ran)
        self.failed += bool(failed)
        if isinstance(failed, str):
            self.failures[failed] += 1
        self.oversize += bool(oversize and claimed is not False)
        self.retried += bool(retried)
        self.retried_mps += bool(retried_mps)

    def words(self, backend: str) -> str:
        """`torch 18 of 19 claimed, 2 oversize, 1 retried alone after running out of memory,
        1 with its claim unknown`."""
        return (f"{backend} {self.claimed} of {self.cases} claimed"
                + (f", {self.oversize} oversize" if self.oversize else "")
                + (f", {self.retried} retried alone after running out of memory"
                   if self.retried else "")
                + (f", {self.retried_mps} retried outside MPS after failing on the GPU under "
                   "it" if self.retried_mps else "")
                + (f", {self.unknown} with its claim unknown" if self.unknown
                   else ""))


@dataclass(frozen=True)
class Completion:
    """How far a run got: `planned` cases (None: not recorded, a journal an older moecert
    wrote), `done` (cases with rows in the store), `finished` (the run reached its end and
    wrote its results file), `resume` (the commands that continue it, where recorded)."""

    planned: int | None
    done: int
    finished: bool
    resume: tuple[str, ...] = ()

    @property
    def complete(self) -> bool:
        return self.finished and (self.planned is None or self.done >= self.planned)

    def words(self) -> str:
        """The verdict's reason for a run that is not complete."""
        if self.planned is None:
            return (f"not finished: {self.done} case(s) done; how many it planned is not "
                    "recorded (a journal of an older moecert)")
        if self.done >= self.planned:
            return (f"not finished: {self.done} of {self.planned} cases, but the run did not "
                    "reach its end")
        return f"not finished: {self.done} of {self.planned} cases"

    @staticmethod
    def merged(parts: Iterable[Completion]) -> Completion | None:
        """Several parts of one report (shards, runs) as one; None for none."""
        parts = list(parts)
        if not parts:
            return None
        planned = [p.planned for p in parts]
        return Completion(None if None in planned else sum(planned),
                          sum(p.done for p in parts), all(p.finished for p in parts),
                          tuple(c for p in parts for c in p.resume))


@dataclass(frozen=True)
class Verdict:
    code: int  # GREEN or NOT_GREEN
    line: str

    @property
    def green(self) -> bool:
        return self.code == GREEN


def _claim(values) -> bool | None:
    """A case's claim from its rows' `claimed` values: True if any row says so, None if no
    row knows."""
    known = [v for v in values if v is True or v is False]
    return True if True in known else (False if known else None)


def tally_rows(tallies: dict[str, Tally], rows: Iterable[dict]) -> None:
    """Add one case's rows (dicts with backend, status, claimed) to `tallies`."""
    rows = list(rows)
    if not rows:
        return
    statuses = [str(r["status"]) for r in rows]
    status = case_status(statuses)
    tallies.setdefault(str(rows[0]["backend"]), Tally()).add(
        _claim([r.get("claimed") for r in rows]),
        any(s not in NOT_EXECUTED for s in statuses),
        status if status in FAILING else False, "oversize" in statuses,
        *_retry_kinds([r.get("retried") for r in rows]))


def tally_frame(frame) -> dict[str, Tally]:
    """The tallies of loaded rows (a results frame), case by case."""
    tallies: dict[str, Tally] = {}
    if not len(frame):
        return tallies
    status = frame["status"].astype(str)
    claimed = frame["claimed"]
    flags = frame.assign(_true=claimed.fillna(False).astype(bool), _known=claimed.notna(),
                         _ran=~status.isin(NOT_EXECUTED), _rank=status.map(STATUSES.index),
                         _oversize=status.eq("oversize"))
    # no `retried` column before schema 7: no case was retried there
    notes = (frame["retried"].fillna("").astype(str) if "retried" in frame
             else status.map(lambda _: ""))
    under_mps = notes.str.startswith(RETRIED_UNDER_MPS)
    flags = flags.assign(_retried=notes.ne("") & ~under_mps, _retried_mps=under_mps)
    per_case = flags.groupby("case_id", sort=False).agg(
        backend=("backend", "first"), true=("_true", "any"), known=("_known", "any"),
        ran=("_ran", "any"), rank=("_rank", "min"), oversize=("_oversize", "any"),
        retried=("_retried", "any"), retried_mps=("_retried_mps", "any"))
    for row in per_case.itertuples(index=False):
        worst = STATUSES[int(row.rank)]
        tallies.setdefault(str(row.backend), Tally()).add(
            True if row.true else (False if row.known else None), row.ran,
            worst if worst in FAILING else False, row.oversize, row.retried, row.retried_mps)
    return tallies


def _retry_kinds(notes: list) -> tuple[bool, bool]:
    """(retried alone after running out of memory, retried outside MPS) from a case's
    `retried` values (reports/schema.py: a note's first words say which; None, NaN or "" in
    a row run once)."""
    notes = [n for n in notes if isinstance(n, str) and n]
    under_mps = any(n.startswith(RETRIED_UNDER_MPS) for n in notes)
    return any(not n.startswith(RETRIED_UNDER_MPS) for n in notes), under_mps


def verdict(tallies: dict[str, Tally], completion: Completion | None = None) -> Verdict:
    """The run's verdict from its backends' tallies and, where known, how far it got
    (`completion`; None: it ran what it planned, as a run that has just ended knows)."""
    claimed = sum(t.claimed for t in tallies.values())
    failed = sum(t.failed for t in tallies.values())
    oversize = sum(t.oversize for t in tallies.values())
    ran = sum(t.ran for t in tallies.values())
    how = sum((t.failures for t in tallies.values()), Counter())
    per_backend = ", ".join(t.words(b) for b, t in sorted(tallies.items()))
    where = f" (backend {per_backend})" if tallies else " (no cases ran)"
    reasons = []
    if completion is not None and not completion.complete:
        reasons.append(completion.words())
    if failed:
        kinds = ", ".join(f"{how[s]} {s}" for s in FAILING if how[s])
        reasons.append(f"{failed} case(s) failed" + (f": {kinds}" if kinds else ""))
    if oversize:
        reasons.append(f"{oversize} claimed case(s) not run: they need more memory than "
                       "this machine has")
    if not reasons and not ran:
        reasons.append("no claimed case ran a check")
    if reasons:
        return Verdict(NOT_GREEN, f"not green: {'; '.join(reasons)}{where}")
    return Verdict(GREEN, f"green: all {claimed} claimed case(s) passed{where}")


__all__ = ["GREEN", "NOT_GREEN", "Completion", "Tally", "Verdict", "tally_frame", "tally_rows",
           "verdict"]
