"""The one record behind expected failures (`--xfail`, harness/xfail.py) and certification
waivers (`moecert certify --waivers`, certification/waivers.py): which rows an entry covers, and
why.

    [[xfail]]                              # [[waiver]] in a waiver file
    backend = "vendor-x"                   # a name, a list of names or a group (the host's
                                           # answer: kernels/registry.py GROUPS); absent or
    scheme = "awq-int4"                    # "*": every backend; then the case's fields
    variant = { sym = false }              # (harness/case_fields.py: scheme, variant.*,
    problem = { M = { min = 1 } }          # problem.*, routing, seed, strided, model, folder)
    checks = ["accuracy", "exact"]         # check names; absent or ["*"]: every check
    reason = "AWQ with zero points: tracked in vendor-x#123"

An entry covers the rows whose case has every field it names (a value, any of a list, or
within `{ min, max }`), so it says what it covers and a new case is covered only where its
fields are. A waiver names its case by id instead (`case_id`: the id, or an fnmatch pattern);
`case_id` is read in an expected-failure list too, the form before issue 45, which the lists
of this repository no longer use (tests/conformance/harness/test_xfail_fields.py).

An expected failure (not a waiver) also names what it expects, so that a different failure of
the same rows is not hidden by it (a crash where a wrong value was expected, a new message):

    status = ["fail"]                      # the failing statuses it expects (FAILING)
    message = "rel_fro [0-9.e-]+ > "       # a regular expression the row's message contains
    metrics = { rel_fro = [0.1, 0.3] }     # and/or bounds [lo, hi] on the row's metrics

    requires = ["amd-quark"]               # optional: packages without which no run reaches
                                           # its rows (tools/xfail_coverage.py --requires)

`status` is required with `message` or `metrics` (or both). A `reason` that cites a file under
tools/ (a reproduction) must name one that exists where the repository is checked out.

Any other key is refused with the file, the entry and the key named: a typo such as `chek =`
would otherwise widen the entry to every check. An entry is used once a row matched it; with
named checks, each check must have matched a row, so a check that never fails is reported as
stale like an entry that matches nothing. Within one run (`unused(reached_only=True)`) an entry
is stale only where the run shows it: a row it covers passed, or failed as it expects but an
earlier entry took it; rows it covers that failed otherwise (reported as such on the row) or
did not run leave it to tools/xfail_coverage.py, which reads every run of a list.
"""

from __future__ import annotations

import difflib
import fnmatch
import math
import re
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

from .case_fields import CASE_FIELDS, TABLES, case_fields, describe, field_matches, parse_fields

KEYS = ("backend", "case_id", "checks", "reason")
FIELD_KEYS = (*CASE_FIELDS[1:], *TABLES)  # an expected failure's case fields (case_fields.py)
EXPECT_KEYS = ("status", "message", "metrics", "requires")  # an expected failure's own keys
EVERY = "*"
NOT_RUN = ("unsupported", "skip", "oversize")  # rows whose check did not run
# A reproduction cited in a reason: a path under tools/ (tools/vllm_repro/gptq_v2_sym.md).
CITED = re.compile(r"\btools/[\w./-]*\w")
# The repository root where moecert runs from a checkout (tools/ next to conformance/); an
# installed package has no tools/, and cited files are then not checked.
CHECKOUT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Expectation:
    backend: str
    case_id: str
    checks: tuple[str, ...]
    reason: str
    status: tuple[str, ...] = ()  # expected failing statuses; () for a waiver (any)
    message: str = ""  # a regular expression the message must contain ("" any)
    metrics: tuple[tuple[str, float, float], ...] = field(default=())  # (name, lo, hi)
    # packages (pip names) an environment needs for a run to reach the entry's rows: a list
    # serves environments with and without them, and coverage is checked per environment
    requires: tuple[str, ...] = ()
    # the case fields it covers (case_fields.py): (name, wanted)
    fields: tuple[tuple[str, object], ...] = ()

    @property
    def backends(self) -> tuple[str, ...]:
        """The backend names the entry covers: its list or group's names (matched as the
        backend field), else its one name (`*`: every backend)."""
        named = dict(self.fields).get("backend")
        return tuple(named) if named else (self.backend,)

    def matches(self, row: dict) -> bool:
        if not (self.backend in (EVERY, str(row["backend"]))
                and fnmatch.fnmatchcase(str(row["case_id"]), self.case_id)
                and (EVERY in self.checks or str(row["check"]) in self.checks)):
            return False
        if not self.fields:
            return True
        values = case_fields(row)
        return values is not None and all(field_matches(name, wanted, values[name])
                                          for name, wanted in self.fields)

    def unexpected(self, row: dict) -> str | None:
        """None when the failing `row` is the failure this entry expects; else what differs
        (a waiver, which names no expectation, expects any failure)."""
        if self.status and row["status"] not in self.status:
            return f"status {row['status']}, expected {' or '.join(self.status)}"
        text = str(row.get("message") or "")
        if self.message and not re.search(self.message, text):
            return f"message does not match {self.message!r}"
        for name, lo, hi in self.metrics:
            value = row.get(name)
            if not isinstance(value, int | float) or math.isnan(value):
                return f"no {name} in the row, expected {name} in [{lo:g}, {hi:g}]"
            if not lo <= value <= hi:
                return f"{name} {value:.3g} outside the expected [{lo:g}, {hi:g}]"
        return None

    def expectation(self) -> str:
        parts = [" or ".join(self.status)] if self.status else []
        if self.message:
            parts.append(f"message ~ {self.message!r}")
        parts += [f"{n} in [{lo:g}, {hi:g}]" for n, lo, hi in self.metrics]
        return ", ".join(parts)

    def __str__(self) -> str:
        covers = describe(self.fields) if self.fields else f"case_id {self.case_id}"
        return (f"backend {self.backend}, {covers}, checks {', '.join(self.checks)}: "
                f"{self.reason}")


