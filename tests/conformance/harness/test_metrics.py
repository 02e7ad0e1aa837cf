"""Tier-3 metrics: each one sees the failure it exists for."""

from __future__ import annotations

import math

import pytest
import torch
from moecert.conformance.harness.metrics import error_metrics


@pytest.fixture
def ref():
    return torch.randn(32, 64, generator=torch.Generator().manual_seed(0), dtype=torch.float64)


def test_exact_output(ref):
    m = error_metrics(ref.clone(), ref)
    assert m == {"nonfinite": 0, "max_abs": 0.0, "max_abs_scaled": 0.0, "rel_fro": 0.0,
                 "cosine": pytest.approx(1.0), "min_row_cosine": pytest.approx(1.0),
                 "norm_ratio": pytest.approx(1.0), "mismatch_frac": 0.0}


def test_bf16_rounding_is_small_but_seen(ref):
    m = error_metrics(ref.to(torch.bfloat16), ref, atol=0, rtol=2.0**-8)
    assert 0 < m["rel_fro"] < 2.0**-8
    assert m["mismatch_frac"] == 0.0  # RNE: within half an ulp, the unit roundoff 2^-8


def test_a_doubled_output_shows_in_the_norm_ratio_not_the_cosine(ref):
    m = error_metrics(2 * ref, ref)
    assert m["cosine"] == pytest.approx(1.0)
    assert m["norm_ratio"] == pytest.approx(2.0)
    assert m["rel_fro"] == pytest.approx(1.0)


def test_one_bad_token_shows_in_the_row_cosine(ref):
    bad = ref.clone()
    bad[7] = -bad[7]
    m = error_metrics(bad, ref, atol=1e-3)
    assert m["min_row_cosine"] == pytest.approx(-1.0)
    assert m["cosine"] > 0.8
    assert m["mismatch_frac"] == pytest.approx(1 / 32, abs=0.01)


def test_nonfinite_first(ref):
    bad = ref.clone()
    bad[0, 0] = math.nan
    bad[1, 1] = math.inf
    m = error_metrics(bad, ref)
    assert m["nonfinite"] == 2
    assert math.isnan(m["rel_fro"]) and m["mismatch_frac"] == 1.0


def test_zero_rows_have_no_direction(ref):
    ref = ref.clone()
    ref[3] = 0
    act = ref.clone()
    assert error_metrics(act, ref)["min_row_cosine"] == pytest.approx(1.0)
    act[3] = 1.0  # an output where the reference is exactly zero (a dropped token)
    m = error_metrics(act, ref, atol=1e-6)
    assert m["max_abs"] == 1.0 and m["mismatch_frac"] == pytest.approx(64 / (32 * 64))


def test_empty_and_mismatched_shapes():
    empty = torch.empty(0, 8, dtype=torch.float64)
    assert error_metrics(empty, empty)["rel_fro"] == 0.0
    with pytest.raises(ValueError, match="shapes differ"):
        error_metrics(torch.zeros(2, 3), torch.zeros(3, 2, dtype=torch.float64))
