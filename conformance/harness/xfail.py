"""Expected failures, strictly: an entry turns a matching failing row into "xfail"; a matching
row that passes fails ("XPASS", strict: the entry is stale or the bug is fixed); an entry that
matches no row at all is reported so dead entries do not pile up.

    [[xfail]]
    backend = "vendor-x"            # exact name
    case = "*/awq-int4*/*"          # fnmatch pattern on the case id ("*" if absent)
    check = "accuracy"              # exact check name ("*" if absent)
    reason = "AWQ with zero points: tracked in vendor-x#123"
"""

from __future__ import annotations

import fnmatch
import tomllib
from dataclasses import dataclass
from pathlib import Path

from moecert.reports.schema import FAILING

DEFAULT_PATH = Path(__file__).with_name("xfail.toml")


@dataclass(frozen=True)
class XfailEntry:
    backend: str
    case: str
    check: str
    reason: str

    def matches(self, row: dict) -> bool:
        return (row["backend"] == self.backend and fnmatch.fnmatchcase(row["case_id"], self.case)
                and (self.check == "*" or row["check"] == self.check))


class XfailList:
    def __init__(self, entries: list[XfailEntry]):
        self.entries = entries
        self.used: set[XfailEntry] = set()

    @classmethod
    def load(cls, path: str | Path | None = None) -> XfailList:
        path = Path(path) if path else DEFAULT_PATH
        if not path.exists():
            return cls([])
        data = tomllib.loads(path.read_text())
        entries = []
        for i, raw in enumerate(data.get("xfail", [])):
            missing = [k for k in ("backend", "reason") if not raw.get(k)]
            if missing:
                raise ValueError(f"{path}: xfail entry {i} needs {', '.join(missing)}")
            entries.append(XfailEntry(raw["backend"], raw.get("case", "*"),
                                      raw.get("check", "*"), raw["reason"]))
        return cls(entries)

    def apply(self, rows: list[dict]) -> list[dict]:
        out = []
        for row in rows:
            entry = next((e for e in self.entries if e.matches(row)), None)
            if entry is not None:
                self.used.add(entry)
                if row["status"] in FAILING:
                    row = {**row, "status": "xfail",
                           "message": f"expected failure ({entry.reason}): {row['message']}"}
                elif row["status"] == "pass":
                    row = {**row, "status": "fail",
                           "message": f"XPASS (strict): expected to fail ({entry.reason}), "
                                      "but passed"}
            out.append(row)
        return out

    def seen(self, rows: list[dict]) -> None:
        """Rows judged earlier (a resumed run's): the entries they match count as used."""
        for row in rows:
            self.used.update(e for e in self.entries if e.matches(row))

    def unused(self) -> list[XfailEntry]:
        return [e for e in self.entries if e not in self.used]
