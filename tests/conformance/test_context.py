"""What the no_mutation and state checks compare: copies of small tensors, fingerprints of
model-size ones, both blind to strides and sensitive to one changed byte."""

from __future__ import annotations

import pytest
import torch
from moecert.conformance import context
from moecert.conformance.context import fingerprint, keepsake, unchanged


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