def parse_expectations(text: str, where: str, table: str, required: tuple[str, ...],
                       expects: bool = False) -> list[Expectation]:
    """The `[[table]]` entries of a TOML text; a ValueError names `where`, the entry and what
    is wrong (not TOML, another table, an unknown key, a missing key, a bad check name, a
    missing or malformed expectation where `expects`, a cited tools/ file that is absent)."""
    from .checks import CHECKS

    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{where}: not TOML: {e}") from None
    other = sorted(set(data) - {table})
    if other:
        raise ValueError(f"{where}: unknown tables {other}; expected [[{table}]] entries")
    known_checks = (*CHECKS, "setup")  # "setup": the row of a case that could not start
    entries = []
    for i, raw in enumerate(data.get(table, [])):
        entry = f"{where}: {table} entry {i}"
        keys = KEYS + FIELD_KEYS + EXPECT_KEYS if expects else KEYS
        for key in sorted(set(raw) - set(keys)):
            close = difflib.get_close_matches(key, keys, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(f"{entry}: unknown key {key!r}{hint}; keys: {', '.join(keys)}")
        missing = [k for k in required if not str(raw.get(k, "")).strip()]
        if missing:
            raise ValueError(f"{entry}: needs {', '.join(missing)}")
        checks = raw.get("checks", [EVERY])
        if (not isinstance(checks, list) or not checks
                or not all(isinstance(c, str) for c in checks)):
            raise ValueError(f"{entry}: checks must be a list of check names, e.g. "
                             f'checks = ["accuracy"]')
        unknown = [c for c in checks if c != EVERY and c not in known_checks]
        if unknown:
            raise ValueError(f"{entry}: unknown check {unknown[0]!r}; checks: "
                             f"{', '.join(known_checks)}")
        reason = str(raw["reason"])
        _check_cited(reason, entry)
        expected = _expected(raw, entry) if expects else {}
        requires = raw.get("requires", [])
        if not isinstance(requires, list) or not all(isinstance(r, str) and r.strip()
                                                     for r in requires):
            raise ValueError(f"{entry}: requires must be a list of package names, e.g. "
                             f'requires = ["amd-quark"]')
        if requires:
            expected["requires"] = tuple(requires)
        raw = _expand_group(raw)
        if expects:
            expected["fields"] = parse_fields(raw, entry)
        backend = raw.get("backend", EVERY)
        entries.append(Expectation(backend if isinstance(backend, str) else EVERY,
                                   str(raw.get("case_id", EVERY)), tuple(checks), reason,
                                   **expected))
    return entries


def _expand_group(raw: dict) -> dict:
    """`raw` with a backend group (kernels/registry.py GROUPS, e.g. `vllm-amx`) replaced by
    the backends it stands for on this machine: a list, matched as the backend field."""
    from moecert.kernels.registry import backend_group

    names = raw.get("backend")
    group = backend_group(names) if isinstance(names, str) else None
    return raw if group is None else {**raw, "backend": list(group)}


def _check_cited(reason: str, entry: str) -> None:
    """Every tools/ file the reason cites exists, where there is a checkout to look in."""
    if not (CHECKOUT / "tools").is_dir():
        return
    for cited in CITED.findall(reason):
        if not (CHECKOUT / cited).exists():
            raise ValueError(f"{entry}: reason cites {cited}, which does not exist in "
                             f"{CHECKOUT}")


def _expected(raw: dict, entry: str) -> dict:
    """status, message and metrics of an expected failure, checked."""
    from moecert.reports.schema import FAILING

    status = raw.get("status")
    status = [status] if isinstance(status, str) else status
    if (not isinstance(status, list) or not status
            or not all(isinstance(s, str) and s in FAILING for s in status)):
        raise ValueError(f'{entry}: needs status, the failing statuses it expects (one or more '
                         f'of {", ".join(FAILING)}), e.g. status = ["fail"]')
    message = raw.get("message", "")
    if not isinstance(message, str):
        raise ValueError(f"{entry}: message must be a regular expression (a string)")
    try:
        re.compile(message)
    except re.error as e:
        raise ValueError(f"{entry}: message {message!r} is not a regular expression: {e}") \
            from None
    metrics = raw.get("metrics", {})
    bounds = []
    if not isinstance(metrics, dict):
        raise ValueError(f"{entry}: metrics must be a table, e.g. metrics = {{ rel_fro = "
                         f"[0.1, 0.3] }}")
    for name, bound in metrics.items():
        if (not isinstance(bound, list) or len(bound) != 2
                or not all(isinstance(b, int | float) for b in bound) or bound[0] > bound[1]):
            raise ValueError(f"{entry}: metrics.{name} must be [lo, hi] with lo <= hi")
        bounds.append((str(name), float(bound[0]), float(bound[1])))
    if not message and not bounds:
        raise ValueError(f"{entry}: needs message (a pattern of the expected failure's "
                         "message) or metrics (bounds on its metrics), or both: an entry that "
                         "expects any failure would hide a new one")
    return {"status": tuple(status), "message": message, "metrics": tuple(bounds)}


class Expectations:
    """Entries in file order (the first that matches a row wins) and which were used."""

    def __init__(self, entries: list[Expectation]):
        self.entries = entries
        self._used: set[tuple[int, str]] = set()  # (entry index, check it matched)
        self._reached: set[tuple[int, str]] = set()  # (entry index, check of a row it covers)

    def first(self, row: dict) -> Expectation | None:
        """The first entry that matches `row`."""
        return next((e for e in self.entries if e.matches(row)), None)

    def match(self, row: dict, use: bool = True) -> Expectation | None:
        """The first entry that matches `row`, recorded as used (with `use`; else see
        `use`); every entry whose selector covers the row is recorded as reached (the run
        had a row it could have matched)."""
        from moecert.reports.schema import FAILING

        found = None
        ran = row.get("status") not in NOT_RUN
        failing = row.get("status") in FAILING
        for i, e in enumerate(self.entries):
            if e.matches(row):
                # a case the backend did not claim, or a skipped check, proves nothing; nor
                # does a row failing otherwise than the entry expects (a folder whose layer
                # fails to load fails every check so): the row itself fails and says what
                # the entry expected. A row that passed, or that failed as the entry expects
                # but an earlier entry took, shows the entry stale or shadowed.
                if ran and not (failing and e.unexpected(row) is not None):
                    self._reached.add((i, str(row["check"])))
                if found is None:
                    found = e
                    if use:
                        self.use(e, row)
        return found

    def use(self, entry: Expectation, row: dict) -> None:
        """`entry` (one of self.entries) expected `row`."""
        self._used.add((next(i for i, e in enumerate(self.entries) if e is entry),
                        str(row["check"])))

    def seen(self, rows: Iterable[dict]) -> None:
        """Rows judged earlier (a resumed run's): the entries their expected (xfail) or
        waived (failing) rows match count as used, the others as reached."""
        from moecert.reports.schema import FAILING

        for row in rows:
            self.match(row, use=row.get("status") in ("xfail", *FAILING))

    def unused(self, reached_only: bool = False) -> list[Expectation]:
        """Entries no row matched, each narrowed to its named checks that no row matched.
        `reached_only`: only those the run had rows for (a row their selector covers, which
        an earlier entry took, or which passed, or which failed otherwise): the entries this
        run shows to be stale or shadowed, whatever other runs the list serves."""
        out = []
        for i, e in enumerate(self.entries):
            hit = {check for j, check in self._used if j == i}
            reached = {check for j, check in self._reached if j == i}
            if EVERY in e.checks:
                if not hit and (reached or not reached_only):
                    out.append(e)
                continue
            stale = tuple(c for c in e.checks if c not in hit
                          and (c in reached or not reached_only))
            if stale:
                out.append(replace(e, checks=stale))
        return out
