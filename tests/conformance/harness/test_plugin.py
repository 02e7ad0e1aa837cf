"""The pytest plugin in real pytest sessions (pytester): unclaimed cases are skips with the
backend's reason, a session in which no claimed case ran fails, a mistyped option is one usage
error, and a backend that hangs or kills its process costs its case, not the session.

Each session runs one or two small cases; the backends below are registered by a module in the
session's folder, imported with --moecert-import here and in the case worker."""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from collections import Counter

import pandas as pd
import pytest
from moecert.conformance.plugin import session_verdict
from moecert.kernels import backend_names
from moecert.kernels.registry import unregister_backend
from moecert.reports import load

pytest_plugins = ["pytester"]

VENDOR = '''
import os
import time

from moecert.kernels import register_backend
from moecert.kernels.native import TorchBackend


class Bf16Only(TorchBackend):
    name = "t-bf16-only"

    def claims(self, quant, problem, platform):
        return None if quant.scheme == "bf16" else "this test backend does bf16 only"


class Nothing(TorchBackend):
    name = "t-nothing"

    def claims(self, quant, problem, platform):
        return "this test backend claims nothing"


class Hangs(Bf16Only):
    name = "t-hangs"

    def forward(self, layer, x, *args):
        time.sleep(3600)


class Dies(Bf16Only):
    name = "t-dies"

    def forward(self, layer, x, *args):
        os._exit(3)  # as a segfault in a native kernel would


for backend in (Bf16Only(), Nothing(), Hangs(), Dies()):
    register_backend(backend)
'''
# pytester drops the modules imported after its fixture was made; pandas' Arrow extension
# types imported by a session would then register with pyarrow twice on the next Parquet read
# in this process: import them before any session
pd.io.parquet.get_engine("pyarrow")

NAMES = ("t-bf16-only", "t-nothing", "t-hangs", "t-dies")
# One case per scheme: M = 1 on the smoke suite's edge base (bf16 and fp16 alike).
ONE_SHAPE = "M1.K128.N128.E4.k2/bf16.silu/"


@pytest.fixture
def session(pytester, monkeypatch):
    """Runs a pytest session on the conformance suite in this process (the case worker is a
    process of its own either way, as are xdist's workers)."""
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)  # this process may be one
    monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT", raising=False)
    pytester.makepyfile(vendor_backends=VENDOR)
    pytester.syspathinsert()  # here; and in xdist's workers and the case worker:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        filter(None, [str(pytester.path), os.environ.get("PYTHONPATH")])))

    def run(*args, subprocess=False):
        # xdist's workers take the sys.path this process started with, which lacks the
        # session's folder: an xdist session runs in a process of its own
        return (pytester.runpytest_subprocess if subprocess else pytester.runpytest)(
            "--pyargs", "moecert.conformance", "-p", "no:cacheprovider", "-c", "/dev/null",
            "--rootdir", str(pytester.path), "--moecert-import", "vendor_backends",
            "--moecert-check", "accuracy", "-rs", *args)

    yield run
    for name in NAMES:  # a later session imports the module afresh
        if name in backend_names():
            unregister_backend(name)


def test_unclaimed_cases_are_skips_with_the_backends_reason(session, pytester):
    result = session("--moecert-backend", "t-bf16-only", "--moecert-scheme", "bf16",
                     "--moecert-scheme", "fp16", "-k", ONE_SHAPE, "--junitxml", "out.xml",
                     "--moecert-results", "res", "--moecert-junit", "moecert.xml")
    result.assert_outcomes(passed=1, skipped=1)
    # moecert's own JUnit: one testcase per (case, check), as the rows' statuses: the
    # unclaimed case's claims row skipped (unsupported)
    ours = ET.parse(pytester.path / "moecert.xml").getroot()
    assert {(c.get("classname"), c.find("skipped") is not None)
            for c in ours.iter("testcase")} == {("t-bf16-only.bf16", False),
                                                ("t-bf16-only.fp16", True)}
    rows = load(pytester.path / "res")
    assert int(ours.get("skipped")) == rows["status"].isin(["skip", "unsupported"]).sum()
    assert result.ret == 0
    result.stdout.fnmatch_lines(["moecert: green: all 1 claimed case(s) passed (backend "
                                 "t-bf16-only 1 of 2 claimed)"])
    result.stdout.fnmatch_lines(["SKIPPED*not claimed: this test backend does bf16 only*"])
    suite = ET.parse(pytester.path / "out.xml").getroot().find("testsuite")
    assert suite.get("skipped") == "1" and suite.get("tests") == "2"


