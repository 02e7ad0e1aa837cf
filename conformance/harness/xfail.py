"""Expected failures, strictly: an entry turns a matching row that fails *as it expects*
(status, and a message pattern or metric bounds) into "xfail"; a matching row that fails
otherwise stays failing, its message saying what the entry expected (a crash where a wrong
value was expected, another error: a new failure, never hidden); a matching row that passes
fails ("XPASS", strict: the entry is stale or the bug is fixed); an entry that matches no row
at all, or a check of it that no row reached, is an error of the run (`unused`), so dead
entries do not pile up. The entries are the expectation record (harness/expectations.py):

    [[xfail]]
    backend = "vendor-x"                   # a name, a list of names or a group whose names
                                           # depend on the host (kernels/registry.py GROUPS,
                                           # e.g. vllm-amx) (required)
    scheme = "awq-int4"                    # the case fields it covers (harness/case_fields.py):
    variant = { sym = false }              # scheme, variant.*, problem.*, routing, seed,
                                           # strided, model, folder (every case if none)
    checks = ["accuracy"]                  # check names (every check if absent)
    status = ["fail"]                      # the failing statuses expected (required)
    message = "rel_fro"                    # regular expression in the row's message, and/or
    metrics = { rel_fro = [0.1, 0.3] }     # bounds on the row's metrics (one required)
    reason = "AWQ with zero points: tools/repro/awq_zero.py, tracked in vendor-x#123"
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
                                      required=("backend", "reason"), expects=True))

    def apply(self, rows: list[dict]) -> list[dict]:
        out = []
        for row in rows:
            entry = self.match(row, use=False)
            if entry is not None:
                if row["status"] in FAILING:
                    other = entry.unexpected(row)
                    if other is None:
                        self.use(entry, row)
                        row = {**row, "status": "xfail",
                               "message": f"expected failure ({row['status']}; "
                                          f"{entry.reason}): {row['message']}"}
                    else:  # a failure, but not the one expected: it stays what it is
                        row = {**row, "message": f"{row['message']} [not the expected failure: "
                                                 f"{other}; the xfail entry expects "
                                                 f"{entry.expectation()}]"}
                elif row["status"] == "pass":
                    row = {**row, "status": "fail",
                           "message": f"XPASS (strict): expected to fail ({entry.reason}), "
                                      "but passed"}
            out.append(row)
        return out
