"""Whether a weight scale may be negative is a fact of each format (issue 42): GPTQ's
(q - z) * s has no sign rule, and AutoRound's symmetric export writes negative scales (it maps
each group's largest magnitude to the code -2^(b-1)). The format record's `scale_sign` says
it once; the reference's reader, the kernels' conversion, the loader's value scan and the
`malformed` check's list (`rejected`) all follow it."""

from __future__ import annotations

import pytest
import torch
from moecert.kernels import get_backend
from moecert.reference import CheckpointError, MoEProblem, dequantize, random_checkpoint
from moecert.reference.schemes import format_record
from moecert.reference.schemes.tensors import tensor_name

_PROBLEM = MoEProblem(M=4, K=128, N=64, E=2, topk=2)


def _negate_first_group(ckpt):
    """The checkpoint with w13's scale of expert 0, group 0, output column 0 negated, and
    where that scale sits in the [E, G, out] (GPTQ) tensor."""
    name = tensor_name(ckpt, "w13", "scale")
    tensors = {k: v.clone() for k, v in ckpt.tensors.items()}
    tensors[name][0, 0, 0] = -tensors[name][0, 0, 0]
    return type(ckpt)(**{**ckpt.__dict__, "tensors": tensors})


@pytest.mark.parametrize("fmt", ["gptq", "gptq_v2"])
@pytest.mark.parametrize("sym", [True, False])
def test_a_negative_gptq_scale_is_read_signed(fmt, sym):
    ckpt = random_checkpoint("gptq-int4", _PROBLEM, seed=3, group_size=32, sym=sym,
                             checkpoint_format=fmt)
    signed = _negate_first_group(ckpt)
    want, got = dequantize(ckpt)["w13"], dequantize(signed)["w13"]
    assert format_record(ckpt).scale_sign == "any"
    assert not any(r.role == "scale" and r.value is not None and r.value < 0
                   for r in format_record(ckpt).rejected)
    # (q - z) * s: the group's 32 weights of output row 0 change sign, nothing else moves
    assert torch.equal(got[0, 0, :32], -want[0, 0, :32])
    assert torch.equal(got[0, 0, 32:], want[0, 0, 32:]) and torch.equal(got[1:], want[1:])
    assert torch.equal(got[0, 1:], want[0, 1:])
    for backend in ("torch", "xpu") if sym else ("torch",):  # xpu: symmetric int4 only
        b = get_backend(backend)
        layer = b.create_layer(signed, _PROBLEM)
        b.process_weights_after_loading(layer)
        w = b.canonical_weights(layer)["w13"]
        codes = w.codes.to(torch.float64)
        if w.zeros is not None:
            codes = codes - w.zeros.to(torch.float64).repeat_interleave(32, dim=2)
        deq = codes * w.scales.repeat_interleave(32, dim=2)
        assert torch.equal(deq, got), backend


@pytest.mark.parametrize("scheme", ["awq-int4", "ct-int4"])
def test_formats_with_a_sign_rule_still_refuse_a_negative_scale(scheme):
    ckpt = random_checkpoint(scheme, _PROBLEM, seed=3, group_size=32)
    assert format_record(ckpt).scale_sign == "positive"
    bad = _negate_first_group(ckpt) if scheme == "awq-int4" else None
    if bad is None:  # compressed-tensors: [E, out, G]
        name = tensor_name(ckpt, "w13", "scale")
        tensors = {k: v.clone() for k, v in ckpt.tensors.items()}
        tensors[name][0, 0, 0] = -tensors[name][0, 0, 0]
        bad = type(ckpt)(**{**ckpt.__dict__, "tensors": tensors})
    with pytest.raises(CheckpointError, match="scales > 0"):
        dequantize(bad)
