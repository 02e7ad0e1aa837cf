"""`moecert run` and the pytest plugin end to end, in subprocesses as a user runs them."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from moecert.reports import COLUMNS, load
from moecert.reports.store import Journal

HELPERS = Path(__file__).parents[1] / "helpers"


def _run(args, cwd):
    path = os.pathsep.join(p for p in (str(HELPERS), os.environ.get("PYTHONPATH")) if p)
    env = dict(os.environ, PYTHONPATH=path)
    return subprocess.run([sys.executable, "-m", "moecert.conformance.cli", *args],
                          capture_output=True, text=True, cwd=cwd, env=env, timeout=600)


def test_run_writes_parquet_rows_and_exits_zero(tmp_path):
    proc = _run(["run", "--suite", "smoke", "--backend", "torch", "--scheme", "bf16",
                 "--results", "out", "-n", "auto"], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{os.cpu_count()} worker(s)" in proc.stderr  # auto: one per core on a CPU
    frame = load(tmp_path / "out")
    assert list(frame.columns[:len(COLUMNS)]) == list(COLUMNS)
    assert set(frame["status"]) <= {"pass", "skip", "unsupported"}
    assert {"accuracy", "reload", "exact", "claims", "oracle"} <= set(frame["check"])
    assert frame["case_id"].nunique() > 10
    assert list((tmp_path / "out").glob("*.parquet")) and not list(
        (tmp_path / "out").glob("*.jsonl"))
    assert "torch" in proc.stdout
    # no terminal: progress as whole lines, no carriage returns; a green run ends green
    assert "\r" not in proc.stderr
    assert re.search(r"^\d+/\d+ cases, 0 failed, [\d.]+ cases/s, \d+ s$", proc.stderr, re.M)
    assert proc.stdout.strip().splitlines()[-1].startswith("green: all ")


def test_a_failure_exits_one_and_prints_the_rerun_command(tmp_path):
    proc = _run(["run", "--backend", "test-nan", "--scheme", "bf16", "--results", "out",
                 "--import", "misbehaving_backends", "--check", "accuracy", "-k", "M1.",
                 "--in-process"], tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    line = next(x for x in proc.stdout.splitlines() if "rerun:" in x)
    command = shlex.split(line.split("rerun:", 1)[1])
    # the printed command alone reruns it: the backend's module and the checks come along
    assert command[:2] == ["moecert", "run"] and "--case" in command
    assert "--import" in command and "misbehaving_backends" in command
    assert command[command.index("--check") + 1] == "accuracy"
    rerun = _run([*command[1:], "--results", "again"], tmp_path)
    assert rerun.returncode == 1, rerun.stdout + rerun.stderr
    from moecert.conformance.harness.cases import Case
    wanted = Case.from_json(command[command.index("--case") + 1]).case_id
    again = load(tmp_path / "again")
    assert set(again["case_id"]) == {wanted} and set(again["check"]) == {"accuracy"}
    assert wanted in set(load(tmp_path / "out").query("status == 'fail'")["case_id"])


def test_resume_runs_only_what_is_left(tmp_path):
    first = _run(["run", "--backend", "torch", "--scheme", "fp16", "--results", "out",
                  "--check", "accuracy"], tmp_path)
    assert first.returncode == 0
    (done,) = list((tmp_path / "out").glob("*.parquet"))
    rows = load(done)
    keep = rows.iloc[: len(rows) // 2]
    journal = Journal(tmp_path / "out", done.stem)  # as a run killed half way left it
    for _, case in keep.groupby("case_id", sort=False):
        journal.append(case.to_dict("records"))
    done.unlink()
    second = _run(["run", "--backend", "torch", "--scheme", "fp16", "--results", "out",
                   "--check", "accuracy", "--resume"], tmp_path)
    assert second.returncode == 0, second.stderr
    assert f"({len(keep)} already done)" in second.stderr
    merged = load(tmp_path / "out")
    assert sorted(merged["case_id"]) == sorted(rows["case_id"])


@pytest.mark.parametrize("backend, outcome", [("torch", "passed"), ("test-nan", "failed")])
def test_the_pytest_plugin_runs_the_suite(tmp_path, backend, outcome):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        filter(None, [str(HELPERS), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--pyargs", "moecert.conformance", "-q",
         "-p", "no:cacheprovider", "--moecert-backend", backend, "--moecert-scheme", "bf16",
         "--moecert-check", "accuracy", "--moecert-results", "rows", "--moecert-import",
         "misbehaving_backends", "-k", "M1.K128 or M17.K128", "--rootdir",
         str(tmp_path), "-c", os.devnull],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600)
    tail = proc.stdout.strip().splitlines()[-1]
    assert outcome in tail, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (proc.returncode == 0) == (outcome == "passed")
    assert len(load(tmp_path / "rows")) > 0


# --- in this process, through the command's main: tiny selections --------------------------

TINY = ["--backend", "torch", "--scheme", "bf16", "--check", "accuracy", "--in-process"]
THREE = ["-k", "M0. or M1. or M15."]  # three edge cases of the smoke suite, a second each


def _main(argv, capsys):
    """Exit code, stdout and stderr of `moecert ARGV` (argparse's errors exit by SystemExit)."""
    from moecert.conformance.cli.app import main

    try:
        code = main(argv)
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


def _case_json(**changes):
    from moecert.conformance.harness.suites import build_suite

    case = json.loads(build_suite("smoke", ["torch"], ["bf16"])[0].to_json())
    case.update(changes)
    return json.dumps(case)


@pytest.mark.parametrize("argv, says", [
    (["run", "--scheme", "nope"], "unknown scheme 'nope'"),
    (["run", "--check", "acuracy"], "did you mean 'accuracy'"),
    (["run", "--suite", "nope"], "unknown suite 'nope'"),
    (["run", "--backend", "nope"], "unknown backend 'nope'"),
    (["run", "--shard", "3/2"], "shard '3/2'"),
    (["run", "--shard", "abc"], "expected I/N"),
    (["run", "--case", "{not json"], "not a case (JSONDecodeError"),
    (["run", "--case", _case_json(scheme="nope")], "unknown scheme 'nope'"),
    (["run", "--case", _case_json(backend="nope")], "unknown backend 'nope'"),
    (["run", "--timeout", "-1"], "positive number of seconds"),
    (["run", "-n", "0"], "at least 1"),
    (["run", "-n", "-3"], "at least 1"),
    (["run", "-n", "many"], "expected a whole number, got 'many'"),
    (["run", "--import", "nosuchmodule"],
     "--import nosuchmodule: ModuleNotFoundError: No module named 'nosuchmodule'"),
    (["run", "--backend", "torch", "--scheme", "bf16", "-k", "nothing-has-this"],
     "matches no case"),
    (["run", "-k", "bias and"], "expected a word, found the end"),
    (["run", "--backend", "torch", "--case-id", "torch/bf16/nope"], "--case-id torch/bf16/nope"),
    (["run", "--run-id", "a.b"], "run id 'a.b'"),
    (["run", "--backend", "torch", "--xfail", "no-such.toml"], "--xfail no-such.toml"),
    (["calibrate", "--scheme", "nope"], "unknown scheme 'nope'"),
    (["calibrate", "--backend", "nope"], "unknown backend 'nope'"),
    (["bench", "reference", "--repeats", "0"], "at least 1"),
])
def test_a_usage_error_is_one_line_and_exit_two_before_anything_runs(
        argv, says, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = _main([*argv, *(["--results", "out"] if argv[0] == "run" else [])], capsys)
    assert code == 2, out + err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert says in err and err.startswith(f"moecert {argv[0]}: error: ")
    assert not (tmp_path / "out").exists()  # nothing was run or written


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
def test_device_cuda_without_a_gpu_is_a_usage_error(capsys):
    code, _, err = _main(["run", "--device", "cuda", *TINY], capsys)
    assert code == 2 and "cuda: no CUDA device here" in err
    assert len(err.strip().splitlines()) == 1


def test_a_usage_error_from_the_command_line(tmp_path):
    proc = _run(["run", "--scheme", "nope"], tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "unknown scheme 'nope'" in proc.stderr


def test_results_that_name_a_file_or_a_folder_under_one_are_usage_errors(tmp_path, capsys):
    """As root (CI) chmod cannot make a folder read-only, so the unwritable folders here are
    one whose parent is a file and (below) one where creating a file fails."""
    (tmp_path / "file").write_text("")
    code, _, err = _main(["run", *TINY, "--results", str(tmp_path / "file")], capsys)
    assert code == 2 and "is a file, not a folder" in err and len(err.splitlines()) == 1
    code, _, err = _main(["run", *TINY, "--results", str(tmp_path / "file" / "out")], capsys)
    assert code == 2 and "is not writable" in err and len(err.splitlines()) == 1


def test_a_folder_that_refuses_new_files_is_a_usage_error(tmp_path, capsys, monkeypatch):
    """The probe that runs before any case: creating a file in the folder (patched to fail
    the way a read-only folder makes it fail)."""
    from moecert.conformance.harness import option_values as options

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(options.tempfile, "TemporaryFile", refuse)
    code, out, err = _main(["run", *TINY, *THREE, "--results", str(tmp_path)], capsys)
    assert code == 2 and "not writable: Permission denied" in err, out + err
    assert len(err.splitlines()) == 1
    assert not list(tmp_path.iterdir())


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder anyway")
def test_a_read_only_folder_is_a_usage_error(tmp_path, capsys):
    folder = tmp_path / "ro"
    folder.mkdir(mode=0o555)
    code, _, err = _main(["run", *TINY, *THREE, "--results", str(folder)], capsys)
    assert code == 2 and "is not writable" in err


def test_summary_counts_claimed_cases_and_an_unclaimed_one_is_never_a_pass(tmp_path, capsys):
    code, out, _ = _main(["run", *TINY, "-k", "M1.", "--results", str(tmp_path / "a")], capsys)
    assert code == 0 and re.search(r"^torch +1 of 1 ", out, re.M), out
    # xpu claims no bf16 case: its oracle row passes, but the case is unsupported, and a run
    # that judged no claimed case is not green
    code, out, _ = _main(["run", "--backend", "xpu", "--scheme", "bf16", "--check", "oracle",
                          "--in-process", "-k", "M1.", "--results", str(tmp_path / "b")],
                         capsys)
    header, xpu = (line.split() for line in out.strip().splitlines()[:2])
    counts = dict(zip(header[2:], xpu[4:], strict=True))
    assert xpu[:4] == ["xpu", "0", "of", "1"] and counts["unsupported"] == "1"
    assert counts["pass"] == "0"
    assert code == 1
    verdict = "not green: no claimed case ran a check (backend xpu 0 of 1 claimed)"
    assert out.strip().splitlines()[-1] == verdict
    assert set(load(tmp_path / "b")["claimed"]) == {False}
    # the report of the same results: the same verdict and exit code (one verdict function)
    code, out, _ = _main(["report", str(tmp_path / "b")], capsys)
    assert code == 1 and out.strip().splitlines()[-1] == verdict
    assert out.startswith(f"report of run {load(tmp_path / 'b')['run_id'].iloc[0]} in ")


def test_report_says_which_run_it_shows_and_lists_the_others(tmp_path, capsys):
    folder = str(tmp_path / "r")
    for run in ("first", "second"):
        assert _main(["run", *TINY, "-k", "M1.", "--check", "claims", "--in-process",
                      "--results", folder, "--run-id", run], capsys)[0] == 0
    code, out, _ = _main(["report", folder], capsys)
    assert code == 0 and out.splitlines()[0] == (
        f"report of run second, the newest of 2 runs in {folder} (second, first); --run ID "
        "reports another, --run all every one")
    assert out.strip().splitlines()[-1].startswith("green: all 1 claimed case(s) passed")


def test_case_id_and_k_select_and_list_cases_prints_without_running(tmp_path, capsys):
    from moecert.conformance.harness.suites import build_suite

    ids = [c.case_id for c in build_suite("smoke", ["torch"], ["bf16"])]
    code, out, _ = _main(["run", *TINY, "--list-cases", "--results", "never"], capsys)
    assert code == 0 and out.split() == ids
    code, out, _ = _main(["run", *TINY, "--list-cases", "-k", "BIAS and not fp16 or relu2"],
                         capsys)
    assert out.split() == [i for i in ids if ("bias" in i and "fp16" not in i) or "relu2" in i]
    assert len(out.split()) == 2
    code, out, _ = _main(["run", *TINY, "--list-cases", "-k", "M1 and not (M15 or M17)"],
                         capsys)
    assert out.split() == [i for i in ids if "/M1." in i] != []
    code, out, _ = _main(["run", *TINY, "--list-cases", "--case-id", ids[3],
                          "--case-id", ids[1]], capsys)
    assert out.split() == [ids[3], ids[1]]
    assert not (tmp_path / "never").exists() and not os.path.exists("never")
    code, out, _ = _main(["run", *TINY, "--case-id", ids[2], "--results", str(tmp_path)],
                         capsys)
    assert code == 0 and list(load(tmp_path)["case_id"]) == [ids[2]]


def test_version_names_every_version(capsys):
    import platform

    import triton

    code, out, _ = _main(["--version"], capsys)
    assert code == 0
    for name, version in (("torch", torch.__version__), ("triton", triton.__version__),
                          ("python", platform.python_version())):
        assert f"{name} {version}" in out
    assert out.startswith("moecert ")


# --- resume and the journal ---------------------------------------------------------------

def _rows_of(cases, checks, run_id):
    from moecert.conformance.harness.execute import run_case

    return [run_case(case, "cpu", checks, run_id) for case in cases]


def _three_cases():
    from moecert.conformance.harness.case_filter import case_filter
    from moecert.conformance.harness.suites import build_suite

    keep = case_filter(THREE[1])
    return [c for c in build_suite("smoke", ["torch"], ["bf16"]) if keep(c.case_id)]


def test_resume_after_a_torn_write_reruns_the_cut_case_and_loses_nothing(tmp_path, capsys):
    from moecert.reports.store import Journal

    checks = ["accuracy", "claims"]
    cases = _three_cases()
    journal = Journal(tmp_path, "r1.smoke")
    per_case = _rows_of(cases, checks, "r1")
    for rows in per_case[:-1]:
        journal.append(rows)
    before = journal.path.stat().st_size
    journal.append(per_case[-1])
    after = journal.path.stat().st_size
    # killed three quarters into the last case's write (into its second row, were rows
    # written one per line); the journal is left as the kill left it
    with open(journal.path, "rb+") as f:
        f.truncate(before + 3 * (after - before) // 4)
    code, out, err = _main(["run", *TINY, "--check", "claims", *THREE, "--resume",
                            "--results", str(tmp_path)], capsys)
    assert code == 0, out + err
    assert "1 cases (2 already done)" in err
    assert not list(tmp_path.glob("*.jsonl"))
    (parquet,) = tmp_path.glob("*.parquet")
    frame = load(parquet)
    assert sorted(zip(frame["case_id"], frame["check"], strict=True)) == sorted(
        (c.case_id, check) for c in cases for check in checks)
    assert set(frame["run_id"]) == {"r1"}


def test_a_resumed_run_is_judged_whole(tmp_path, capsys):
    from moecert.reports.store import Journal

    cases = _three_cases()
    (rows,) = _rows_of(cases[:1], ["accuracy"], "r2")
    journal = Journal(tmp_path, "r2.smoke")
    journal.append([{**rows[0], "status": "fail", "message": "planted before the kill"}])
    code, out, err = _main(["run", *TINY, *THREE, "--resume", "--results", str(tmp_path)],
                           capsys)
    assert "2 cases (1 already done)" in err
    assert code == 1, out + err
    assert "planted before the kill" in out and "not green: 1 case(s) failed" in out
    assert re.search(r"^torch +3 of 3 +0 +0 +0 +1 ", out, re.M), out


def test_resume_refuses_a_finished_run(tmp_path, capsys):
    code, *_ = _main(["run", *TINY, "-k", "M1.", "--results", str(tmp_path)], capsys)
    assert code == 0
    (finished,) = tmp_path.glob("*.parquet")
    code, _, err = _main(["run", *TINY, "-k", "M1.", "--resume", "--results",
                          str(tmp_path)], capsys)
    assert code == 2 and len(err.splitlines()) == 1
    assert f"nothing to resume in {tmp_path}: run {finished.name.split('.')[0]}" in err
    assert list(tmp_path.iterdir()) == [finished]
    assert len(load(tmp_path)) == 1


def test_shards_given_one_run_id_load_as_one_run(tmp_path, capsys):
    for index in (0, 1):
        code, out, err = _main(["run", *TINY, *THREE, "--shard", f"{index}/2", "--run-id",
                                "ci-7", "--results", str(tmp_path)], capsys)
        assert code in (0, 1), out + err  # an empty shard judges nothing: not green
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "ci-7.smoke.shard0of2.parquet", "ci-7.smoke.shard1of2.parquet"]
    assert sorted(load(tmp_path)["case_id"]) == sorted(c.case_id for c in _three_cases())
    code, _, err = _main(["run", *TINY, *THREE, "--shard", "0/2", "--run-id", "ci-7",
                          "--results", str(tmp_path)], capsys)
    assert code == 2 and "run ci-7 already has smoke.shard0of2 results" in err
