"""Where rows live: a results folder of Parquet files, plus a journal per unfinished run.

Files are named `<run id>.<label>.parquet` (label: the suite, and the shard if any), so every
shard of one run, written on any host, carries the same run id. A run appends each finished
case to `<run id>.<label>.jsonl` as one line (`{"case_id": ..., "rows": [...]}`), written in one
call and synced, so a killed run keeps every case it finished and can be resumed: a case's
rows are on disk whole or not at all. A line cut short by a kill has no newline; readers skip
it and `Journal` cuts it off before appending. When the run ends the journal becomes
`<run id>.<label>.parquet`.

`load(path)` reads one file, or from a folder the newest run (all its shards merged);
`load(path, run=ID)` one run by id, `load(path, run="all")` every run in the folder.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd

from .schema import COLUMNS

ALL_RUNS = "all"


class Journal:
    """Append-only rows of one run (or one shard of it), one line per case."""

    def __init__(self, folder: str | os.PathLike, name: str):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.path = self.folder / f"{name}.jsonl"
        repair_journal(self.path)  # a resumed run appends after whole lines only
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def append(self, rows: list[dict]) -> None:
        """One case's rows, as one line in one write."""
        if not rows:
            return
        line = json.dumps({"case_id": rows[0].get("case_id"), "rows": rows}, default=str)
        data = memoryview((line + "\n").encode())
        while data:
            data = data[os.write(self._fd, data):]
        os.fsync(self._fd)

    def finish(self) -> Path:
        """Write the rows as Parquet next to the journal and remove the journal."""
        os.close(self._fd)
        frame = read_journal(self.path)
        target = self.path.with_suffix(".parquet")
        frame.to_parquet(target, index=False)
        self.path.unlink()
        return target


def repair_journal(path: str | os.PathLike) -> None:
    """Cut off a last line without its newline (a write the process was killed in)."""
    path = Path(path)
    if not path.exists():
        return
    with open(path, "rb+") as f:
        end = f.seek(0, os.SEEK_END)
        pos, chunk = end, 1 << 16
        while pos > 0:
            start = max(0, pos - chunk)
            f.seek(start)
            block = f.read(pos - start)
            newline = block.rfind(b"\n")
            if newline >= 0:
                keep = start + newline + 1
                break
            pos = start
        else:
            keep = 0
        if keep != end:
            f.truncate(keep)


def journal_cases(path: str | os.PathLike) -> list[list[dict]]:
    """The rows of each case a journal holds whole, in the order they finished. A last line
    without its newline, or a line that does not decode, is a case that did not finish.
    (A journal of an earlier version has one row per line: each line is taken as it is.)"""
    cases = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if not line.endswith("\n") or not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict):
                cases.append(record["rows"] if isinstance(record.get("rows"), list)
                             else [record])
    return cases


def read_journal(path: str | os.PathLike) -> pd.DataFrame:
    return _frame([row for rows in journal_cases(path) for row in rows])


def unfinished_journals(folder: str | os.PathLike) -> list[Path]:
    """Journals of runs that did not finish, newest first."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    return sorted(folder.glob("*.jsonl"), key=lambda p: p.stat().st_mtime, reverse=True)


def run_id_of(path: str | os.PathLike) -> str:
    """The run id a results file belongs to: its name up to the first dot."""
    return Path(path).name.split(".")[0]


def result_files(folder: str | os.PathLike) -> dict[str, list[Path]]:
    """The results files under `folder` by run id, newest run first (the run whose files
    were written last)."""
    files = sorted([*Path(folder).rglob("*.parquet"), *Path(folder).rglob("*.jsonl")])
    runs: dict[str, list[Path]] = {}
    for f in files:
        runs.setdefault(run_id_of(f), []).append(f)

    def written(run):
        return (max(f.stat().st_mtime for f in runs[run]), run)

    return {run: runs[run] for run in sorted(runs, key=written, reverse=True)}


def load(path: str | os.PathLike, run: str | None = None) -> pd.DataFrame:
    """Rows under `path`: a .parquet file or a .jsonl journal as it is; from a folder, one run,
    every shard and unfinished journal of it merged: the newest run (the one written last) by
    default, `run="<run id>"` for that one, `run="all"` for every run in the folder."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"results path {path} does not exist")
    if path.is_file():
        files = [path]
    else:
        runs = result_files(path)
        if run == ALL_RUNS:
            files = sorted(f for fs in runs.values() for f in fs)
        elif run is not None:
            if run not in runs:
                raise KeyError(f"no run {run!r} in {path}; runs there: {', '.join(runs)}")
            files = runs[run]
        else:
            files = next(iter(runs.values()), [])
    frames = [pd.read_parquet(f) if f.suffix == ".parquet" else read_journal(f) for f in files]
    frames = [f for f in frames if len(f)]
    if not frames:
        return _frame([])
    return _frame(pd.concat(frames, ignore_index=True))


def _frame(rows) -> pd.DataFrame:
    frame = pd.DataFrame(rows)
    for col in COLUMNS:
        if col not in frame:
            frame[col] = pd.NA
    extra = [c for c in frame.columns if c not in COLUMNS]
    return frame[list(COLUMNS) + extra]
