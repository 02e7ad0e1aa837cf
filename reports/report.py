"""A report: the frames of one run (and its comparison with a baseline) computed once, and the
verdict a CI job gates on. The renderers (reports/render.py) format a `Report`.

    report = Report.build(load("results/"), baseline=load("main-results/"))
    report.exit_code     # 0 nothing regressed, 1 a regression (no baseline: not green)
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from . import frames
from . import verdict as verdict_of


@dataclass(frozen=True)
class Report:
    rows: pd.DataFrame  # the current run's rows, as loaded
    cases: pd.DataFrame  # frames.cases
    counts: pd.DataFrame  # frames.status_counts
    matrix: pd.DataFrame  # frames.status_matrix
    used: pd.DataFrame  # frames.worst_used
    failing: pd.DataFrame  # frames.failing: the failing rows
    slowest: pd.DataFrame  # frames.slowest
    changes: pd.DataFrame | None  # frames.compare_runs, with a baseline
    rerun_prefix: str | None = None  # `moecert run ...` before `--case`; None: from the row
    bench: pd.DataFrame | None = None  # frames.bench: the `moecert bench` rows
    baseline: pd.DataFrame | None = None  # the baseline's rows, as loaded
    # how far the run got (store.completion); None: as its rows say, run to its end
    completion: verdict_of.Completion | None = None

    @classmethod
    def build(cls, rows: pd.DataFrame, baseline: pd.DataFrame | None = None,
              suite_ids: set[str] | None = None, rerun_prefix: str | None = None,
              slower_than: float | None = None,
              completion: verdict_of.Completion | None = None) -> Report:
        """`suite_ids`, `slower_than`: see frames.compare_runs; `completion`: how far the
        run got (reports.store.completion), judged in its verdict."""
        if rows.empty:
            raise ValueError("no result rows to report on")
        changes = None if baseline is None else frames.compare_runs(baseline, rows, suite_ids,
                                                                    slower_than)
        return cls(rows, frames.cases(rows), frames.status_counts(rows),
                   frames.status_matrix(rows), frames.worst_used(rows),
                   frames.failing(rows), frames.slowest(rows), changes, rerun_prefix,
                   frames.bench(rows), baseline, completion)

    @property
    def regressions(self) -> pd.DataFrame | None:
        return None if self.changes is None else frames.regressions(self.changes)

    @property
    def failed_cases(self) -> int:
        return int(self.cases["status"].isin(frames.FAILING).sum())

    @property
    def exit_code(self) -> int:
        """With a baseline: 1 if anything regressed. Without: the run's verdict
        (reports/verdict.py, as `moecert run` exits): 1 unless green."""
        if self.changes is not None:
            return int(len(self.regressions) > 0)
        return self.run_verdict().code

    def run_verdict(self) -> verdict_of.Verdict:
        """The run's own verdict, the words and exit code `moecert run` gave it."""
        return verdict_of.verdict(verdict_of.tally_frame(self.rows), self.completion)

    def verdict(self) -> str:
        """One line: what the exit code says, and why."""
        n = len(self.cases)
        if self.changes is not None:
            reg = self.regressions
            if len(reg):
                kinds = reg["change"].value_counts(sort=False)
                what = ", ".join(_change_words(kind, k) for kind, k in kinds.items() if k)
                return f"REGRESSED against the baseline: {what} (this run: {n} cases)"
            return (f"no regression against the baseline (this run: {n} cases, "
                    f"{self.failed_cases} failing)")
        return self.run_verdict().line

    def rerun(self, row) -> str:
        return frames.rerun_command(row, self.rerun_prefix)

    def run_ids(self) -> list[str]:
        return sorted(self.rows["run_id"].dropna().unique())


# How the regression line counts each kind of change (frames.REGRESSIONS).
_CHANGE_WORDS = {"new_failure": "{n} new failure(s)",
                 "gone": "{n} baseline case(s) missing from this run",
                 "error_growth": "{n} row(s) whose error grew",
                 "slower": "{n} slower row(s)"}


def _change_words(kind: str, n: int) -> str:
    return _CHANGE_WORDS.get(kind, "{n} " + kind.replace("_", " ")).format(n=n)
