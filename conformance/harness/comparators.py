"""Comparators of the first two tiers. Each tier has its own, and none takes a tolerance knob:

tier 1, format conversion:     bit for bit (`assert_bitwise_equal`);
tier 2, quantize-dequantize:   integer codes may differ by one, and only where the scaled
                               input sits on a rounding tie (`assert_codes_equal_except_ties`),
                               because x / s and x * (1/s) may land on either side of it;
tier 3, GEMM and MoE:          tolerance tables (the harness issue).

Failures name the tensor and the first differing element, e.g.
``w13 codes[e=0, 3, 17] = 5, but the reference has 4``.
"""

from __future__ import annotations

import torch

# Relative distance from x/s to a .5 tie within which the tie is provable: two float64
# computations of the quotient (x / s versus x * (1 / s)) differ by at most a few ulps.
TIE_RTOL = 8 * torch.finfo(torch.float64).eps


def _where(index: tuple[int, ...]) -> str:
    return "[" + ", ".join(["e=" + str(index[0]), *map(str, index[1:])]) + "]" \
        if len(index) > 1 else str(list(index))


def first_difference(name: str, actual: torch.Tensor, expected: torch.Tensor,
                     mask: torch.Tensor) -> str:
    idx = tuple(int(i) for i in mask.nonzero()[0])
    return (f"{name}{_where(idx)} = {actual[idx].item()}, but the reference has "
            f"{expected[idx].item()} ({int(mask.sum())} of {mask.numel()} elements differ)")


def assert_bitwise_equal(name: str, actual: torch.Tensor, expected: torch.Tensor) -> None:
    """Same shape, same dtype, same bits (NaN payloads included)."""
    if actual.shape != expected.shape:
        raise AssertionError(f"{name}: shape {list(actual.shape)}, but the reference has "
                             f"{list(expected.shape)}")
    if actual.dtype != expected.dtype:
        raise AssertionError(f"{name}: dtype {actual.dtype}, but the reference has "
                             f"{expected.dtype}")
    a, b = _bits(actual), _bits(expected)
    differ = a != b
    if differ.any():
        raise AssertionError(first_difference(name, actual, expected, differ))


def _bits(t: torch.Tensor) -> torch.Tensor:
    if t.dtype == torch.bool:
        return t.to(torch.uint8)
    if t.is_floating_point():
        width = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
        return t.contiguous().view(width[t.element_size()])
    return t


def rounding_ties(quotient: torch.Tensor) -> torch.Tensor:
    """Where a float64 quotient x/s lies on a .5 rounding tie (up to TIE_RTOL)."""
    q = quotient.to(torch.float64)
    frac = (q - torch.floor(q)).sub(0.5).abs()
    return frac <= TIE_RTOL * q.abs().clamp(min=1.0)


def assert_codes_equal_except_ties(name: str, actual: torch.Tensor, expected: torch.Tensor,
                                   quotient: torch.Tensor) -> int:
    """Integer codes equal everywhere except where `quotient` (x / s before rounding) is a
    tie, and there by at most one. Returns how many tie elements differed."""
    if actual.shape != expected.shape:
        raise AssertionError(f"{name}: shape {list(actual.shape)}, but the reference has "
                             f"{list(expected.shape)}")
    diff = (actual.to(torch.int64) - expected.to(torch.int64)).abs()
    ties = rounding_ties(quotient)
    bad = (diff > 1) | ((diff == 1) & ~ties)
    if bad.any():
        raise AssertionError(first_difference(name, actual, expected, bad)
                             + " outside a rounding tie")
    return int(((diff == 1) & ties).sum())
