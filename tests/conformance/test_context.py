"""What the no_mutation and state checks compare: copies of small tensors, fingerprints of
model-size ones, both blind to strides and sensitive to one changed byte."""

from __future__ import annotations

import pytest
import torch
from moecert.conformance import context
from moecert.conformance.cases import Case
from moecert.conformance.context import fingerprint, keepsake, unchanged
from moecert.conformance.execute import run_case
from moecert.kernels import DelegatingBackend, register_backend
from moecert.kernels.registry import unregister_backend
from moecert.reference import MoEProblem


def test_a_copy_ignores_strides_and_sees_one_changed_element():
    t = torch.randn(6, 4).t()  # not contiguous, as a checkpoint view may be
    kept = keepsake(t)
    assert unchanged(kept, t) and unchanged(kept, t.contiguous())
    t[2, 3] += 1
    assert not unchanged(kept, t)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int32, torch.bfloat16])
def test_big_tensors_are_fingerprinted(monkeypatch, dtype):
    monkeypatch.setattr(context, "COPY_MAX_BYTES", 64)
    t = torch.randint(0, 100, (64, 33)).to(dtype)
    kept = keepsake(t)
    assert isinstance(kept, tuple) and unchanged(kept, t)
    flipped = t.clone()
    flipped[5, 7] += 1
    assert not unchanged(kept, flipped)
    swapped = t.clone()
    swapped[0, 0], swapped[0, 1] = t[0, 1] + 0, t[0, 0] + 0
    assert t[0, 0] == t[0, 1] or not unchanged(kept, swapped)


def test_fingerprints_differ_across_shapes():
    t = torch.arange(12, dtype=torch.int32)
    assert fingerprint(t) != fingerprint(t.view(3, 4))


# --- the optional describe hook (column backend_detail) ------------------------------------

class _Describing(DelegatingBackend):
    """torch, describing each layer as it stands when the harness asks."""

    def describe(self, layer):
        return f"torch layer, processed={layer.processed}"


class _DescribeRaises(DelegatingBackend):
    def describe(self, layer):
        raise RuntimeError("no words")


@pytest.fixture
def describing_backends():
    names = [register_backend(_Describing("torch", "describing")).name,
             register_backend(_Describing("torch", "describing-gptq",
                                          schemes=("gptq-int4",))).name,
             register_backend(_DescribeRaises("torch", "describe-raises")).name]
    yield
    for name in names:
        unregister_backend(name)


def _rows(backend):
    P = MoEProblem(M=5, K=64, N=64, E=3, topk=2)
    return run_case(Case(backend, "bf16", P, {}, 0), checks=("claims", "accuracy"))


def test_every_row_of_a_case_carries_the_processed_layers_description(describing_backends):
    rows = _rows("describing")
    assert [r["status"] for r in rows] == ["pass", "pass"]
    assert {r["backend_detail"] for r in rows} == {"torch layer, processed=True"}


def test_no_hook_or_no_layer_leaves_it_empty_and_a_raising_hook_says_so(describing_backends):
    assert {r["backend_detail"] for r in _rows("torch")} == {""}
    unclaimed = _rows("describing-gptq")  # bf16: no layer of the case is ever processed
    assert [r["status"] for r in unclaimed] == ["unsupported", "unsupported"]
    assert {r["backend_detail"] for r in unclaimed} == {""}
    assert {r["backend_detail"] for r in _rows("describe-raises")} == {
        "describe raised RuntimeError: no words"}
