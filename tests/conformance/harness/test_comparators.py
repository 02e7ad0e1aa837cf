"""The tier-1 and tier-2 comparators fail where they must, and only there."""

from __future__ import annotations

import pytest
import torch
from moecert.conformance.harness.comparators import (
    assert_bitwise_equal,
    assert_codes_equal_except_ties,
    rounding_ties,
)


def test_bitwise_equal_passes_on_identical_and_names_first_difference():
    a = torch.arange(24, dtype=torch.int32).view(2, 3, 4)
    assert_bitwise_equal("codes", a, a.clone())
    b = a.clone()
    b[1, 2, 3] += 1
    with pytest.raises(AssertionError, match=r"codes\[e=1, 2, 3\] = 24, but the reference has 23"):
        assert_bitwise_equal("codes", b, a)


def test_bitwise_equal_sees_signed_zero_and_dtype():
    a = torch.tensor([0.0, 1.0])
    with pytest.raises(AssertionError, match="differ"):
        assert_bitwise_equal("scales", torch.tensor([-0.0, 1.0]), a)
    with pytest.raises(AssertionError, match="dtype"):
        assert_bitwise_equal("scales", a.double(), a)


def test_codes_may_differ_by_one_only_at_ties():
    quotient = torch.tensor([2.5, 3.2, -1.5, 0.4], dtype=torch.float64)
    reference = torch.round(quotient).to(torch.int32)  # [2, 3, -2, 0]
    other_side = torch.tensor([3, 3, -1, 0], dtype=torch.int32)  # ties resolved the other way
    assert assert_codes_equal_except_ties("codes", other_side, reference, quotient) == 2
    off_tie = torch.tensor([2, 4, -2, 0], dtype=torch.int32)
    with pytest.raises(AssertionError, match="outside a rounding tie"):
        assert_codes_equal_except_ties("codes", off_tie, reference, quotient)
    two_off = torch.tensor([4, 3, -2, 0], dtype=torch.int32)
    with pytest.raises(AssertionError, match="outside a rounding tie"):
        assert_codes_equal_except_ties("codes", two_off, reference, quotient)


def test_ties_found_after_reciprocal_multiplication():
    # x * (1/s) can miss the exact tie by an ulp; it is still a tie.
    x, s = torch.tensor([0.3], dtype=torch.float64), torch.tensor([0.2], dtype=torch.float64)
    assert rounding_ties(x * (1 / s)).all() and rounding_ties(x / s).all()
    assert not rounding_ties(torch.tensor([1.4999, 2.0], dtype=torch.float64)).any()
