"""Strided cases: every tensor a backend receives holds the case's values in a non-contiguous
layout, and the checks (no_mutation included) judge them as they judge contiguous ones."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from moecert.conformance.harness.cases import Case
from moecert.conformance.harness.context import CaseRun
from moecert.conformance.harness.execute import run_case
from moecert.conformance.harness.strides import restrided
from moecert.reference import SCHEME_NAMES, MoEProblem
from moecert.reference.schemes import Variant

PROBLEM = MoEProblem(M=5, K=128, N=128, E=3, topk=2)
# every scheme's default, and the variants that add tensors (zero points, g_idx, input scales)
VARIANTS = [(s, {}) for s in SCHEME_NAMES] + [
    ("gptq-int4", {"sym": False, "act_order": True}),
    ("ct-int8", {"sym": False, "act_order": True}),
    ("int8-w8a8", {"activation": "static-tensor"}),
]


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(-1).view(torch.uint8)


@pytest.mark.parametrize("t", [torch.randn(3, 4, 5), torch.randn(3, 1, 5), torch.randn(3, 5, 1),
                               torch.randn(1, 5), torch.randn(4), torch.randint(0, 9, (6, 2)),
                               torch.randn(3, 4).to(torch.float8_e4m3fn), torch.tensor(2.5)],
                         ids=["3d", "size1-row", "size1-col", "1xn", "1d", "int", "fp8", "0d"])
def test_restrided_keeps_values_and_changes_the_layout(t):
    r = restrided(t)
    assert r.shape == t.shape and r.dtype == t.dtype
    assert torch.equal(_bits(r), _bits(t))
    assert not r.is_contiguous() or r.storage_offset() > 0  # 0-d: a view one element in


@pytest.mark.parametrize("scheme, attrs", VARIANTS,
                         ids=[s + "".join(f"-{k}" for k in a) for s, a in VARIANTS])
def test_a_strided_case_hands_over_every_tensor_non_contiguous(scheme, attrs):
    run = CaseRun(Case("torch", Variant(scheme, **attrs), replace(PROBLEM, bias=True),
                       strided=True))
    contiguous = [name for name, t in run.watched_tensors().items() if t.is_contiguous()]
    assert not contiguous


def test_a_strided_case_holds_the_values_of_the_contiguous_one():
    plain = CaseRun(Case("torch", Variant("gptq-int4", sym=False, act_order=True),
                         replace(PROBLEM, bias=True)))
    strided = CaseRun(replace(plain.case, strided=True)).watched_tensors()
    assert strided.keys() == plain.watched_tensors().keys()
    for name, t in plain.watched_tensors().items():
        assert torch.equal(_bits(strided[name]), _bits(t)), name


def test_batched_inputs_of_a_strided_case_are_non_contiguous():
    case = Case("torch", "bf16", replace(PROBLEM, activation_format="batched"), strided=True)
    tensors = CaseRun(case).watched_tensors()
    assert "expert_num_tokens" in tensors
    assert not any(t.is_contiguous() for t in tensors.values())


def _no_mutation(case: Case) -> str:
    (row,) = run_case(case, checks=["no_mutation"])
    return row["status"]


def test_no_mutation_judges_strided_tensors(writes_into_the_checkpoint):
    case = Case("torch", "bf16", PROBLEM, strided=True, depth="light")
    assert _no_mutation(case) == "pass"
    assert _no_mutation(replace(case, backend=writes_into_the_checkpoint)) == "fail"
