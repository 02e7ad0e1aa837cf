"""`random_checkpoint` draws valid tensors: every scheme option reads back, with weights of
about unit variance per input and the zero-point conventions respected."""

from __future__ import annotations

import importlib

import pytest
import torch
from moecert.reference import SCHEMES, MoEProblem, canonicalize, dequantize, random_checkpoint

PROBLEM = MoEProblem(M=4, K=256, N=128, E=3, topk=2, bias=True)


def _variants():
    for name, s in SCHEMES.items():
        yield name, {}
        if s.asym and name != "awq-int4":
            yield name, {"sym": False}
        if s.act_order:
            yield name, {"act_order": True, "group_size": 32}
        for fmt in s.checkpoint_formats[1:]:
            yield name, {"checkpoint_format": fmt, "sym": True}
        for strategy in s.strategies[1:]:
            yield name, {"weight_strategy": strategy}
        for mode in s.activation_modes[1:]:
            yield name, {"activation": mode}


@pytest.mark.parametrize(("scheme", "attrs"), list(_variants()), ids=str)
def test_random_checkpoint_reads_back(scheme, attrs):
    ckpt = random_checkpoint(scheme, PROBLEM, seed=3, **attrs)
    w = dequantize(ckpt)
    for name, n_in in (("w13", PROBLEM.K), ("w2", PROBLEM.N)):
        std = float(w[name].std()) * n_in**0.5
        assert 0.3 < std < 3, (name, std)
    lin = canonicalize(ckpt)["w13"]
    if lin.zeros is not None:  # zero points vary (not a constant)
        assert lin.zeros.unique().numel() > 4
    assert torch.equal(dequantize(random_checkpoint(scheme, PROBLEM, seed=3, **attrs))["w2"],
                       w["w2"])


@pytest.mark.parametrize("scheme", ["fp8-w8a16", "bf16"])
def test_float_weights_are_drawn_one_expert_at_a_time(scheme, monkeypatch):
    """No float32 draw as large as a whole weight tensor: at model size it would not fit."""
    module = importlib.import_module("moecert.reference.random_checkpoint")
    sizes = []
    randn = module._Draw._randn

    def recorded(self, *shape):
        sizes.append(torch.Size(shape).numel())
        return randn(self, *shape)
    monkeypatch.setattr(module._Draw, "_randn", recorded)
    ckpt = random_checkpoint(scheme, PROBLEM, seed=3)
    one_expert = max(t[0].numel() for n, t in ckpt.tensors.items() if n.endswith("weight"))
    assert sizes and max(sizes) <= one_expert
    # and the same seed still gives the same checkpoint
    again = random_checkpoint(scheme, PROBLEM, seed=3)
    assert all(torch.equal(ckpt.tensors[n].view(torch.uint8), again.tensors[n].view(torch.uint8))
               for n in ckpt.tensors if ckpt.tensors[n].element_size() == 1)
