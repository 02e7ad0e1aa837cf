"""Why a case's rows are a second try (the `retried` column; reports/schema.py RETRIED_*):
the runner (conformance/harness/runner.py) runs a case once more where its first rows say it
ran out of memory beside other cases (alone on its GPU then), or, under --mps, failed on the
GPU where another worker's fault reaches it (outside MPS then, mps.gpu_fault)."""

from __future__ import annotations

from moecert.reports.schema import RETRIED_OUT_OF_MEMORY, RETRIED_UNDER_MPS

from .memory import OOM_DEATH
from .mps import gpu_fault

# A row ran out of memory where it is an error whose message has one of these (torch's
# OutOfMemoryError, its "CUDA out of memory" text, and the driver's "CUDA error: out of
# memory" that a failed launch or cuBLAS workspace raises instead), or a crash whose worker
# was killed for memory (memory.death_words: the kernel's OOM killer, or a SIGKILL the runner
# did not send). Either costs one retry alone, never a red correct case; any other crash
# (a segfault, an exit) is the backend's.
OUT_OF_MEMORY = ("OutOfMemoryError", "out of memory. Tried to allocate",
                 "CUDA error: out of memory")


def oom_row(row: dict) -> bool:
    """Whether one row says its case ran out of memory (OUT_OF_MEMORY)."""
    message = row["message"] or ""
    if row["status"] == "crash":
        return message.startswith(OOM_DEATH)
    return row["status"] == "error" and any(m in message for m in OUT_OF_MEMORY)


def out_of_memory(rows: list[dict]) -> bool:
    """Whether a case's rows say it ran out of memory (retried once alone)."""
    return any(map(oom_row, rows))


def retried(rows: list[dict], first: list[dict], place: str) -> list[dict]:
    """A retried case's rows (the second try's: they are its verdict), each saying why in the
    `retried` column: the first try's out-of-memory error or kill."""
    error, said = _first_failure(first, oom_row)
    return _noted(rows, f"{RETRIED_OUT_OF_MEMORY} (check {error['check']}: {said}); "
                        f"retried once alone on {place}")


def retried_outside_mps(rows: list[dict], first: list[dict], place: str) -> list[dict]:
    """A case that failed on the GPU under --mps, run once more outside it: the second try's
    rows (its verdict), each saying why in the `retried` column."""
    error, said = _first_failure(first, gpu_fault)
    return _noted(rows, f"{RETRIED_UNDER_MPS}, where one case's fault reaches every case on "
                        f"its GPU (check {error['check']}: {error['status']}: {said}); "
                        f"retried once outside the run's MPS daemon on {place}")


def _first_failure(first: list[dict], which) -> tuple[dict, str]:
    """The first try's first row `which` matches, and its message's first line."""
    error = next(filter(which, first))
    return error, (error["message"] or "").splitlines()[0][:300]


def _noted(rows: list[dict], note: str) -> list[dict]:
    return [{**r, "retried": note} for r in rows]


__all__ = ["OUT_OF_MEMORY", "oom_row", "out_of_memory", "retried", "retried_outside_mps"]
