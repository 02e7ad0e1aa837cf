"""moecert.reports: the result schema, storage and reading.

    from moecert.reports import load
    frame = load("moecert-results/")     # every row of every run and shard in the folder
"""

from .schema import COLUMNS, FAILING, STATUSES, case_status
from .store import load

__all__ = ["COLUMNS", "FAILING", "STATUSES", "case_status", "load"]
