"""Where rows live: a results folder of Parquet files, plus a journal per unfinished run.

Files are named `<run id>.<label>.parquet` (label: the suite, and the shard if any), so every
shard of one run, written on any host, carries the same run id. A run appends each finished
case to `<run id>.<label>.jsonl` as one line (`{"case_id": ..., "rows": [...]}`), written in one
call and synced, so a killed run keeps every case it finished and can be resumed: a case's
rows are on disk whole or not at all. A line cut short by a kill has no newline; readers skip
it and `Journal` cuts it off before appending. When the run ends the journal becomes
`<run id>.<label>.parquet`.

A run records what it set out to do and that it ended: its journal holds a plan line
(`{"plan": {"cases": M, "case_ids_sha256": ..., "resume": "<command>", "started_at": ...}}`,
`plan_of`), and the Parquet file it becomes carries the plan and `finished_at` in its
metadata (`moecert_run`). `completion(path)` reads them back (reports/verdict.Completion): a
journal is a run that has not ended (killed, or still running); a Parquet file whose plan
names more cases than it holds is a run that stopped early (a pytest session cut short).
Results an older moecert wrote carry no plan: its Parquet files were written only at a run's
end (read as finished), its journals only by runs that did not end (read as not finished,
with the planned count unknown).

`load(path)` reads one file, or from a folder the newest run (all its shards merged);
`load(path, run=ID)` one run by id, `load(path, run="all")` every run in the folder. Every
file carries the schema version (reports/schema.py): a journal as its first line
(`{"moecert_schema_version": N}`), a Parquet file in its metadata. `load` refuses a file of
another version, or one that is not whole, with a `ResultsError` naming the file and what was
expected, and returns the columns with the schema's dtypes whatever the mix of files. Files
of an older version that schema.MIGRATIONS names are read with their columns renamed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from .schema import COLUMN_DTYPES, COLUMNS, MIGRATIONS, SCHEMA_VERSION, VERSION_KEY, problem_id
from .verdict import Completion

ALL_RUNS = "all"
PLAN_KEY = "plan"  # a journal's plan line: {"plan": {...}}
RUN_KEY = "moecert_run"  # a Parquet file's metadata: {"plan": {...}, "finished_at": ...}


class ResultsError(ValueError):
    """A results file that cannot be read as this schema: which file, and why."""


class Journal:
    """Append-only rows of one run (or one shard of it), one line per case."""

    def __init__(self, folder: str | os.PathLike, name: str, suite: str | None = None,
                 imports=(), plan: dict | None = None):
        """`suite`: the suite the run's cases came from, written into every row (the report
        tells a case gone from a run from one the suite dropped by it); `imports`: the
        modules the run imported (`--import`), written into every row too (a rerun of a
        row's case needs them); `plan` (`plan_of`): the cases the run sets out to run, written
        as a line unless the journal already holds that plan (a resumed run)."""
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.path = self.folder / f"{name}.jsonl"
        self.suite = suite
        self.imports = " ".join(imports)
        repair_journal(self.path)  # a resumed run appends after whole lines only
        if self.path.exists() and self.path.stat().st_size:
            _journal_version(self.path)  # resuming another version's journal: refuse
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        if not os.fstat(self._fd).st_size:
            self._write(json.dumps({VERSION_KEY: SCHEMA_VERSION}))
        recorded = journal_plan(self.path)
        self.plan = plan or recorded
        if plan is not None and (recorded or {}).get("case_ids_sha256") != plan.get(
                "case_ids_sha256"):
            self._write(json.dumps({PLAN_KEY: plan}))

    def append(self, rows: list[dict]) -> None:
        """One case's rows, as one line in one write."""
        if not rows:
            return
        if self.suite is not None:
            rows = [{**r, "suite": self.suite} for r in rows]
        if self.imports:
            rows = [{**r, "imports": self.imports} for r in rows]
        self._write(json.dumps({"case_id": rows[0].get("case_id"), "rows": rows},
                               default=_json_value))

    def _write(self, line: str) -> None:
        data = memoryview((line + "\n").encode())
        while data:
            data = data[os.write(self._fd, data):]
        os.fsync(self._fd)

    def close(self) -> None:
        """Stop appending (an interrupted run): every line written is already on disk."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def finish(self) -> Path:
        """Write the rows as Parquet next to the journal, with the run's plan and its end,
        and remove the journal."""
        self.close()
        import datetime

        run = {PLAN_KEY: self.plan,
               "finished_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")}
        target = write_parquet(read_journal(self.path), self.path.with_suffix(".parquet"),
                               run)
        self.path.unlink()
        return target


def plan_of(case_ids, resume: str | None = None) -> dict:
    """A run's plan: how many cases, a digest of their ids (a resumed run must plan the same
    cases), and the command that resumes it (None: it cannot be resumed, a pytest session)."""
    import datetime
    import hashlib

    ids = sorted(set(case_ids))
    return {"cases": len(ids),
            "case_ids_sha256": hashlib.sha256("\n".join(ids).encode()).hexdigest(),
            "resume": resume,
            "started_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")}


def journal_plan(path: str | os.PathLike) -> dict | None:
    """The last plan line of a journal (None: none, a journal of an older moecert)."""
    plan = None
    if not Path(path).exists():
        return None
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.startswith('{"' + PLAN_KEY + '"') and line.endswith("\n"):
                try:
                    plan = json.loads(line)[PLAN_KEY]
                except (json.JSONDecodeError, KeyError):
                    continue
    return plan


def _json_value(value):
    """What JSON cannot hold as it is: missing values as null, numpy scalars as numbers,
    anything else (a timestamp) as its text."""
    if value is pd.NA or value is pd.NaT:
        return None
    if hasattr(value, "item"):
        return value.item()
    return str(value)


def write_parquet(frame: pd.DataFrame, path: str | os.PathLike, run: dict | None = None
                  ) -> Path:
    """`frame` (rows of this schema) as Parquet, the schema version in its metadata, and
    `run` (the run's plan and end, Journal.finish) where given."""
    table = pa.Table.from_pandas(_frame(frame), preserve_index=False)
    meta = {**(table.schema.metadata or {}), VERSION_KEY.encode(): str(SCHEMA_VERSION).encode()}
    if run is not None:
        meta[RUN_KEY.encode()] = json.dumps(run).encode()
    pq.write_table(table.replace_schema_metadata(meta), path)
    return Path(path)


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


def journal_cases(path: str | os.PathLike, version: int = SCHEMA_VERSION) -> list[list[dict]]:
    """The rows of each case a journal holds whole, in the order they finished. A last line
    without its newline, or a line that does not decode, is a case that did not finish. A
    journal of another schema version than `version` is a `ResultsError`."""
    _journal_version(path, (version,))
    cases = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if not line.endswith("\n") or not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict) and isinstance(record.get("rows"), list):
                cases.append(record["rows"])
    return cases


