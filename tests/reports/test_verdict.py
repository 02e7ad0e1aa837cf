"""reports/verdict.py: the words and exit code of a run's verdict (issue 40): an unfinished
run, an unclaimed case that would not fit, a case lost before its claim was known."""

from __future__ import annotations

import pandas as pd
from moecert.reports.verdict import Completion, Tally, tally_frame, tally_rows, verdict


def _row(case, status, claimed, backend="xpu"):
    return {"case_id": case, "backend": backend, "status": status, "claimed": claimed}


def test_only_a_claimed_case_is_oversize():
    rows = [_row("a", "oversize", False), _row("b", "oversize", True, "torch"),
            _row("c", "oversize", None, "torch")]
    for tallies in (tally_frame(pd.DataFrame(rows)), _by_rows(rows)):
        assert tallies["xpu"].oversize == 0 and tallies["xpu"].claimed == 0
        assert tallies["torch"].oversize == 2
        v = verdict(tallies)
        assert v.line == ("not green: 2 claimed case(s) not run: they need more memory than "
                          "this machine has (backend torch 1 of 2 claimed, 2 oversize, 1 with "
                          "its claim unknown, xpu 0 of 1 claimed)")
    unclaimed = verdict(tally_frame(pd.DataFrame(rows[:1])))
    assert unclaimed.line == "not green: no claimed case ran a check (backend xpu 0 of 1 claimed)"


def _by_rows(rows):
    tallies = {}
    for row in rows:
        tally_rows(tallies, [row])
    return tallies


def test_a_case_lost_before_its_claim_is_a_failure_not_unclaimed():
    rows = [_row("a", "timeout", None, "torch"), _row("b", "pass", True, "torch")]
    v = verdict(tally_frame(pd.DataFrame(rows)))
    assert v.code == 1
    assert v.line == ("not green: 1 case(s) failed: 1 timeout (backend torch 1 of 2 claimed, "
                      "1 with its claim unknown)")


def test_an_unfinished_run_is_not_green_whatever_its_rows():
    tallies = _by_rows([_row("a", "pass", True, "torch")])
    assert verdict(tallies).green
    assert verdict(tallies, Completion(1, 1, True)).green
    v = verdict(tallies, Completion(648, 1, False))
    assert not v.green and v.line == ("not green: not finished: 1 of 648 cases (backend torch "
                                      "1 of 1 claimed)")
    # stopped early although its file was written (a pytest session cut short)
    assert verdict(tallies, Completion(3, 1, True)).line.startswith(
        "not green: not finished: 1 of 3 cases")
    # every case done, but the run never reached its end (killed while writing its file)
    assert "did not reach its end" in verdict(tallies, Completion(1, 1, False)).line
    # an older moecert's journal: no plan recorded, and never green
    old = verdict(tallies, Completion(None, 1, False))
    assert not old.green and "how many it planned is not recorded" in old.line
    # a finished older Parquet file (no plan) is judged by its rows
    assert verdict(tallies, Completion(None, 1, True)).green


def test_every_reason_that_holds_is_said():
    tallies = _by_rows([_row("a", "fail", True, "torch"), _row("b", "oversize", True, "torch")])
    line = verdict(tallies, Completion(5, 2, False)).line
    assert line.startswith("not green: not finished: 2 of 5 cases; 1 case(s) failed: 1 fail; "
                           "1 claimed case(s) not run: they need more memory")


def test_merged_completion_sums_parts_and_keeps_resume_commands():
    m = Completion.merged([Completion(3, 3, True), Completion(4, 1, False, ("moecert run x",))])
    assert (m.planned, m.done, m.finished, m.resume) == (7, 4, False, ("moecert run x",))
    assert Completion.merged([Completion(None, 2, True), Completion(4, 4, True)]).planned is None
    assert Completion.merged([]) is None
    assert Tally().words("t") == "t 0 of 0 claimed"


def test_retries_are_counted_by_their_reason_and_an_empty_note_is_none():
    from moecert.reports.schema import RETRIED_OUT_OF_MEMORY, RETRIED_UNDER_MPS

    rows = [{**_row(case, "pass", True, "torch"), "retried": note} for case, note in [
        ("a", f"{RETRIED_OUT_OF_MEMORY} (check accuracy: ...); retried once alone on GPU 0"),
        ("b", f"{RETRIED_UNDER_MPS}, where ...; retried once outside the run's MPS daemon"),
        ("c", float("nan")), ("d", None), ("e", "")]]  # as rows read back hold "run once"
    for tallies in (tally_frame(pd.DataFrame(rows)), _by_rows(rows)):
        assert tallies["torch"].words("torch") == (
            "torch 5 of 5 claimed, 1 retried alone after running out of memory, 1 retried "
            "outside MPS after failing on the GPU under it")
