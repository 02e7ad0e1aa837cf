"""`moecert report` and the frames behind it: known regressions are each found (exit 1),
identical runs are not (exit 0), unreadable results are one line and exit 2."""

from __future__ import annotations

import pytest
from moecert.conformance.cli.app import main
from moecert.reports import (
    cases,
    compare_runs,
    load,
    status_counts,
    status_matrix,
    worst_used,
)
from moecert.reports.schema import COLUMN_DTYPES, STATUS_DTYPE


def _runs(s):
    """A baseline and a current run with one change of every kind."""
    base = [s.case_rows("steady", run="b"),
            s.case_rows("breaks", run="b"),
            s.case_rows("fixed", run="b", status="fail", used=3.0),
            s.case_rows("gone", run="b"),
            s.case_rows("grows", run="b", rel_fro=1e-3),
            s.case_rows("nears", run="b", used=0.5),
            s.case_rows("slows", run="b", kernel_s=1.0),
            s.case_rows("noise", run="b", max_abs_scaled=1e-5)]
    current = [s.case_rows("steady", run="c"),
               s.case_rows("breaks", run="c", status="fail", used=2.0,
                           message="against the float64 reference: rel_fro 8e-3 > 4e-3"),
               s.case_rows("fixed", run="c"),
               s.case_rows("grows", run="c", rel_fro=2.5e-3),  # x2.5, at 0.6 of 4e-3
               s.case_rows("nears", run="c", used=0.85),
               s.case_rows("slows", run="c", kernel_s=2.0),
               # x3 but at 0.004 of its threshold: noise, not drift
               s.case_rows("noise", run="c", max_abs_scaled=3e-5),
               s.case_rows("added", run="c"),
               s.case_rows("added-bad", run="c", status="error", message="RuntimeError: x")]
    return base, current


def _changes(diff):
    return {(r["change"], r["case_id"].split("/")[2], r["metric"] if isinstance(r["metric"], str)
             else None) for r in diff.to_dict("records")}


def test_every_kind_of_change_is_found(tmp_path, synthetic):
    base, current = _runs(synthetic)
    b = load(synthetic.write(tmp_path / "b", base))
    c = load(synthetic.write(tmp_path / "c", current))
    assert _changes(compare_runs(b, c)) == {
        ("new_failure", "breaks", None), ("new_failure", "added-bad", None),
        ("gone", "gone", None), ("fixed", "fixed", None), ("new", "added", None),
        ("error_growth", "grows", "rel_fro"), ("error_growth", "nears", "used"),
        ("slower", "slows", "kernel_s")}
    # the suite no longer holds the case: dropped, not a regression
    diff = compare_runs(b, c, suite_ids=set(c["case_id"]))
    assert ("dropped", "gone", None) in _changes(diff)
    assert list(compare_runs(b, b)["change"]) == []


