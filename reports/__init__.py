"""moecert.reports: the result schema, storage and reading.

    from moecert.reports import load
    frame = load("moecert-results/")     # the newest run in the folder, all its shards
    frame = load("moecert-results/", run="all")   # every run
"""

from .schema import COLUMNS, FAILING, STATUSES, case_status
from .store import load

__all__ = ["COLUMNS", "FAILING", "STATUSES", "case_status", "load"]
