"""A run that did not finish is never green (issue 40): a real `moecert run` killed with
SIGTERM part-way says how far it got and how to resume, and `report`, its JUnit and
`certify --assemble` read the store as "not finished: N of M cases"; `--resume` finishes
it green. The pytest plugin's session cut short (-x) is not finished either."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from moecert.reports import load

HELPERS = Path(__file__).parents[1] / "helpers"
# test-slow (helpers/misbehaving_backends.py): torch's numerics, bf16 only, slow while
# MOECERT_TEST_SLOW_S is set
RUN = ["run", "--backend", "test-slow", "--import", "misbehaving_backends", "--scheme", "bf16",
       "--check", "accuracy", "--check", "claims", "-n", "1", "--results", "out",
       "--run-id", "killed"]


def _env(**extra):
    path = os.pathsep.join(p for p in (str(HELPERS), os.environ.get("PYTHONPATH")) if p)
    return dict(os.environ, PYTHONPATH=path, **extra)


def _cli(args, cwd, **env):
    return subprocess.run([sys.executable, "-m", "moecert.conformance.cli", *args],
                          capture_output=True, text=True, cwd=cwd, env=_env(**env),
                          timeout=600)


def _cases_in(journal: Path) -> int:
    if not journal.exists():
        return 0
    return sum(line.startswith('{"case_id"') for line in journal.read_text().splitlines())


def _verdict_case(path: Path):
    root = ET.parse(path).getroot()
    cases = [c for c in root.iter("testcase") if c.get("classname") == "moecert.verdict"]
    return root, cases


def _interrupted(tmp_path, after_cases: int, sig):
    """A slow `moecert run` started, sent `sig` once `after_cases` cases are in its journal;
    (returncode, stdout, stderr, journal)."""
    journal = tmp_path / "out" / "killed.smoke.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "moecert.conformance.cli", *RUN],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=tmp_path, env=_env(MOECERT_TEST_SLOW_S="0.5"))
    deadline = time.monotonic() + 300
    while (_cases_in(journal) < after_cases and proc.poll() is None
           and time.monotonic() < deadline):
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before it could be interrupted"
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    return proc.returncode, out, err, journal


def test_a_killed_run_is_not_green_until_resumed(tmp_path):
    planned = int(_cli([*RUN, "--list-cases"], tmp_path).stderr.split()[-2])
    assert planned > 3
    rc, out, err, journal = _interrupted(tmp_path, 2, signal.SIGTERM)
    assert rc == 143, out + err
    assert "Traceback" not in err + out
    done = _cases_in(journal)
    assert 2 <= done < planned
    said = re.search(r"interrupted by SIGTERM after (\d+) of (\d+) cases; every finished case "
                     r"is kept in (\S+)\nresume with: (.+)", err)
    assert said, err
    assert (int(said[1]), int(said[2])) == (done, planned)
    assert said[4].startswith("moecert run --backend test-slow") and said[4].endswith(
        "--resume")
    line = f"not green: not finished: {done} of {planned} cases"
    assert out.strip().splitlines()[-1].startswith(line), out
    assert not list((tmp_path / "out").glob("*.parquet"))  # the journal is kept to resume

    # the store says it did not finish: report, its JUnit and the Completion
    from moecert.reports.store import completion

    got = completion(tmp_path / "out")
    assert (got.planned, got.done, got.finished) == (planned, done, False)
    rep = _cli(["report", "out", "--junit", "rep.xml"], tmp_path)
    assert rep.returncode == 1, rep.stdout + rep.stderr
    assert rep.stdout.strip().splitlines()[-1].startswith(line)
    assert f"resume with: {said[4]}" in rep.stdout
    root, (verdict,) = _verdict_case(tmp_path / "rep.xml")
    assert verdict.get("name") == line and verdict.find("failure") is not None
    assert int(root.get("failures")) == 1

    # resumed (fast now): green, one Parquet file, every planned case once
    again = _cli(shlex.split(said[4])[1:], tmp_path)
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert f"({done} already done)" in again.stderr
    assert again.stdout.strip().splitlines()[-1].startswith(
        f"green: all {planned} claimed case(s) passed")
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["killed.smoke.parquet"]
    rows = load(tmp_path / "out")
    assert rows["case_id"].nunique() == planned
    assert not rows.duplicated(["case_id", "check"]).any()
    rep = _cli(["report", "out", "--junit", "rep2.xml"], tmp_path)
    assert rep.returncode == 0 and rep.stdout.strip().splitlines()[-1].startswith("green: ")
    assert _verdict_case(tmp_path / "rep2.xml")[1] == []


def test_resume_with_another_selection_is_refused(tmp_path):
    rc, out, err, _ = _interrupted(tmp_path, 1, signal.SIGINT)  # Ctrl-C
    assert rc == 130 and "interrupted by SIGINT" in err, out + err
    assert "Traceback" not in err
    other = _cli([*RUN, "-k", "M1.", "--resume"], tmp_path)
    assert other.returncode == 2, other.stderr
    (said,) = other.stderr.strip().splitlines()
    assert said.startswith("moecert run: error: --resume: run killed (smoke)")
    assert "resume it with the options it was started with: moecert run " in said


def test_a_plugin_session_cut_short_is_not_finished(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--pyargs",
         "moecert.conformance", "--moecert-suite", "smoke", "--moecert-backend", "test-nan",
         "--moecert-import", "misbehaving_backends", "--moecert-check", "accuracy",
         "--moecert-results", "out", "--moecert-junit", "j.xml", "-x"],
        capture_output=True, text=True, cwd=tmp_path, env=_env(), timeout=600)
    assert proc.returncode == 1, proc.stdout[-3000:]
    said = re.search(r"moecert: not green: not finished: 1 of (\d+) cases; 1 case\(s\) "
                     r"failed: 1 fail", proc.stdout)
    assert said and int(said[1]) > 1, proc.stdout[-3000:]
    from moecert.reports.store import completion

    got = completion(tmp_path / "out")
    assert (got.planned, got.done) == (int(said[1]), 1)
    _, (verdict,) = _verdict_case(tmp_path / "j.xml")
    assert verdict.get("name").startswith("not green: not finished: 1 of ")
    rep = _cli(["report", "out"], tmp_path)
    assert rep.returncode == 1
    assert "(no resume command recorded: run it again)" in rep.stdout


def test_assembling_an_interrupted_certify_run_is_not_certified(tmp_path, capsys):
    from moecert.conformance.cli import app as cli
    from moecert.reports.store import Journal, plan_of

    resume = "moecert certify --backend torch --out b --resume --run-id R"
    journal = Journal(tmp_path / "b" / "results", "R.certify", "certify",
                      plan=plan_of(["torch/x/1", "torch/x/2", "torch/x/3"], resume))
    journal.append([{"case_id": "torch/x/1", "backend": "torch", "check": "claims",
                     "status": "pass", "claimed": True}])
    journal.close()
    code = cli.main(["certify", "--assemble", str(tmp_path / "b")])
    out = capsys.readouterr().out
    assert code == 1
    assert out.strip().splitlines()[-1] == ("NOT CERTIFIED: incomplete: not finished: 1 of 3 "
                                            f"cases; resume with: {resume}")
    assert not (tmp_path / "b" / "SHA256SUMS").exists()  # no bundle of a run still to finish
