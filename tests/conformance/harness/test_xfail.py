"""Expected failures are strict: a failing match becomes xfail, a passing match fails, an entry
that matches nothing is reported."""

from __future__ import annotations

import itertools
import re

import pytest
from moecert.conformance.harness.xfail import DEFAULT_PATH, XfailList

# what the test entries expect: a "fail" whose message contains "m" (every _row's message)
E = 'status = ["fail"]\nmessage = "m"\n'


def _row(status, check="accuracy", case="v/awq-int4/M1/bf16/s0", message="m", **metrics):
    return {"backend": "v", "case_id": case, "check": check, "status": status,
            "message": message, **metrics}


@pytest.fixture
def xfails(tmp_path):
    path = tmp_path / "x.toml"
    path.write_text(f'[[xfail]]\nbackend = "v"\n{E}case_id = "v/awq-int4*"\n'
                    'checks = ["accuracy"]\nreason = "tracked in v#1"\n\n'
                    f'[[xfail]]\nbackend = "v"\n{E}case_id = "v/gptq*"\n'
                    'reason = "tracked in v#2"\n')
    return XfailList.load(path)


def test_failing_match_is_expected(xfails):
    (row,) = xfails.apply([_row("fail")])
    assert row["status"] == "xfail" and "v#1" in row["message"]


def test_passing_match_fails_strictly(xfails):
    (row,) = xfails.apply([_row("pass")])
    assert row["status"] == "fail" and "XPASS" in row["message"]


def test_non_matching_rows_are_untouched(xfails):
    assert len(xfails.entries) == 2  # a parser that dropped entries would pass the rest
    rows = [_row("fail", check="reload"), _row("pass", case="v/bf16/M1/bf16/s0")]
    assert xfails.apply(rows) == rows
    assert xfails.apply([_row("fail")])[0]["status"] == "xfail"  # while a match changes


def test_a_different_failure_is_a_failure(xfails):
    """The entry expects status fail with "m" in the message: a crash, or a fail with
    another message, on the same rows stays what it is, saying what was expected."""
    crash, other = xfails.apply([_row("crash"), _row("fail", message="rel_fro 0.9 > 0.1")])
    assert crash["status"] == "crash" and "status crash, expected fail" in crash["message"]
    assert other["status"] == "fail" and "does not match 'm'" in other["message"]
    # the rows say what the entry expected; the entry is not stale for that (a row of a
    # folder whose layer fails to load fails every check otherwise than the list expects)
    assert xfails.unused(reached_only=True) == []


def test_rows_failing_otherwise_leave_an_entry_for_other_runs(tmp_path):
    """A list serves many runs (schemes, folders): on a run whose covered rows all fail
    otherwise (a folder whose layer does not load) or do not run, no entry is stale (found
    with xfail-transformers.toml on ct-w8a8-int8-qwen3moe: 'stale ... exit 1'); an XPASS
    and a shadowed entry still are."""
    xfails = _load(tmp_path, f'[[xfail]]\nbackend = "v"\n{E}case_id = "v/a*"\nreason = "r0"\n\n'
                             f'[[xfail]]\nbackend = "v"\n{E}case_id = "v/a*"\nreason = "r1"\n')
    xfails.apply([_row("error", case="v/a/1", message="load failed"),
                  _row("skip", case="v/a/2")])
    assert xfails.unused(reached_only=True) == []
    (row,) = xfails.apply([_row("fail", case="v/a/3")])  # entry 0 takes it: entry 1 shadowed
    assert row["status"] == "xfail"
    assert [e.reason for e in xfails.unused(reached_only=True)] == ["r1"]


def test_metric_bounds_are_an_expectation(tmp_path):
    xfails = _load(tmp_path, '[[xfail]]\nbackend = "v"\nstatus = "fail"\n'
                             'metrics = { rel_fro = [0.1, 0.3] }\nreason = "r"\n')
    inside, above, missing = xfails.apply([_row("fail", rel_fro=0.2), _row("fail", rel_fro=0.9),
                                           _row("fail")])
    assert inside["status"] == "xfail"
    assert above["status"] == "fail" and "rel_fro 0.9 outside" in above["message"]
    assert missing["status"] == "fail" and "no rel_fro" in missing["message"]


