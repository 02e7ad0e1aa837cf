"""Cases too large for the machine's memory: estimated before they run, not run ("oversize",
said up front and in the rows), the run not green and the bundle not certified; a worker the
kernel kills for memory is reported as out of memory."""

from __future__ import annotations

import json
import signal

import pytest
from moecert.conformance.certification import bundle, certify
from moecert.conformance.cli import app as cli
from moecert.conformance.harness import memory
from moecert.conformance.harness.cases import Case
from moecert.conformance.harness.checks import LIGHT
from moecert.conformance.harness.schedule import case_need
from moecert.reference import MoEProblem
from moecert.reference.schemes import Variant
from moecert.reports import load
from moecert.reports.store import _frame

DEEPSEEK = MoEProblem(M=16, K=7168, N=2048, E=256, topk=8)
QWEN3 = MoEProblem(M=16, K=2048, N=768, E=128, topk=8)
# model-size (weights above schedule.MODEL_SIZE_WEIGHTS) but small enough to estimate fast
MID = MoEProblem(M=4, K=2048, N=768, E=64, topk=2)


def test_the_host_estimate_follows_the_measurements():
    # what the 24 GB machine showed: a DeepSeek-V3 case reached 23.8 GB and was killed
    assert case_need(Case("torch", "gptq-int4", DEEPSEEK), "cpu") > 40e9
    # the measured slope (memory.py): bf16 15.2, gptq-int4 4.8 bytes per weight
    small_bf16 = Case("torch", "bf16", MoEProblem(M=256, K=2048, N=768, E=48, topk=8))
    assert memory.host_need(small_bf16) == pytest.approx(3.62e9 + memory.HOST_BASE_BYTES
                                                         - 0.18e9, rel=0.15)
    assert case_need(Case("torch", "gptq-int4", QWEN3), "cpu") < 5e9
    assert case_need(Case("torch", "bf16", MoEProblem(M=1, K=128, N=128, E=4, topk=2)),
                     "cpu") == 0  # a small case: the workers' reserve covers it


def test_sizes_and_words():
    assert memory.parse_size("24G") == 24 << 30 and memory.parse_size("512M") == 512 << 20
    assert memory.parse_size("1000") == 1000
    with pytest.raises(ValueError, match="MOECERT_HOST_MEMORY"):
        memory.parse_size("lots")
    assert memory.gb(54.2e9) == "50 GiB" and memory.gb(2.46e9) == "2.3 GiB"
    # what MOECERT_HOST_MEMORY=24G budgets reads back as given (it was "26 GB")
    assert memory.gb(memory.parse_size("24G")) == "24 GiB"
    assert memory.death_words(3, None) == "the worker process died (exit code 3)"
    assert memory.death_words(-signal.SIGKILL, None).startswith("out of memory, most likely")


def test_an_oom_kill_counted_by_the_kernel_is_out_of_memory(monkeypatch):
    monkeypatch.setattr(memory, "oom_kills", lambda: 8)
    assert memory.death_words(-signal.SIGKILL, 7).startswith(
        "out of memory: the kernel's OOM killer killed the worker process")


@pytest.mark.parametrize("in_process", [False, True], ids=["workers", "in-process"])
def test_a_case_larger_than_the_machine_is_not_run(tmp_path, monkeypatch, capsys, in_process):
    monkeypatch.setenv(memory.HOST_MEMORY_VARIABLE, "2G")
    big = Case("torch", Variant("gptq-int4", group_size=128), MID).to_json()
    small = Case("torch", "bf16", MoEProblem(M=1, K=128, N=128, E=4, topk=2)).to_json()
    code = cli.main(["run", "--case", big, "--case", small, "--check", "claims", "--results",
                     str(tmp_path), "--device", "cpu", *(["--in-process"] if in_process else [])])
    out, err = capsys.readouterr()
    assert code == 1
    assert ("1 claimed case(s) need more memory than this machine has, and will not run "
            "(status oversize)") in err and "needs about 2.4 GiB of host memory" in err
    assert out.strip().splitlines()[-1].startswith(
        "not green: 1 claimed case(s) not run: they need more memory than this machine has")
    rows = load(tmp_path)
    status = dict(zip(rows["case_id"], rows["status"].astype(str), strict=True))
    assert sorted(status.values()) == ["oversize", "pass"]
    oversize = rows[rows["status"] == "oversize"].iloc[0]
    assert oversize["check"] == "setup" and "this machine has 2.0 GiB" in oversize["message"]


def test_an_oversize_case_makes_the_bundle_not_certified():
    cases = [Case("torch", "bf16", MoEProblem(M=m, K=128, N=128, E=4, topk=2), depth="light")
             for m in (1, 2)]
    record = certify.shard_record("r", "certify", "torch", (0, 1), 2, "cpu")
    rows = [{"run_id": "r", "case_id": cases[0].case_id, "backend": "torch", "scheme": "bf16",
             "check": check, "status": "pass", "claimed": True, "message": "ok"}
            for check in LIGHT]
    rows.append({"run_id": "r", "case_id": cases[1].case_id, "backend": "torch",
                 "scheme": "bf16", "check": "setup", "status": "oversize", "claimed": None,
                 "message": "not run: needs about 30 GB of host memory, this machine has "
                            "24 GB; run it on a host with more memory"})
    j = bundle.judge([record], _frame(rows), cases)
    assert not j.certified and j.counts()["oversize"] == 1 and j.counts()["pass"] == 1
    (reason,) = j.reasons
    assert reason.startswith("1 case(s) (") and "not run: more memory than the machine had" \
        in reason and "needs about 30 GB of host memory, this machine has 24 GB" in reason
    assert "oversize" in bundle.verdict_line(j, [record])
    assert json.dumps(j.counts())  # the manifest's outcome counts
