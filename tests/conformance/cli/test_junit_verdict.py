"""CI systems show JUnit, not exit codes: a run whose verdict is not green carries a failing
testcase named for the verdict with its reason, in `moecert run --junit`, `moecert report
--junit` and `moecert certify --junit` alike (one function, reports.render.junit; the pytest
plugin's file is tested in tests/conformance/harness/test_plugin.py)."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest
from moecert.conformance.cli import app as cli
from moecert.conformance.harness import memory, suites
from moecert.conformance.harness.cases import Case
from moecert.reference import MoEProblem
from moecert.reference.schemes import Variant

from ..certification.test_certify import _cases, _patch_suite, _synthetic

# model-size (weights above schedule.MODEL_SIZE_WEIGHTS): oversize under a 2 GB budget
MID = MoEProblem(M=4, K=2048, N=768, E=64, topk=2)


def _verdict_cases(path) -> list[ET.Element]:
    root = ET.parse(path).getroot()
    return [c for c in root.iter("testcase") if c.get("classname") == "moecert.verdict"]


def _failing_verdict(path, reason: str) -> ET.Element:
    """The one verdict testcase of the JUnit file at `path`: failing, named for `reason`."""
    root = ET.parse(path).getroot()
    (case,) = _verdict_cases(path)
    failure = case.find("failure")
    assert failure is not None and failure.get("type") == "verdict"
    assert case.get("name") == reason, case.get("name")
    assert failure.get("message").startswith(reason)
    assert int(root.get("failures")) >= 1  # a CI system shows the run red
    return case


def test_no_claimed_case_ran_a_check_fails_in_run_and_report_junit(tmp_path, capsys):
    # xpu claims no bf16 case: every row passes or is unsupported, and the run is not green
    argv = ["run", "--backend", "xpu", "--scheme", "bf16", "--check", "oracle", "--in-process",
            "-k", "M1.", "--results", str(tmp_path / "r"), "--device", "cpu"]
    assert cli.main([*argv, "--junit", str(tmp_path / "run.xml")]) == 1
    reason = "not green: no claimed case ran a check"
    case = _failing_verdict(tmp_path / "run.xml", reason)
    assert "(backend xpu 0 of 1 claimed)" in case.find("failure").get("message")
    assert cli.main(["report", str(tmp_path / "r"), "--junit", str(tmp_path / "rep.xml")]) == 1
    _failing_verdict(tmp_path / "rep.xml", reason)
    capsys.readouterr()


@pytest.mark.parametrize("in_process", [False, True], ids=["workers", "in-process"])
def test_a_run_whose_cases_are_all_oversize_fails_in_junit(tmp_path, monkeypatch, capsys,
                                                           in_process):
    monkeypatch.setenv(memory.HOST_MEMORY_VARIABLE, "2G")
    big = Case("torch", Variant("gptq-int4", group_size=128), MID).to_json()
    code = cli.main(["run", "--case", big, "--results", str(tmp_path), "--device", "cpu",
                     "--junit", str(tmp_path / "run.xml"),
                     *(["--in-process"] if in_process else [])])
    assert code == 1
    root = ET.parse(tmp_path / "run.xml").getroot()
    assert root.get("skipped") == "1"  # the case's one oversize row, as the store has it
    _failing_verdict(tmp_path / "run.xml", "not green: 1 claimed case(s) not run: they need "
                                           "more memory than this machine has")
    out = capsys.readouterr().out
    # oversize is not unclaimed: torch claims the case the machine cannot hold
    assert out.strip().splitlines()[-1].endswith("(backend torch 1 of 1 claimed, 1 oversize)")
    assert re.search(r"^torch +1 of 1 ", out, re.M), out
    from moecert.reports import load

    assert load(tmp_path)["claimed"].tolist() == [True]


def test_a_green_run_has_no_verdict_testcase(tmp_path, capsys):
    argv = ["run", "--backend", "torch", "--scheme", "bf16", "--check", "claims",
            "--in-process", "-k", "M1.", "--results", str(tmp_path / "r"), "--device", "cpu",
            "--junit", str(tmp_path / "run.xml")]
    assert cli.main(argv) == 0
    assert _verdict_cases(tmp_path / "run.xml") == []
    root = ET.parse(tmp_path / "run.xml").getroot()
    assert root.get("failures") == "0" and root.get("errors") == "0"
    capsys.readouterr()


def test_certify_junit_carries_the_bundle_verdict(tmp_path, monkeypatch, capsys):
    cases = _patch_suite(monkeypatch, _cases(("fp16", "bf16")))
    # one case missing: NOT CERTIFIED (incomplete), though every row present passed
    folder = _synthetic(tmp_path / "b", cases[1:])
    assert cli.main(["certify", "--assemble", str(folder), "--junit",
                     str(tmp_path / "c.xml")]) == 1
    (case,) = _verdict_cases(tmp_path / "c.xml")
    assert case.get("name").startswith("NOT CERTIFIED: incomplete: 1 case(s)")
    assert "(backend" not in case.get("name")  # the reason, not the facts
    assert case.find("failure").get("message").startswith("NOT CERTIFIED: incomplete")
    # the whole suite: CERTIFIED, no verdict testcase
    folder = _synthetic(tmp_path / "g", cases)
    assert cli.main(["certify", "--assemble", str(folder), "--junit",
                     str(tmp_path / "g.xml")]) == 0
    assert _verdict_cases(tmp_path / "g.xml") == []
    capsys.readouterr()
    assert suites.build_suite("certify", ["torch"]) == cases  # the patch held