@pytest.mark.parametrize(("expect", "error"), [
    ("", "needs status"),
    ('status = ["fail"]\n', "needs message .* or metrics"),
    ('status = ["broken"]\nmessage = "m"\n', "needs status"),
    ('status = "fail"\nmessage = "("\n', "message .* is not a regular expression"),
    ('status = "fail"\nmetrics = { rel_fro = [0.3, 0.1] }\n',
     "metrics.rel_fro must be .lo, hi. with lo <= hi"),
])
def test_an_entry_must_say_what_failure_it_expects(tmp_path, expect, error):
    with pytest.raises(ValueError, match=f"xfail entry 0: {error}"):
        _load(tmp_path, f'[[xfail]]\nbackend = "v"\n{expect}reason = "r"\n')


def test_a_cited_reproduction_must_exist(tmp_path):
    with pytest.raises(ValueError, match="cites tools/vllm_repro/no_such_script.py, which "
                                         "does not exist"):
        _load(tmp_path, f'[[xfail]]\nbackend = "v"\n{E}reason = "see '
                        'tools/vllm_repro/no_such_script.py"\n')
    assert _load(tmp_path, f'[[xfail]]\nbackend = "v"\n{E}reason = "see '
                           'tools/vllm_repro/gptq_v2_sym.md"\n').entries


@pytest.mark.parametrize("name", ["xfail.toml", "xfail-vllm.toml"])
def test_every_shipped_entry_cites_a_reproduction_that_exists(name):
    """The shipped lists' reasons each cite a file under tools/ (checked to exist at load);
    a list's entries expect a status and a message or metric bounds (load refuses less)."""
    from moecert.conformance.harness.expectations import CITED
    from moecert.conformance.harness.xfail import DEFAULT_PATH

    path = DEFAULT_PATH.with_name(name)
    entries = XfailList.load(path).entries
    assert len(entries) == len(re.findall(r"^\[\[xfail\]\]", path.read_text(), re.M))
    for i, e in enumerate(entries):
        assert CITED.search(e.reason), f"{name} entry {i} cites no tools/ reproduction"
        assert e.status and (e.message or e.metrics), (name, i)


def test_an_entry_a_run_reached_but_never_used_is_stale(xfails):
    """reached_only: entries with rows in this run that expected none of them (shadowed by
    an earlier entry, or the rows passed); an entry covering no row is left to
    tools/xfail_coverage.py, which reads every run of a list."""
    xfails.apply([_row("unsupported", case="v/gptq-int4/M1/bf16/s0")])  # not run: not reached
    assert xfails.unused(reached_only=True) == []
    xfails.apply([_row("pass", case="v/gptq-int4/M1/bf16/s0")])  # entry 1 reached, XPASS
    assert [e.reason for e in xfails.unused(reached_only=True)] == ["tracked in v#2"]
    assert [e.reason for e in xfails.unused()] == ["tracked in v#1", "tracked in v#2"]


def test_unused_entries_are_reported(xfails):
    xfails.apply([_row("fail")])
    assert [e.reason for e in xfails.unused()] == ["tracked in v#2"]


def test_entry_without_reason_is_refused(tmp_path):
    path = tmp_path / "x.toml"
    path.write_text('[[xfail]]\nbackend = "v"\n' + E + '')
    with pytest.raises(ValueError, match="reason"):
        XfailList.load(path)


def test_the_packaged_list_loads():
    assert XfailList.load().entries == []


def test_a_shipped_list_is_found_by_its_name():
    """`--xfail vllm` is conformance/harness/xfail-vllm.toml of the installed package (vLLM's
    defects), so a pip-installed moecert gates a vLLM build without a checkout."""
    from moecert.conformance.harness.option_values import UsageError, xfail_list

    shipped = xfail_list("vllm")
    assert shipped.entries and all(b.startswith("vllm") for e in shipped.entries
                                         for b in e.backends)
    names = sorted(p.stem.removeprefix("xfail-") for p in DEFAULT_PATH.parent.glob("xfail-*.toml"))
    assert "vllm" in names
    with pytest.raises(UsageError, match=re.escape(f"nor a shipped list: {', '.join(names)})")):
        xfail_list("no-such-list")


def _load(tmp_path, text):
    path = tmp_path / "x.toml"
    path.write_text(text)
    return XfailList.load(path)


