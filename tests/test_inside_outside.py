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
                              device="cpu", backend="torch", repeat=1)
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


def test_an_output_that_changes_from_call_to_call_is_counted(tmp_path, capsys, monkeypatch):
    """--repeat: the same input applied again must give the same bits; a backend whose output
    drifts between calls (as vLLM's one w4a8-int8[g32] K160 row did between two GPU runs) is
    caught, and a variant in --scheme picks that variant's case."""
    io = load()
    args = argparse.Namespace(scheme="w4a8-int8[g32]", shape=(4, 160, 128), seed=0,
                              suite="smoke", device="cpu", backend="torch", repeat=3)
    io.inside(args, tmp_path)
    assert torch.load(tmp_path / "0.pt", weights_only=False)["case"].startswith(
        "torch/w4a8-int8[g32]/M9.K160.N128.E4.k2/")
    assert io.outside(args, tmp_path) == 0
    out = capsys.readouterr().out
    assert "repeats: 0 of" in out
    from moecert.kernels import get_backend
    cls = type(get_backend("torch"))
    apply, calls = cls.apply, []

    def drifting(self, layer, x, w, ids, *, out=None, **opts):
        y = apply(self, layer, x, w, ids, out=out, **opts)
        calls.append(1)
        if len(calls) % 3 == 0:  # every third call one element off
            (y if out is None else out).view(-1)[0] += 1
        return y
    monkeypatch.setattr(cls, "apply", drifting)
    assert io.outside(args, tmp_path) == 1
    out = capsys.readouterr().out
    assert "repeat differs" in out and "repeats: 0 of" not in out
