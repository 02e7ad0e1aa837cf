"""The result store: a journal holds each case whole or not at all, a torn write is cut off
before the next append, and `load` reads one run of a folder unless asked for more."""

from __future__ import annotations

import json
import os

import pytest
from moecert.reports import ResultsError, load
from moecert.reports.schema import SCHEMA_VERSION
from moecert.reports.store import Journal, journal_cases, read_journal


def _rows(case_id, checks=("claims", "accuracy"), run="r", status="pass"):
    return [{"run_id": run, "case_id": case_id, "check": c, "status": status} for c in checks]


def _write_run(folder, name, case_ids, mtime):
    journal = Journal(folder, name)
    for case_id in case_ids:
        journal.append(_rows(case_id, run=name.split(".")[0]))
    path = journal.finish()
    os.utime(path, (mtime, mtime))
    return path


def test_a_case_is_one_line_and_a_torn_one_is_no_case(tmp_path):
    journal = Journal(tmp_path, "r.smoke")
    journal.append(_rows("a"))
    journal.append(_rows("b"))
    lines = journal.path.read_bytes().splitlines(keepends=True)
    # the schema version line, then one line per case
    assert len(lines) == 3 and all(line.endswith(b"\n") for line in lines)
    assert json.loads(lines[0]) == {"moecert_schema_version": SCHEMA_VERSION}
    # killed inside b's write: a's rows stand, b's (even its first, whole row) do not
    journal.path.write_bytes(lines[0] + lines[1] + lines[2][: len(lines[2]) * 3 // 4])
    assert [rows[0]["case_id"] for rows in journal_cases(journal.path)] == ["a"]
    assert list(read_journal(journal.path)["case_id"]) == ["a", "a"]


def test_reopening_a_torn_journal_cuts_the_tail_before_appending(tmp_path):
    journal = Journal(tmp_path, "r.smoke")
    journal.append(_rows("a"))
    whole = journal.path.stat().st_size
    with open(journal.path, "ab") as f:
        f.write(b'{"case_id": "b", "rows": [{"case_id": "b", "che')
    again = Journal(tmp_path, "r.smoke")  # what --resume does
    assert again.path.stat().st_size == whole
    again.append(_rows("b"))
    assert [rows[0]["case_id"] for rows in journal_cases(again.path)] == ["a", "b"]
    frame = load(again.finish())
    assert sorted(zip(frame["case_id"], frame["check"], strict=True)) == [
        ("a", "accuracy"), ("a", "claims"), ("b", "accuracy"), ("b", "claims")]


def test_a_journal_of_an_earlier_schema_is_refused_by_name(tmp_path):
    path = tmp_path / "old.smoke.jsonl"  # one row per line, no version line: schema 1
    path.write_text("".join(json.dumps(r) + "\n" for r in _rows("a")))
    with pytest.raises(ResultsError, match="old.smoke.jsonl: this journal has no schema version"):
        load(path)
    with pytest.raises(ResultsError, match="old.smoke.jsonl"):
        Journal(tmp_path, "old.smoke")  # resuming it would mix two schemas in one file


def test_load_reads_the_newest_run_unless_asked(tmp_path):
    _write_run(tmp_path, "20260101-000000-aaaaaa.smoke", ["x", "y"], mtime=1_000_000)
    _write_run(tmp_path, "20260102-000000-bbbbbb.smoke", ["x"], mtime=2_000_000)
    assert set(load(tmp_path)["run_id"]) == {"20260102-000000-bbbbbb"}
    assert len(load(tmp_path)) == 2  # one case, two checks: no row twice
    every = load(tmp_path, run="all")
    assert len(every) == 6 and set(every["run_id"]) == {"20260101-000000-aaaaaa",
                                                         "20260102-000000-bbbbbb"}
    older = load(tmp_path, run="20260101-000000-aaaaaa")
    assert sorted(older["case_id"]) == ["x", "x", "y", "y"]
    with pytest.raises(KeyError, match="no run 'nope'.*20260102-000000-bbbbbb"):
        load(tmp_path, run="nope")


def test_load_merges_the_shards_and_the_journal_of_one_run(tmp_path):
    _write_run(tmp_path, "old.smoke", ["w"], mtime=1_000_000)
    _write_run(tmp_path, "ci-7.smoke.shard0of2", ["x"], mtime=2_000_000)
    _write_run(tmp_path, "ci-7.smoke.shard1of2", ["y"], mtime=2_000_001)
    Journal(tmp_path, "ci-7.smoke.shard2of3").append(_rows("z", run="ci-7"))  # unfinished
    assert sorted(set(load(tmp_path)["case_id"])) == ["x", "y", "z"]


def test_schema_5_files_load_with_headroom_read_as_used(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    old = [{"run_id": "v5", "case_id": "a", "check": "accuracy", "status": "pass",
            "headroom": 0.4}]
    table = pa.Table.from_pylist(old)
    pq.write_table(table.replace_schema_metadata({b"moecert_schema_version": b"5"}),
                   tmp_path / "v5.smoke.parquet")
    (tmp_path / "j").mkdir()
    (tmp_path / "j" / "v5.smoke.jsonl").write_text(
        json.dumps({"moecert_schema_version": 5}) + "\n"
        + json.dumps({"case_id": "b", "rows": [{**old[0], "case_id": "b"}]}) + "\n")
    for path in (tmp_path / "v5.smoke.parquet", tmp_path / "j" / "v5.smoke.jsonl"):
        frame = load(path)
        assert frame["used"].tolist() == [0.4] and "headroom" not in frame.columns
    with pytest.raises(ResultsError, match="this journal is of schema version 5"):
        Journal(tmp_path / "j", "v5.smoke")  # a run of another version is not resumed
    table = pa.Table.from_pylist(old).replace_schema_metadata({b"moecert_schema_version": b"4"})
    pq.write_table(table, tmp_path / "v4.smoke.parquet")
    with pytest.raises(ResultsError, match="these results are of schema version 4"):
        load(tmp_path / "v4.smoke.parquet")