def test_a_typo_in_a_key_is_an_error_naming_file_entry_and_key(tmp_path):
    """`chek =` would otherwise leave the entry without checks: every check of the case."""
    with pytest.raises(ValueError, match=r"x\.toml: xfail entry 1: unknown key 'chek' "
                                         r"\(did you mean 'checks'\?\)"):
        _load(tmp_path, '[[xfail]]\nbackend = "v"\n' + E + 'reason = "r"\n\n'
                        '[[xfail]]\nbackend = "v"\n' + E + 'chek = ["accuracy"]\nreason = "r"\n')


def test_the_old_keys_are_refused_with_the_new_names(tmp_path):
    with pytest.raises(ValueError, match="unknown key 'case' \\(did you mean 'case_id'"):
        _load(tmp_path, '[[xfail]]\nbackend = "v"\n' + E + 'case = "*"\nreason = "r"\n')


@pytest.mark.parametrize("checks", ['"accuracy"', "[]", '["acuracy"]'])
def test_checks_are_a_list_of_known_check_names(tmp_path, checks):
    with pytest.raises(ValueError, match="xfail entry 0: .*check"):
        _load(tmp_path, f'[[xfail]]\nbackend = "v"\n{E}checks = {checks}\nreason = "r"\n')


def test_one_entry_covers_several_checks_and_reports_each_one_unused(tmp_path):
    xfails = _load(tmp_path, '[[xfail]]\nbackend = "v"\n' + E + 'checks = ["accuracy", "reload"]\n'
                             'reason = "r"\n')
    rows = xfails.apply([_row("fail"), _row("fail", check="reload"),
                         _row("fail", check="exact")])
    assert [r["status"] for r in rows] == ["xfail", "xfail", "fail"]
    xfails = _load(tmp_path, '[[xfail]]\nbackend = "v"\n' + E + 'checks = ["accuracy", "reload"]\n'
                             'reason = "r"\n')
    xfails.apply([_row("fail")])
    (stale,) = xfails.unused()
    assert stale.checks == ("reload",)


def test_the_vllm_list_holds_one_entry_per_finding():
    """Entries that differed only in their check are one entry with several checks."""
    from moecert.conformance.harness.option_values import xfail_list

    entries = xfail_list("vllm").entries
    keys = [(e.backend, e.case_id, e.fields, e.reason) for e in entries]
    assert not [a for a, b in itertools.pairwise(keys) if a == b]


def test_requires_names_packages_and_is_checked(tmp_path):
    path = tmp_path / "x.toml"
    path.write_text(f'[[xfail]]\nbackend = "v"\n{E}requires = ["amd-quark"]\nreason = "r"\n')
    assert XfailList.load(path).entries[0].requires == ("amd-quark",)
    path.write_text(f'[[xfail]]\nbackend = "v"\n{E}requires = "amd-quark"\nreason = "r"\n')
    with pytest.raises(ValueError, match="entry 0: requires must be a list of package names"):
        XfailList.load(path)


def test_coverage_is_checked_per_required_package(tmp_path, monkeypatch, capsys):
    """tools/xfail_coverage.py: without --requires, the entries that require nothing; with
    --requires PKG, those that require PKG; a row is matched against the whole list (first
    entry wins), so an entry of the other environment never takes a row of this one."""
    import importlib.util

    import pandas as pd
    from moecert.conformance.harness.expectations import CHECKOUT

    spec = importlib.util.spec_from_file_location(
        "xfail_coverage", CHECKOUT / "tools" / "xfail_coverage.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    path = tmp_path / "x.toml"
    path.write_text(f'[[xfail]]\nbackend = "v"\n{E}case_id = "v/awq*"\nreason = "r1"\n\n'
                    f'[[xfail]]\nbackend = "v"\n{E}case_id = "v/*"\nrequires = ["amd-quark"]\n'
                    'reason = "r2"\n')
    rows = [{**_row("xfail", case="v/awq-int4/M1/bf16/s0"), "run_id": "a"}]
    monkeypatch.setattr("moecert.reports.load", lambda *a, **k: pd.DataFrame(rows))
    assert tool.main([str(path), "results"]) == 0  # r1 used; r2 is the other env's
    assert "1 entries (1 checked elsewhere)" in capsys.readouterr().out
    assert tool.main([str(path), "results", "--requires", "amd-quark"]) == 1  # r2 unused
    assert "error: xfail entry expected no failure of any run: backend v, case_id v/*" \
        in capsys.readouterr().out
    rows.append({**_row("xfail", case="v/int8-w8a8/M1/bf16/s0"), "run_id": "a"})
    assert tool.main([str(path), "results", "--requires", "amd-quark"]) == 0
