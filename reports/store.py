"""Where rows live: a results folder of Parquet shards, plus a journal per unfinished run.

A run appends each row to `<results>/<run>.jsonl` as it finishes (flushed and synced), so a
killed run keeps everything it finished and can be resumed; when the run ends the journal
becomes `<run>.parquet`. `load` reads a Parquet file, a journal, or a folder of both, and
merges shards written by several hosts.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd

from .schema import COLUMNS


class Journal:
    """Append-only rows of one run (or one shard of it)."""

    def __init__(self, folder: str | os.PathLike, name: str):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.path = self.folder / f"{name}.jsonl"
        self._file = open(self.path, "a", encoding="utf-8")

    def append(self, rows: list[dict]) -> None:
        for row in rows:
            self._file.write(json.dumps(row, default=str) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())

    def finish(self) -> Path:
        """Write the rows as Parquet next to the journal and remove the journal."""
        self._file.close()
        frame = read_journal(self.path)
        target = self.path.with_suffix(".parquet")
        frame.to_parquet(target, index=False)
        self.path.unlink()
        return target


def unfinished_journals(folder: str | os.PathLike) -> list[Path]:
    """Journals of runs that did not finish, newest first."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    return sorted(folder.glob("*.jsonl"), key=lambda p: p.stat().st_mtime, reverse=True)


def read_journal(path: str | os.PathLike) -> pd.DataFrame:
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line:
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError:
                    break  # the last line of a killed run may be cut short
    return _frame(rows)


def load(path: str | os.PathLike) -> pd.DataFrame:
    """Every row under `path` (a .parquet file, a .jsonl journal, or a folder of both)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"results path {path} does not exist")
    files = [path] if path.is_file() else sorted(
        [*path.rglob("*.parquet"), *path.rglob("*.jsonl")])
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
