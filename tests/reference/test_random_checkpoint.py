"""`random_checkpoint` draws valid tensors: every scheme option reads back, with weights of
about unit variance per input and the zero-point conventions respected."""

from __future__ import annotations

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
