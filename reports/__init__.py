"""moecert.reports: the result schema, storage, the frames a maintainer reads, and their
renderings (terminal, Markdown, HTML, JUnit).

    from moecert.reports import load, cases, status_matrix, compare_runs
    frame = load("moecert-results/")     # the newest run in the folder, all its shards
    frame = load("moecert-results/", run="all")   # every run
    cases(frame)                         # one row per case, worst first
"""

from .frames import (
    CHANGES,
    REGRESSIONS,
    cases,
    compare_backends,
    compare_runs,
    failing,
    regressions,
    rerun_command,
    slowest,
    status_counts,
    status_matrix,
    worst_used,
)
from .schema import COLUMNS, FAILING, SCHEMA_VERSION, STATUS_DTYPE, STATUSES, case_status
from .store import ResultsError, load

__all__ = ["CHANGES", "COLUMNS", "FAILING", "REGRESSIONS", "SCHEMA_VERSION", "STATUSES",
           "STATUS_DTYPE", "ResultsError", "case_status", "cases", "compare_backends",
           "compare_runs", "failing", "load", "regressions", "rerun_command", "slowest",
           "status_counts", "status_matrix", "worst_used"]
