"""A report: the frames of one run (and its comparison with a baseline) computed once, and the
verdict a CI job gates on. The renderers (reports/render.py) format a `Report`.

    report = Report.build(load("results/"), baseline=load("main-results/"))
    report.exit_code     # 0 nothing regressed, 1 a regression (no baseline: a failing case)
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from . import frames


@dataclass(frozen=True)
class Report:
    rows: pd.DataFrame  # the current run's rows, as loaded
    cases: pd.DataFrame  # frames.cases
    counts: pd.DataFrame  # frames.status_counts
    matrix: pd.DataFrame  # frames.status_matrix
    headroom: pd.DataFrame  # frames.worst_headroom
    failing: pd.DataFrame  # frames.failing: the failing rows
    slowest: pd.DataFrame  # frames.slowest
    changes: pd.DataFrame | None  # frames.compare_runs, with a baseline
    rerun_prefix: str | None = None  # `moecert run ...` before `--case`; None: from the row
    bench: pd.DataFrame | None = None  # frames.bench: the `moecert bench` rows

    @classmethod
    def build(cls, rows: pd.DataFrame, baseline: pd.DataFrame | None = None,
              suite_ids: set[str] | None = None, rerun_prefix: str | None = None,
              slower_than: float | None = None) -> Report:
        """`suite_ids`, `slower_than`: see frames.compare_runs."""
        if rows.empty:
            raise ValueError("no result rows to report on")
        changes = None if baseline is None else frames.compare_runs(baseline, rows, suite_ids,
                                                                    slower_than)
        return cls(rows, frames.cases(rows), frames.status_counts(rows),
                   frames.status_matrix(rows), frames.worst_headroom(rows),
                   frames.failing(rows), frames.slowest(rows), changes, rerun_prefix,
                   frames.bench(rows))

    @property
    def regressions(self) -> pd.DataFrame | None:
        return None if self.changes is None else frames.regressions(self.changes)

    @property
    def failed_cases(self) -> int:
        return int(self.cases["status"].isin(frames.FAILING).sum())

    @property
    def exit_code(self) -> int:
        """With a baseline: 1 if anything regressed. Without: 1 if any case failed."""
        if self.changes is not None:
            return int(len(self.regressions) > 0)
        return int(self.failed_cases > 0)

    def verdict(self) -> str:
        """One line: what the exit code says, and why."""
        n = len(self.cases)
        if self.changes is not None:
            reg = self.regressions
            if len(reg):
                kinds = reg["change"].value_counts(sort=False)
                what = ", ".join(f"{k} {kind.replace('_', ' ')}" for kind, k in kinds.items()
                                 if k)
                return f"REGRESSED against the baseline: {what} ({n} cases)"
            return f"no regression against the baseline ({n} cases, {self.failed_cases} failing)"
        if self.failed_cases:
            return f"FAILING: {self.failed_cases} of {n} cases failed"
        return f"green: none of {n} cases failed"

    def rerun(self, row) -> str:
        return frames.rerun_command(row, self.rerun_prefix)

    def run_ids(self) -> list[str]:
        return sorted(self.rows["run_id"].dropna().unique())
