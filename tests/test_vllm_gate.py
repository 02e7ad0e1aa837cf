"""tools/vllm_gate.py: the vLLM gate skips only where vLLM's CPU build cannot load (SIGILL at
`import vllm._C`), saying so; any other outcome runs every command, stopping at a failure."""

from __future__ import annotations

import importlib.util
import signal
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("vllm_gate", ROOT / "tools" / "vllm_gate.py")
gate = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gate)


def _fake_run(probe_rc: int, command_rcs: list[int], ran: list):
    def run(cmd, **kw):
        if cmd[1:] == ["-c", "import vllm._C"]:
            return subprocess.CompletedProcess(cmd, probe_rc, "", "")
        ran.append(cmd)
        return subprocess.CompletedProcess(cmd, command_rcs[len(ran) - 1])
    return run


def test_a_cpu_that_cannot_load_vllm_runs_nothing_and_says_why(monkeypatch, capsys):
    ran = []
    monkeypatch.setattr(gate.subprocess, "run", _fake_run(-signal.SIGILL, [], ran))
    assert gate.main(["results"]) == 0
    assert ran == []
    (line,) = capsys.readouterr().out.strip().splitlines()
    assert line.startswith("vllm gate: NOT RUN: vLLM's CPU build cannot run on this CPU")


def test_a_loading_vllm_runs_every_command_in_order(monkeypatch):
    ran = []
    n = len(gate.commands("r", []))
    monkeypatch.setattr(gate.subprocess, "run", _fake_run(0, [0] * n, ran))
    assert gate.main(["r", "-k", "gptq"]) == 0
    assert ran == gate.commands("r", ["-k", "gptq"])
    assert ran[0][0] == "pytest" and "xfail_coverage.py" in ran[-1][1]
    assert sum("--checkpoint" in c for c in ran) == len(gate.FOLDERS)


def test_another_probe_failure_is_not_a_skip_and_a_failing_command_ends_the_gate(monkeypatch):
    ran = []
    monkeypatch.setattr(gate.subprocess, "run", _fake_run(1, [0, 3, 0, 0, 0, 0, 0], ran))
    assert gate.main(["r"]) == 3
    assert len(ran) == 2
