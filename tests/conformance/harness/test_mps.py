"""--mps (conformance/harness/mps.py): the daemon's life, and a case failed on the GPU under
it run once more outside it. On a CPU: a stand-in control program, and backends that fail as
an MPS client does (tests/conformance/helpers/misbehaving_backends.py); the real daemon and a
real fault: tests/conformance/harness/test_mps_cuda.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from moecert.conformance.harness import mps
from moecert.conformance.harness.cases import Case
from moecert.conformance.harness.mps import MpsDaemon, MpsError, gpu_fault
from moecert.conformance.harness.runner import RunConfig, run_isolated
from moecert.conformance.harness.xfail import XfailList
from moecert.reference import MoEProblem
from moecert.reports import load
from moecert.reports.store import Journal
from moecert.reports.verdict import tally_frame

HELPERS = Path(__file__).parents[1] / "helpers"
SMALL = MoEProblem(M=5, K=64, N=32, E=4, topk=2)

# nvidia-cuda-mps-control's part here: `-d` starts (a log line), "quit" on stdin ends it as
# the real one's log says; FAKE_MPS_FAIL makes `-d` fail as a daemon that cannot start does.
FAKE_CONTROL = f"""#!{sys.executable}
import os, sys
log = os.path.join(os.environ["CUDA_MPS_LOG_DIRECTORY"], "control.log")
if sys.argv[1:] == ["-d"]:
    if os.environ.get("FAKE_MPS_FAIL"):
        print("An instance of this daemon is already running", file=sys.stderr)
        sys.exit(1)
    open(log, "a").write("Control daemon started\\n")
    sys.exit(0)
if sys.stdin.read().strip() == "quit":
    open(log, "a").write("Server 4242 exited with status 0\\nExit with status 0\\n")
"""


@pytest.fixture
def fake_control(tmp_path, monkeypatch):
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    control = bin_ / mps.CONTROL
    control.write_text(FAKE_CONTROL)
    control.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_))
    return control


def test_the_daemon_gets_private_folders_and_leaves_nothing_behind(fake_control):
    daemon = MpsDaemon.start()
    pipe, log = (Path(daemon.env[k]) for k in ("CUDA_MPS_PIPE_DIRECTORY",
                                               "CUDA_MPS_LOG_DIRECTORY"))
    assert pipe.is_dir() and log.is_dir() and pipe.parent == log.parent
    assert "Control daemon started" in (log / "control.log").read_text()
    assert not daemon.server_ran()  # no client yet: its log names no server
    daemon.stop()
    assert not pipe.parent.exists()


def test_a_daemon_that_cannot_start_says_why_in_one_line(fake_control, monkeypatch):
    monkeypatch.setenv("FAKE_MPS_FAIL", "1")
    with pytest.raises(MpsError, match="-d exited with 1: An instance of this daemon"):
        MpsDaemon.start()
    monkeypatch.setenv("PATH", str(fake_control.parent.parent))  # no control program
    with pytest.raises(MpsError, match="nvidia-cuda-mps-control is not on PATH"):
        MpsDaemon.start()


def test_what_counts_as_failed_on_the_gpu():
    def row(status, message):
        return {"status": status, "message": message}
    assert gpu_fault(row("error", "torch.AcceleratorError: CUDA error: an illegal memory "
                                  "access was encountered"))
    assert gpu_fault(row("error", "Triton Error [CUDA]: unspecified launch failure"))
    assert gpu_fault(row("crash", "the worker exited with code -6 during check accuracy"))
    assert not gpu_fault(row("error", "ValueError: scale block of 48 columns"))
    assert not gpu_fault(row("fail", "CUDA error in the message of a failed comparison"))


def _run(tmp_path, backends, mps_env):
    cases = [Case(b, "bf16", SMALL, seed=0, depth="light") for b in backends]
    journal = Journal(tmp_path, "run.smoke")
    config = RunConfig("cpu", 2, 60.0, ["accuracy"], ["misbehaving_backends"], "run",
                       XfailList([]), mps_env=mps_env)
    run_isolated(cases, config, journal)
    journal.finish()
    return load(tmp_path)


@pytest.fixture
def helpers_importable(monkeypatch):
    monkeypatch.syspath_prepend(str(HELPERS))
    monkeypatch.setenv("PYTHONPATH", str(HELPERS))
    monkeypatch.delenv("CUDA_MPS_PIPE_DIRECTORY", raising=False)


def test_a_case_failed_under_mps_counts_as_it_runs_outside_it(tmp_path, helpers_importable):
    env = {"CUDA_MPS_PIPE_DIRECTORY": str(tmp_path / "pipe"),
           "CUDA_MPS_LOG_DIRECTORY": str(tmp_path / "log")}
    rows = _run(tmp_path, ("torch", "test-mps-bystander", "test-cuda-fault"), env)
    by = rows.groupby("backend", observed=True)
    bystander = by.get_group("test-mps-bystander")
    assert set(bystander["status"]) == {"pass"}  # outside MPS it is correct: its verdict
    assert bystander["retried"].str.contains("failed on the GPU under MPS").all()
    assert bystander["retried"].str.contains("illegal memory access").all()
    own = by.get_group("test-cuda-fault")  # its own fault fails it again outside
    assert set(own["status"]) == {"error"} and own["retried"].str.len().gt(0).all()
    assert (by.get_group("torch")["retried"].fillna("") == "").all()
    tallies = tally_frame(rows)  # the verdict line counts them apart from memory retries
    assert tallies["test-mps-bystander"].words("b") == (
        "b 1 of 1 claimed, 1 retried outside MPS after failing on the GPU under it")
    assert tallies["torch"].words("torch") == "torch 1 of 1 claimed"


def test_without_mps_a_cuda_error_is_the_case_verdict_at_once(tmp_path, helpers_importable):
    by = _run(tmp_path, ("test-cuda-fault",), None).groupby("backend", observed=True)
    own = by.get_group("test-cuda-fault")
    assert set(own["status"]) == {"error"}
    assert (own["retried"].fillna("") == "").all()


def test_mps_off_a_gpu_is_a_usage_error():
    proc = subprocess.run([sys.executable, "-m", "moecert.conformance.cli", "run", "--suite",
                           "smoke", "--mps", "--device", "cpu"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "moecert run: error: --mps shares each GPU between the worker processes: it needs "
        "--device cuda (this run is on cpu)"]


def test_the_run_holds_the_daemon_around_its_workers_and_warns_when_none_joined(
        fake_control, capsys):
    from argparse import Namespace

    from moecert.conformance.cli.run_command import gpus_shared

    config = RunConfig("cuda", 2)
    with gpus_shared(Namespace(mps=False), config) as same:
        assert same is config  # without --mps nothing starts
    with gpus_shared(Namespace(mps=True), config) as shared:
        folder = Path(shared.mps_env["CUDA_MPS_PIPE_DIRECTORY"]).parent
        assert folder.is_dir() and config.mps_env is None
    assert not folder.exists()  # quit and removed at the end
    # the stand-in never starts a server: as if no worker had reached the daemon
    assert "warning: --mps: the MPS daemon started no server" in capsys.readouterr().err


def test_certify_with_mps_off_a_gpu_is_a_usage_error(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "moecert.conformance.cli", "certify",
                           "--backend", "torch", "--out", str(tmp_path / "bundle"), "--mps",
                           "--device", "cpu"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "moecert certify: error: --mps shares each GPU between the worker processes: it needs "
        "--device cuda (this run is on cpu)"]
    assert not (tmp_path / "bundle").exists()  # said before anything is written
