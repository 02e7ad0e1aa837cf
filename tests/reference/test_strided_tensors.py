"""The reference reads tensors by value, not by memory layout: a checkpoint and inputs whose
tensors hold the same values in non-contiguous strides (column-major, or a view with gaps
into a larger buffer; conformance/harness/strides.py) dequantize to the same bits and run to the
same output within float64 rounding. Not always the same bits: a float64 GEMM sums in an order
that follows its weights' memory order, which follows the checkpoint's for fp8 and int8
weights (measured: at most 4e-16 of the output's largest element, 1.1e-16 relative Frobenius).
A reference that read the bytes in row-major order would be off by O(1)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from moecert.conformance.harness.strides import restrided
from moecert.reference import (
    SCHEME_NAMES,
    MoEProblem,
    dequantize,
    make_batched_inputs,
    make_inputs,
    moe,
    synthesize,
)

# every scheme's default, and the variants that add tensors (zero points, g_idx, input
# scales) or change a scale's shape (channel, block)
VARIANTS = [(s, {}) for s in SCHEME_NAMES] + [
    ("gptq-int4", {"group_size": 32, "sym": False, "act_order": True}),
    ("ct-int8", {"group_size": 32, "sym": False, "act_order": True}),
    ("awq-int4", {"group_size": 32}),
    ("fp8-w8a16", {"weight_strategy": "channel"}),
    ("fp8-w8a16", {"weight_strategy": "block"}),
    ("int8-w8a8", {"activation": "static-tensor"}),
    ("mxfp8", {"activation": "mxfp8"}),
]
IDS = [s + "".join(f"-{k}={v}" for k, v in kw.items()) for s, kw in VARIANTS]
PROBLEM = MoEProblem(M=9, K=128, N=128, E=3, topk=2, bias=True)


def _strided(ckpt):
    tensors = {n: restrided(t) for n, t in ckpt.tensors.items()}
    assert not any(t.is_contiguous() for t in tensors.values() if t.numel() and t.dim())
    return replace(ckpt, tensors=tensors)


# float64 sums of a few hundred terms in another order: a few units of 2^-53 relative
FLOAT64_REORDER = 1e-13


def _assert_same_bits(a: torch.Tensor, b: torch.Tensor) -> None:
    assert a.dtype == b.dtype and a.shape == b.shape
    assert torch.equal(a.view(torch.int64), b.view(torch.int64))  # float64: NaN bits too


def _assert_same_output(a: torch.Tensor, b: torch.Tensor) -> None:
    assert a.dtype == b.dtype == torch.float64 and a.shape == b.shape
    assert bool(torch.isfinite(a).all())
    rel = float((a - b).norm() / b.norm())
    assert rel <= FLOAT64_REORDER, f"relative error {rel:.3g}"


@pytest.mark.parametrize("scheme, attrs", VARIANTS, ids=IDS)
def test_strided_checkpoint_and_inputs_give_the_same_output(scheme, attrs):
    ckpt = synthesize(scheme, PROBLEM, seed=0, **attrs)
    strided = _strided(ckpt)
    got = dequantize(strided)
    for p, w in dequantize(ckpt).items():
        _assert_same_bits(got[p], w)
    x, weights, ids = make_inputs(PROBLEM, seed=1)
    want = moe(ckpt, x, weights, ids, PROBLEM)
    _assert_same_output(moe(strided, restrided(x), restrided(weights), restrided(ids),
                            PROBLEM), want)


def test_strided_batched_inputs_give_the_same_output():
    P = replace(PROBLEM, activation_format="batched")
    ckpt = synthesize("gptq-int4", P, seed=2)
    x, counts = make_batched_inputs(P, seed=3)
    want = moe(ckpt, x, None, None, P, expert_num_tokens=counts)
    got = moe(_strided(ckpt), restrided(x), None, None, P, expert_num_tokens=restrided(counts))
    _assert_same_output(got, want)
