"""Expected failures are strict: a failing match becomes xfail, a passing match fails, an entry
that matches nothing is reported."""

from __future__ import annotations

import pytest
from moecert.conformance.harness.xfail import XfailList


def _row(status, check="accuracy", case="v/awq-int4/M1/bf16/s0"):
    return {"backend": "v", "case_id": case, "check": check, "status": status, "message": "m"}


@pytest.fixture
def xfails(tmp_path):
    path = tmp_path / "x.toml"
    path.write_text('[[xfail]]\nbackend = "v"\ncase = "v/awq-int4*"\ncheck = "accuracy"\n'
                    'reason = "tracked in v#1"\n\n[[xfail]]\nbackend = "v"\ncase = "v/gptq*"\n'
                    'reason = "tracked in v#2"\n')
    return XfailList.load(path)


def test_failing_match_is_expected(xfails):
    (row,) = xfails.apply([_row("fail")])
    assert row["status"] == "xfail" and "v#1" in row["message"]


def test_passing_match_fails_strictly(xfails):
    (row,) = xfails.apply([_row("pass")])
    assert row["status"] == "fail" and "XPASS" in row["message"]


def test_non_matching_rows_are_untouched(xfails):
    rows = [_row("fail", check="reload"), _row("pass", case="v/bf16/M1/bf16/s0")]
    assert xfails.apply(rows) == rows


def test_unused_entries_are_reported(xfails):
    xfails.apply([_row("fail")])
    assert [e.reason for e in xfails.unused()] == ["tracked in v#2"]


def test_entry_without_reason_is_refused(tmp_path):
    path = tmp_path / "x.toml"
    path.write_text('[[xfail]]\nbackend = "v"\n')
    with pytest.raises(ValueError, match="reason"):
        XfailList.load(path)


def test_the_packaged_list_loads():
    assert XfailList.load().entries == []


def test_a_shipped_list_is_found_by_its_name():
    """`--xfail vllm` is conformance/harness/xfail-vllm.toml of the installed package (vLLM's
    defects), so a pip-installed moecert gates a vLLM build without a checkout."""
    from moecert.conformance.cli.options import UsageError, xfail_list

    shipped = xfail_list("vllm")
    assert shipped.entries and all(e.backend.startswith("vllm") for e in shipped.entries)
    with pytest.raises(UsageError, match="nor a shipped list: vllm"):
        xfail_list("no-such-list")
