"""Expected failures are strict: a failing match becomes xfail, a passing match fails, an entry
that matches nothing is reported."""

from __future__ import annotations

import itertools

import pytest
from moecert.conformance.harness.xfail import XfailList


def _row(status, check="accuracy", case="v/awq-int4/M1/bf16/s0"):
    return {"backend": "v", "case_id": case, "check": check, "status": status, "message": "m"}


@pytest.fixture
def xfails(tmp_path):
    path = tmp_path / "x.toml"
    path.write_text('[[xfail]]\nbackend = "v"\ncase_id = "v/awq-int4*"\nchecks = ["accuracy"]\n'
                    'reason = "tracked in v#1"\n\n[[xfail]]\nbackend = "v"\ncase_id = "v/gptq*"\n'
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
    from moecert.conformance.harness.option_values import UsageError, xfail_list

    shipped = xfail_list("vllm")
    assert shipped.entries and all(e.backend.startswith("vllm") for e in shipped.entries)
    with pytest.raises(UsageError, match="nor a shipped list: vllm"):
        xfail_list("no-such-list")


def _load(tmp_path, text):
    path = tmp_path / "x.toml"
    path.write_text(text)
    return XfailList.load(path)


def test_a_typo_in_a_key_is_an_error_naming_file_entry_and_key(tmp_path):
    """`chek =` would otherwise leave the entry without checks: every check of the case."""
    with pytest.raises(ValueError, match=r"x\.toml: xfail entry 1: unknown key 'chek' "
                                         r"\(did you mean 'checks'\?\)"):
        _load(tmp_path, '[[xfail]]\nbackend = "v"\nreason = "r"\n\n'
                        '[[xfail]]\nbackend = "v"\nchek = ["accuracy"]\nreason = "r"\n')


def test_the_old_keys_are_refused_with_the_new_names(tmp_path):
    with pytest.raises(ValueError, match="unknown key 'case' \\(did you mean 'case_id'"):
        _load(tmp_path, '[[xfail]]\nbackend = "v"\ncase = "*"\nreason = "r"\n')


@pytest.mark.parametrize("checks", ['"accuracy"', "[]", '["acuracy"]'])
def test_checks_are_a_list_of_known_check_names(tmp_path, checks):
    with pytest.raises(ValueError, match="xfail entry 0: .*check"):
        _load(tmp_path, f'[[xfail]]\nbackend = "v"\nchecks = {checks}\nreason = "r"\n')


def test_one_entry_covers_several_checks_and_reports_each_one_unused(tmp_path):
    xfails = _load(tmp_path, '[[xfail]]\nbackend = "v"\nchecks = ["accuracy", "reload"]\n'
                             'reason = "r"\n')
    rows = xfails.apply([_row("fail"), _row("fail", check="reload"),
                         _row("fail", check="exact")])
    assert [r["status"] for r in rows] == ["xfail", "xfail", "fail"]
    xfails = _load(tmp_path, '[[xfail]]\nbackend = "v"\nchecks = ["accuracy", "reload"]\n'
                             'reason = "r"\n')
    xfails.apply([_row("fail")])
    (stale,) = xfails.unused()
    assert stale.checks == ("reload",)


def test_the_vllm_list_holds_one_entry_per_finding():
    """Entries that differed only in their check are one entry with several checks."""
    from moecert.conformance.harness.option_values import xfail_list

    entries = xfail_list("vllm").entries
    keys = [(e.backend, e.case_id, e.reason) for e in entries]
    assert not [a for a, b in itertools.pairwise(keys) if a == b]
