"""tools/vllm_repro/inside_outside.py, the harness's flow against a plain create / process /
apply (issue 41 item 6), run on the torch backend on the CPU: it says so when every call is
bit-identical, and it catches an output that differs."""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

import torch

SCRIPT = Path(__file__).parents[1] / "tools" / "vllm_repro" / "inside_outside.py"


def load():
    spec = importlib.util.spec_from_file_location("inside_outside", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_changed_output_is_caught_and_identical_calls_pass(tmp_path, capsys):
    io = load()
    args = argparse.Namespace(scheme="fp8-w8a16", shape=(4, 128, 32), seed=0, suite="smoke",
                              device="cpu", backend="torch")
    io.inside(args, tmp_path)
    assert io.outside(args, tmp_path) == 0
    assert "bit-identical (0 on another layer" in capsys.readouterr().out
    record = torch.load(tmp_path / "0.pt", weights_only=False)
    assert record["calls"], "the harness's calls were recorded"
    y = record["calls"][0]["y"]
    y.view(-1)[0] = y.view(-1)[0] + 1  # one element off, as a flow that changed it would be
    torch.save(record, tmp_path / "0.pt")
    assert io.outside(args, tmp_path) == 1
    assert "CHANGES torch's result" in capsys.readouterr().out
    from moecert.kernels import get_backend
    assert type(get_backend("torch")).apply.__name__ == "apply", "the recording is undone"