def _journal_version(path, readable=(SCHEMA_VERSION,)) -> int:
    """The schema version on a journal's first line; a ResultsError unless in `readable`."""
    with open(path, encoding="utf-8", errors="replace") as f:
        first = f.readline()
    try:
        version = json.loads(first).get(VERSION_KEY) if first.endswith("\n") else None
    except (json.JSONDecodeError, AttributeError):
        version = None
    if version not in readable:
        found = (f"is of schema version {version}" if version is not None
                 else "has no schema version on its first line")
        raise ResultsError(f"{path}: this journal {found}; this moecert reads "
                           f"{_versions(readable)} (a first line {{\"{VERSION_KEY}\": "
                           f"{SCHEMA_VERSION}}})")
    return version


def _versions(readable) -> str:
    return "schema version " + " or ".join(map(str, sorted(readable, reverse=True)))


def read_journal(path: str | os.PathLike) -> pd.DataFrame:
    """A journal's rows; one of an older version (MIGRATIONS) with its columns renamed."""
    version = _journal_version(path, (SCHEMA_VERSION, *MIGRATIONS))
    return _frame(_migrated(pd.DataFrame(
        [row for rows in journal_cases(path, version) for row in rows]), version))


def _migrated(frame: pd.DataFrame, version: int) -> pd.DataFrame:
    return frame.rename(columns=MIGRATIONS.get(version, {}))


def read_parquet(path: str | os.PathLike) -> pd.DataFrame:
    """One Parquet results file, checked whole and for its schema version."""
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as e:
        raise ResultsError(f"{path}: not a readable Parquet file (truncated or corrupt?): "
                           f"{e}") from None
    raw = (table.schema.metadata or {}).get(VERSION_KEY.encode())
    version = raw.decode() if raw is not None else None
    readable = (SCHEMA_VERSION, *MIGRATIONS)
    if version not in map(str, readable):
        found = (f"are of schema version {version}" if version is not None
                 else "carry no schema version")
        raise ResultsError(f"{path}: these results {found} (Parquet metadata "
                           f"{VERSION_KEY!r}); this moecert reads {_versions(readable)}")
    return _migrated(table.to_pandas(), int(version))


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
    frames = [_read(f) for f in _chosen_files(path, run)]
    frames = [f for f in frames if len(f)]
    if not frames:
        return _frame([])
    # categoricals of different categories concatenate as objects: _frame restores them
    return _frame(pd.concat(frames, ignore_index=True))


