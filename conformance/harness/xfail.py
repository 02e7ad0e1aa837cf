"""Expected failures, strictly: an entry turns a matching failing row into "xfail"; a matching
row that passes fails ("XPASS", strict: the entry is stale or the bug is fixed); an entry that
matches no row at all, or a check of it that no row reached, is reported so dead entries do
not pile up. The entries are the expectation record (harness/expectations.py):

    [[xfail]]
    backend = "vendor-x"                   # exact name (required)
    case_id = "*/awq-int4*/*"              # fnmatch pattern on the case id ("*" if absent)
    checks = ["accuracy"]                  # check names (every check if absent)
    reason = "AWQ with zero points: tracked in vendor-x#123"
"""

from __future__ import annotations

from pathlib import Path

from moecert.reports.schema import FAILING

from .expectations import Expectations, parse_expectations

DEFAULT_PATH = Path(__file__).with_name("xfail.toml")


class XfailList(Expectations):
    @classmethod
    def load(cls, path: str | Path | None = None) -> XfailList:
        """The list at `path` (default: the packaged xfail.toml); a ValueError names the file,
        the entry and what is wrong with it."""
        path = Path(path) if path else DEFAULT_PATH
        if not path.exists():
            return cls([])
        return cls(parse_expectations(path.read_text(encoding="utf-8"), str(path), "xfail",
                                      required=("backend", "reason")))

    def apply(self, rows: list[dict]) -> list[dict]:
        out = []
        for row in rows:
            entry = self.match(row)
            if entry is not None:
                if row["status"] in FAILING:
                    row = {**row, "status": "xfail",
                           "message": f"expected failure ({entry.reason}): {row['message']}"}
                elif row["status"] == "pass":
                    row = {**row, "status": "fail",
                           "message": f"XPASS (strict): expected to fail ({entry.reason}), "
                                      "but passed"}
            out.append(row)
        return out
