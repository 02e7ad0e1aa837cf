"""The one record behind expected failures (`--xfail`, harness/xfail.py) and certification
waivers (`moecert certify --waivers`, certification/waivers.py): which rows an entry covers, and
why.

    [[xfail]]                              # [[waiver]] in a waiver file
    backend = "vendor-x"                   # exact name; absent or "*": every backend
    case_id = "vendor-x/awq-int4*"         # fnmatch pattern on the case id; absent: "*"
    checks = ["accuracy", "exact"]         # check names; absent or ["*"]: every check
    reason = "AWQ with zero points: tracked in vendor-x#123"

Any other key is refused with the file, the entry and the key named: a typo such as `chek =`
would otherwise widen the entry to every check. An entry is used once a row matched it; with
named checks, each check must have matched a row, so a check that never fails is reported as
stale like an entry that matches nothing.
"""

from __future__ import annotations

import difflib
import fnmatch
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, replace

KEYS = ("backend", "case_id", "checks", "reason")
EVERY = "*"


@dataclass(frozen=True)
class Expectation:
    backend: str
    case_id: str
    checks: tuple[str, ...]
    reason: str

    def matches(self, row: dict) -> bool:
        return (self.backend in (EVERY, str(row["backend"]))
                and fnmatch.fnmatchcase(str(row["case_id"]), self.case_id)
                and (EVERY in self.checks or str(row["check"]) in self.checks))

    def __str__(self) -> str:
        return (f"backend {self.backend}, case_id {self.case_id}, checks "
                f"{', '.join(self.checks)}: {self.reason}")


def parse_expectations(text: str, where: str, table: str,
                       required: tuple[str, ...]) -> list[Expectation]:
    """The `[[table]]` entries of a TOML text; a ValueError names `where`, the entry and what
    is wrong (not TOML, another table, an unknown key, a missing key, a bad check name)."""
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
        for key in sorted(set(raw) - set(KEYS)):
            close = difflib.get_close_matches(key, KEYS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(f"{entry}: unknown key {key!r}{hint}; keys: {', '.join(KEYS)}")
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
        entries.append(Expectation(str(raw.get("backend", EVERY)), str(raw.get("case_id", EVERY)),
                                   tuple(checks), str(raw["reason"])))
    return entries


class Expectations:
    """Entries in file order (the first that matches a row wins) and which were used."""

    def __init__(self, entries: list[Expectation]):
        self.entries = entries
        self._used: set[tuple[Expectation, str]] = set()  # (entry, check it matched)

    def first(self, row: dict) -> Expectation | None:
        """The first entry that matches `row`."""
        return next((e for e in self.entries if e.matches(row)), None)

    def match(self, row: dict) -> Expectation | None:
        """The first entry that matches `row`, recorded as used."""
        entry = self.first(row)
        if entry is not None:
            self._used.add((entry, str(row["check"])))
        return entry

    def seen(self, rows: Iterable[dict]) -> None:
        """Rows judged earlier (a resumed run's): the entries they match count as used."""
        for row in rows:
            self.match(row)

    def unused(self) -> list[Expectation]:
        """Entries no row matched, each narrowed to its named checks that no row matched."""
        out = []
        for e in self.entries:
            hit = {check for entry, check in self._used if entry == e}
            if EVERY in e.checks:
                if not hit:
                    out.append(e)
                continue
            stale = tuple(c for c in e.checks if c not in hit)
            if stale:
                out.append(replace(e, checks=stale))
        return out