@pytest.mark.parametrize("xdist", [False, True], ids=["serial", "xdist"])
def test_a_session_where_no_claimed_case_ran_fails(session, pytester, xdist):
    # in-process: the verdict is counted from the test reports, wherever the cases ran
    result = session("--moecert-backend", "t-nothing", "--moecert-scheme", "bf16",
                     "--moecert-scheme", "fp16", "-k", ONE_SHAPE, "--moecert-in-process",
                     "--moecert-results", "res", "--moecert-junit", "moecert.xml",
                     "--junitxml", "out.xml", "-rfs",
                     *(["-p", "xdist", "-n", "2"] if xdist else []), subprocess=xdist)
    # the verdict is one failed test more: in pytest's counts, short summary and JUnit
    result.assert_outcomes(skipped=2, failed=1)
    rows = load(pytester.path / "res")  # the session is one run, whichever worker wrote it
    assert rows["case_id"].nunique() == 2 and set(rows["status"]) == {"unsupported"}
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    line = "moecert: not green: no claimed case ran a check (backend t-nothing 0 of 2 claimed)"
    result.stdout.fnmatch_lines([line, "*short test summary info*",
                                 "FAILED moecert::verdict - moecert: not green: no claimed*"])
    for name in ("moecert.xml", "out.xml"):  # moecert's JUnit and pytest's own
        root = ET.parse(pytester.path / name).getroot()
        verdicts = [c for c in root.iter("testcase") if c.find("failure") is not None]
        assert len(verdicts) == 1, name
        assert "not green: no claimed case ran a check" in verdicts[0].find(
            "failure").get("message")


@pytest.mark.parametrize("option, value, says", [
    ("--moecert-backend", "torhc", "unknown backend 'torhc'*known: *torch*"),
    ("--moecert-scheme", "bf61", "unknown scheme 'bf61'*known: *bf16*"),
    ("--moecert-check", "acuracy", "unknown check 'acuracy'*known: *accuracy*"),
    ("--moecert-suite", "smok", "unknown suite 'smok'*known: smoke, ci, certify"),
    ("--moecert-shard", "3/2", "shard '3/2': I must be in 0..N-1"),
    ("--moecert-shard", "abc", "shard 'abc': expected I/N*"),
    ("--moecert-timeout", "-1", "expected a positive number of seconds, got *-1*"),
    ("--moecert-xfail", "nope.toml", "file nope.toml: no such file (nor a shipped list: *)"),
    ("--moecert-xfail", "bad.toml", "file bad.toml: *"),
    ("--moecert-device", "cuda:7", "cuda:7: *"),
    ("--moecert-import", "no_such_module", "cannot import no_such_module: *"),
])
def test_a_mistyped_option_is_one_usage_error(session, pytester, option, value, says):
    pytester.makefile(".toml", bad="[[entry]\nbackend = ")  # malformed TOML
    result = session(option, value)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: {option}: {says}"])
    assert len([line for line in result.stderr.lines if line.strip()]) == 1
    assert "collected" not in result.stdout.str()  # nothing ran


def test_a_hanging_backend_costs_its_case(session):
    result = session("--moecert-backend", "t-hangs", "--moecert-scheme", "bf16", "-k",
                     ONE_SHAPE, "--moecert-timeout", "5")
    result.assert_outcomes(failed=2)  # the case, and the session's verdict (moecert::verdict)
    result.stdout.fnmatch_lines(
        ["timeout accuracy: no result after 5 s (--timeout); worker killed*"])


def test_a_backend_that_kills_its_process_costs_its_case(session):
    result = session("--moecert-backend", "t-dies", "--moecert-backend", "t-bf16-only",
                     "--moecert-scheme", "bf16", "-k", ONE_SHAPE)
    # the worker restarts for the next case; the verdict is one failed test more
    result.assert_outcomes(failed=2, passed=1)
    result.stdout.fnmatch_lines(["crash accuracy: the worker process died (exit code 3)*",
                                 "rerun: moecert run --device cpu --import vendor_backends "
                                 "--check accuracy --case '{*t-dies*}'"])


def test_the_verdict_counts_claimed_cases_per_backend():
    assert session_verdict(Counter()) is None
    assert session_verdict(Counter({("a", False, False, False): 3})) == (
        False, "moecert: not green: no claimed case ran a check (backend a 0 of 3 claimed)")
    assert session_verdict(Counter({("a", False, False, False): 3, ("b", True, False, False): 1,
                                    ("a", True, False, False): 2})) == (
        True, "moecert: green: all 3 claimed case(s) passed (backend a 2 of 5 claimed, "
              "b 1 of 1 claimed)")
    assert session_verdict(Counter({("a", False, False, False): 1,
                                    ("a", None, True, False): 1})) == (
        False, "moecert: not green: 1 case(s) failed (backend a 0 of 2 claimed, 1 with its "
               "claim unknown)")
    assert session_verdict(Counter({("a", True, False, False): 1,
                                    ("a", None, False, True): 1})) == (
        False, "moecert: not green: 1 claimed case(s) not run: they need more memory than "
               "this machine has (backend a 1 of 2 claimed, 1 oversize, 1 with its claim "
               "unknown)")