def test_report_exits_1_on_each_regression_and_0_on_identical_runs(tmp_path, synthetic, capsys):
    base, current = _runs(synthetic)
    b = synthetic.write(tmp_path / "b", base)
    assert main(["report", str(b), "--baseline", str(b)]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("no regression")
    regressions = {"breaks", "grows", "nears", "slows", "added-bad"}
    for i, rows in enumerate(current):
        name = rows[0]["case_id"].split("/")[2]
        # the baseline, with this one case as the current run has it
        one = [r for r in base if r[0]["case_id"] != rows[0]["case_id"]] + [rows]
        one = [[{**row, "run_id": f"c{i}"} for row in r] for r in one]
        code = main(["report", str(synthetic.write(tmp_path / f"c{i}", one)),
                     "--baseline", str(b)])
        out = capsys.readouterr().out.splitlines()
        assert code == int(name in regressions), (name, out[-1])
        assert out[-1].startswith("REGRESSED" if name in regressions else "no regression")


# A case of the smoke suite for torch and fp16 today.
REAL_ID = "torch/fp16/M17.K128.N128.E4.k2/bf16.silu/s0"


@pytest.mark.parametrize("suite, gone, code", [
    ("smoke", REAL_ID, 1),  # the suite still has it: a regression
    ("smoke", "torch/fp16/retired/s0", 0),  # the suite dropped it
    (None, "torch/fp16/retired/s0", 1),  # which suite is unknown: it counts
])
def test_a_case_gone_is_a_regression_unless_the_suite_dropped_it(tmp_path, synthetic, capsys,
                                                                  suite, gone, code):
    def rows(run, ids):
        return [[{**r, "suite": suite, "case_id": i} for r in synthetic.case_rows("x", run=run)]
                for i in ids]

    b = synthetic.write(tmp_path / "b", rows("b", ["torch/fp16/kept/s0", gone]))
    c = synthetic.write(tmp_path / "c", rows("c", ["torch/fp16/kept/s0"]))
    assert main(["report", str(c), "--baseline", str(b)]) == code
    assert ("gone" if code else "dropped") in capsys.readouterr().out


def test_the_frames_of_one_run(tmp_path, synthetic):
    rows = load(synthetic.write(tmp_path / "r", [
        synthetic.case_rows("a"), synthetic.case_rows("b", status="fail", used=1.5),
        synthetic.case_rows("c", claimed=False), synthetic.case_rows("d", scheme="bf16")]))
    per_case = cases(rows)
    assert per_case["status"].dtype == STATUS_DTYPE
    assert list(per_case["status"]) == ["fail", "unsupported", "pass", "pass"]  # worst first
    assert per_case["case_id"].iloc[0].endswith("/b/s0") and per_case["check"].iloc[0] == \
        "accuracy"
    counts = status_counts(rows)
    assert counts.loc[("torch", "fp16"), "fail"] == 1
    assert counts.loc[("torch", "fp16"), "unsupported"] == 1  # unclaimed: never a pass
    assert counts.loc[("torch", "bf16"), "pass"] == 1
    head = worst_used(rows).set_index("tolerance")
    assert head.loc["fp16/*/*/*/*", "used"] == 1.5
    assert head.loc["fp16/*/*/*/*", "failed"] == 1


def test_dtypes_are_fixed_whatever_the_mix_of_files(tmp_path, synthetic):
    synthetic.write(tmp_path / "r" / "x.smoke.shard0of2.parquet",
                    synthetic.case_rows("a", run="x"))
    # a shard of nothing but a setup error: no metrics, no thresholds, claimed unknown
    setup = {**synthetic.case_rows("b", run="x")[0], "check": "setup", "status": "error",
             "claimed": None}
    synthetic.write(tmp_path / "r" / "x.smoke.shard1of2.parquet", [setup])
    rows = load(tmp_path / "r")
    assert len(rows) == 3
    assert {c: str(rows[c].dtype) for c in COLUMN_DTYPES} == {
        c: str(d) for c, d in COLUMN_DTYPES.items()}


@pytest.mark.parametrize("damage, says", [
    ("truncated", "not a readable Parquet file (truncated or corrupt?)"),
    ("garbage", "not a readable Parquet file (truncated or corrupt?)"),
    ("old-schema", "these results carry no schema version"),
    ("old-journal", "this journal has no schema version on its first line; this moecert reads "
                    "schema version 7"),
    ("empty", "no result rows"),
])
def test_unreadable_results_are_one_line_and_exit_2(tmp_path, synthetic, capsys, damage, says):
    folder = tmp_path / "r"
    good = synthetic.write(folder / "x.smoke.shard0of2.parquet", synthetic.case_rows("a",
                                                                                     run="x"))
    bad = folder / "x.smoke.shard1of2.parquet"
    if damage == "truncated":
        bad.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    elif damage == "garbage":
        bad.write_bytes(b"PAR1" + b"\x00" * 100)
    elif damage == "old-schema":  # as the previous moecert wrote it: pandas, no version
        load(good).drop(columns=["problem_id"]).to_parquet(bad)
    elif damage == "old-journal":
        bad = folder / "x.smoke.shard1of2.jsonl"
        bad.write_text('{"case_id": "a", "rows": [{"case_id": "a", "status": "pass"}]}\n')
    else:
        good.unlink()
        bad = folder
    assert main(["report", str(folder), "--baseline", str(folder)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(bad) in err and says in err, err


def test_the_status_matrix_judges_claimed_cases(tmp_path, synthetic):
    """A backend that claims some of a scheme's cases, all passing, shows pass (its
    unclaimed cases are not its verdict); one that claims none shows unsupported."""
    rows = load(synthetic.write(tmp_path / "r", [
        synthetic.case_rows("a"), synthetic.case_rows("b", claimed=False, status="unsupported"),
        synthetic.case_rows("c", scheme="bf16", claimed=False, status="unsupported"),
        synthetic.case_rows("d", scheme="awq-int4"),
        synthetic.case_rows("e", scheme="awq-int4", claimed=False, status="fail")]))
    matrix = status_matrix(rows)
    assert matrix.loc[("torch", "fp16"), "accuracy"] == "pass"
    assert matrix.loc[("torch", "fp16"), "claims"] == "pass"
    assert matrix.loc[("torch", "bf16"), "accuracy"] == "unsupported"
    assert matrix.loc[("torch", "awq-int4"), "accuracy"] == "fail"  # a failure always shows