def _chosen_files(path: str | os.PathLike, run: str | None) -> list[Path]:
    """The files `load(path, run)` reads."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"results path {path} does not exist")
    if path.is_file():
        return [path]
    runs = result_files(path)
    if run == ALL_RUNS:
        return sorted(f for fs in runs.values() for f in fs)
    if run is not None:
        if run not in runs:
            raise KeyError(f"no run {run!r} in {path}; runs there: {', '.join(runs)}")
        return runs[run]
    return next(iter(runs.values()), [])


def completion(path: str | os.PathLike, run: str | None = None) -> Completion | None:
    """How far the run(s) `load(path, run)` reads got (module docstring): per plan (a run's
    shard, or the journals of one pytest session's workers, which share their plan) the
    planned cases against the distinct cases with rows, and whether every file's run ended.
    None when there are no files."""
    groups: dict[tuple, dict] = {}
    for f in _chosen_files(path, run):
        plan, finished, ids = _file_progress(f)
        key = (run_id_of(f), plan["case_ids_sha256"] if plan else str(f))
        group = groups.setdefault(key, {"plan": plan, "finished": True, "ids": set()})
        group["finished"] &= finished
        group["ids"] |= ids
    return Completion.merged(
        Completion(g["plan"]["cases"] if g["plan"] else None, len(g["ids"]), g["finished"],
                   (g["plan"]["resume"],) if g["plan"] and g["plan"].get("resume") else ())
        for g in groups.values())


def _file_progress(path: Path) -> tuple[dict | None, bool, set[str]]:
    """(plan, whether the run ended, case ids with rows) of one results file."""
    if path.suffix == ".parquet":
        try:
            meta = pq.read_schema(path).metadata or {}
            ids = set(pq.read_table(path, columns=["case_id"]).column(0).to_pylist())
        except (pa.ArrowException, OSError) as e:
            raise ResultsError(f"{path}: not a readable Parquet file (truncated or corrupt?): "
                               f"{e}") from None
        raw = meta.get(RUN_KEY.encode())
        return (json.loads(raw)[PLAN_KEY] if raw else None), True, ids - {None}
    ids = {rows[0].get("case_id") for rows in journal_cases(path, _journal_version(
        path, (SCHEMA_VERSION, *MIGRATIONS))) if rows}
    return journal_plan(path), False, ids - {None}


def _read(path: Path) -> pd.DataFrame:
    try:
        return _frame(read_parquet(path) if path.suffix == ".parquet" else read_journal(path))
    except ResultsError as e:
        raise e if str(path) in str(e) else ResultsError(f"{path}: {e}") from None


def rows_frame(rows) -> pd.DataFrame:
    """Result rows (dicts, as a run makes them) as a frame of the schema's columns and
    dtypes, as `load` gives them."""
    return _frame(rows)


def _frame(rows) -> pd.DataFrame:
    """Rows as a frame of the schema's columns (missing ones empty) and dtypes; columns the
    schema does not know follow, as they are."""
    frame = pd.DataFrame(rows)
    if "problem_id" not in frame and "case_id" in frame:
        frame["problem_id"] = frame["case_id"].map(problem_id, na_action="ignore")
    out = {}
    for col, dtype in COLUMN_DTYPES.items():
        values = frame[col] if col in frame else pd.Series(pd.NA, index=frame.index,
                                                           dtype="object")
        out[col] = _as(values, dtype)
    extra = {c: frame[c] for c in frame.columns if c not in COLUMNS}
    return pd.DataFrame({**out, **extra}, index=pd.RangeIndex(len(frame)))


def _as(values: pd.Series, dtype) -> pd.Series:
    values = values.reset_index(drop=True)
    if str(dtype).startswith("datetime64"):
        return pd.to_datetime(values, utc=True, format="ISO8601").astype(dtype)
    if isinstance(dtype, pd.CategoricalDtype):  # (equal to "category": test it first)
        values = values.astype("object").where(values.notna())
        unknown = set(values.dropna()) - set(dtype.categories)
        if unknown:
            raise ResultsError(f"unknown values {sorted(unknown)}; expected one of "
                               f"{list(dtype.categories)}")
        return values.astype(dtype)
    if dtype == "category":  # categories from the data, sorted: the same whatever the files
        values = values.astype("object").where(values.notna())
        return values.astype(pd.CategoricalDtype(sorted(map(str, values.dropna().unique()))))
    if dtype == "float64":
        return pd.to_numeric(values.astype("object").where(values.notna()),
                             errors="coerce").astype("float64")
    if dtype == "str":
        return values.astype("object").where(values.notna()).astype("str")
    return values.astype("object").where(values.notna()).astype(dtype)
