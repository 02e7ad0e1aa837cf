"""FP8 E4M3, E8M0 and the MX shared-scale rules (reference/elements.py).

The decoders are written from the formats' definitions; here they are checked against values
worked out by hand and, independently, against torch's own float8_e4m3fn casts.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from moecert.reference.canonical import dequantize_canonical
from moecert.reference.elements import (
    decode,
    decode_codes,
    decode_e4m3,
    decode_e8m0,
    mx_scale_exponent,
    round_to_e4m3,
)
from moecert.reference.quantize import quantize_mxfp8
from moecert.reference.schemes.elements import ELEMENTS, EXPONENT, FLOAT

ALL_BYTES = torch.arange(256, dtype=torch.int64).to(torch.uint8)
RULES = ("floor", "even", "ceil", "rceil")


def torch_e4m3(values: torch.Tensor) -> torch.Tensor:
    """float64 of torch's float32 -> float8_e4m3fn cast (the comparison oracle)."""
    return values.to(torch.float32).to(torch.float8_e4m3fn).to(torch.float64)


def finite_e4m3_values() -> torch.Tensor:
    """Every finite non-negative E4M3FN value, ascending (bytes 0x00..0x7e), via torch."""
    return ALL_BYTES[:0x7F].view(torch.float8_e4m3fn).to(torch.float64)


# --- E4M3 -----------------------------------------------------------------------------------

@pytest.mark.parametrize("byte,value", [
    (0x00, 0.0),            # e=0, m=0
    (0x01, 2.0**-9),        # subnormal: 2^-6 * 1/8
    (0x07, 7 * 2.0**-9),    # largest subnormal: 2^-6 * 7/8
    (0x08, 2.0**-6),        # e=1, m=0: smallest normal 2^(1-7)
    (0x38, 1.0),            # e=7, m=0: 2^0
    (0x3C, 1.5),            # e=7, m=4: 1 + 4/8
    (0x7E, 448.0),          # e=15, m=6: 2^8 * 1.75 (m=7 would be NaN)
    (0xFE, -448.0),
    (0x80, -0.0),
])
def test_decode_e4m3_known(byte, value):
    got = decode_e4m3(torch.tensor([byte], dtype=torch.uint8))
    assert got.dtype == torch.float64
    assert got.item() == value
    assert math.copysign(1.0, got.item()) == math.copysign(1.0, value)


@pytest.mark.parametrize("byte", [0x7F, 0xFF])
def test_decode_e4m3_nan(byte):
    assert torch.isnan(decode_e4m3(torch.tensor([byte], dtype=torch.uint8))).all()


def test_decode_e4m3_all_bytes_match_torch():
    ours = decode_e4m3(ALL_BYTES)
    theirs = ALL_BYTES.view(torch.float8_e4m3fn).to(torch.float64)
    assert torch.equal(torch.isnan(ours), torch.isnan(theirs))
    finite = ~torch.isnan(theirs)
    assert torch.equal(ours[finite], theirs[finite])
    assert torch.equal(torch.signbit(ours[finite]), torch.signbit(theirs[finite]))
    # a float8_e4m3fn tensor decodes like its bytes
    assert torch.equal(decode_e4m3(ALL_BYTES.view(torch.float8_e4m3fn))[finite], ours[finite])


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(min_value=-448.0, max_value=448.0, width=32), min_size=1,
                max_size=64))
def test_round_to_e4m3_matches_torch_cast(xs):
    x = torch.tensor(xs, dtype=torch.float32)
    assert torch.equal(round_to_e4m3(x.to(torch.float64)), torch_e4m3(x))


@settings(max_examples=60, deadline=None)
@given(exp=st.integers(-12, 8), seed=st.integers(0, 2**31 - 1))
def test_round_to_e4m3_matches_torch_cast_per_binade(exp, seed):
    # uniform draws rarely land in the subnormal range; sample each binade on purpose
    gen = torch.Generator().manual_seed(seed)
    x = (torch.rand(256, generator=gen) + 1) * 2.0**exp * torch.where(
        torch.rand(256, generator=gen) < 0.5, -1.0, 1.0)
    x = x.clamp(-448, 448).to(torch.float32)
    assert torch.equal(round_to_e4m3(x.to(torch.float64)), torch_e4m3(x))


def test_round_to_e4m3_ties_to_even():
    # midpoints between neighbouring E4M3 values are exact in fp32; RNE picks the even code
    v = finite_e4m3_values()
    mid = ((v[:-1] + v[1:]) / 2).to(torch.float32)
    expected = torch.where(torch.arange(1, 127) % 2 == 0, v[1:], v[:-1])  # even byte wins
    assert torch.equal(round_to_e4m3(mid.to(torch.float64)), expected)
    assert torch.equal(round_to_e4m3(mid.to(torch.float64)), torch_e4m3(mid))
    assert torch.equal(round_to_e4m3(-mid.to(torch.float64)), -expected)


@pytest.mark.parametrize("x", [448.0, 449.0, 463.9, 464.0, 480.0, 1e6, math.inf])
def test_round_to_e4m3_saturates(x):
    got = round_to_e4m3(torch.tensor([x, -x], dtype=torch.float64))
    assert got.tolist() == [448.0, -448.0]


def test_round_to_e4m3_keeps_nan():
    assert torch.isnan(round_to_e4m3(torch.tensor([math.nan], dtype=torch.float64))).all()


# --- E8M0 -----------------------------------------------------------------------------------

@pytest.mark.parametrize("byte,value", [
    (127, 1.0), (0, 2.0**-127), (254, 2.0**127), (128, 2.0), (120, 2.0**-7),
])
def test_decode_e8m0_known(byte, value):
    # E8M0: value 2^(e - 127), no sign, no mantissa
    got = decode_e8m0(torch.tensor([byte], dtype=torch.uint8))
    assert got.dtype == torch.float64
    assert got.item() == value


def test_decode_e8m0_nan():
    assert torch.isnan(decode_e8m0(torch.tensor([0xFF], dtype=torch.uint8))).all()


def test_decode_e8m0_all_bytes():
    got = decode_e8m0(ALL_BYTES)
    assert torch.equal(got[:255], torch.tensor([2.0**(e - 127) for e in range(255)],
                                                dtype=torch.float64))


# --- MX shared-scale exponent (E4M3 elements: emax 8, max 448, 3 mantissa bits) --------------
#
# floor: floor(log2 amax) - 8           ceil:  ceil(log2 amax) - 8
# even:  amax rounded to 3 mantissa bits (ties to even), then floor(log2) - 8
# rceil: ceil(log2(amax / 448))
MX_CASES = [
    # amax = 448 = 1.75 * 2^8: floor 8-8=0; even 1.75 exact -> 0; ceil log2=8.81 -> 9-8=1;
    # rceil log2(1)=0 -> 0
    (448.0, {"floor": 0, "even": 0, "ceil": 1, "rceil": 0}),
    # amax = 480 = 1.875 * 2^8: floor 0; even: 1.875 = 1.111b is exact at 3 bits, stays in
    # binade 8 -> 0; ceil log2=8.91 -> 1; rceil log2(480/448)=0.10 -> 1
    (480.0, {"floor": 0, "even": 0, "ceil": 1, "rceil": 1}),
    # amax = 496 = 1.9375 * 2^8: even: halfway between 1.875 (odd) and 2.0 (even) -> 2^9,
    # 9-8 = 1; floor 0; ceil 1; rceil log2(496/448)=0.15 -> 1
    (496.0, {"floor": 0, "even": 1, "ceil": 1, "rceil": 1}),
    # amax = 500 = 1.953 * 2^8: even rounds up to 2^9 -> 1
    (500.0, {"floor": 0, "even": 1, "ceil": 1, "rceil": 1}),
    # amax = 256 = 2^8: every rule 0 (rceil: log2(256/448) = -0.81 -> 0)
    (256.0, {"floor": 0, "even": 0, "ceil": 0, "rceil": 0}),
    # amax = 1: floor/even/ceil 0-8 = -8; rceil log2(1/448) = -8.81 -> -8
    (1.0, {"floor": -8, "even": -8, "ceil": -8, "rceil": -8}),
    # amax = 1.5: floor -8, even -8 (1.5 exact); ceil log2=0.58 -> 1-8 = -7;
    # rceil log2(1.5/448) = -8.22 -> -8
    (1.5, {"floor": -8, "even": -8, "ceil": -7, "rceil": -8}),
    # amax = 0: byte 0, exponent -127, for every rule
    (0.0, {"floor": -127, "even": -127, "ceil": -127, "rceil": -127}),
    # amax = 2^-140: floor -148 clamps to -127
    (2.0**-140, {"floor": -127, "even": -127, "ceil": -127, "rceil": -127}),
    # amax = 2^130: floor 122; ceil 122; rceil log2(2^130/448) = 121.19 -> 122
    (2.0**130, {"floor": 122, "even": 122, "ceil": 122, "rceil": 122}),
]


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("amax,expected", MX_CASES, ids=[str(a) for a, _ in MX_CASES])
def test_mx_scale_exponent_known(amax, expected, rule):
    got = mx_scale_exponent(torch.tensor([amax], dtype=torch.float64), rule)
    assert got.item() == expected[rule]


@pytest.mark.parametrize("k", [-20, -6, -1, 0, 1, 5, 30])
def test_mx_scale_exponent_seven_times_power_of_two(k):
    # amax = 7 * 2^k = 1.75 * 2^(k+2): floor = even = k+2-8 = k-6 (1.75 exact at 3 bits);
    # ceil = k+3-8 = k-5; rceil = ceil(log2(7*2^k / 448)) = ceil(log2(2^k / 64)) = k-6.
    amax = torch.tensor([7.0 * 2.0**k], dtype=torch.float64)
    expected = {"floor": k - 6, "even": k - 6, "ceil": k - 5, "rceil": k - 6}
    for rule in RULES:
        assert mx_scale_exponent(amax, rule).item() == expected[rule], rule


@pytest.mark.parametrize("k", [-30, -1, 0, 9, 30, 100])
def test_mx_scale_exponent_just_below_a_power_of_two(k):
    # amax = 2^k (1 - 2^-53) lies in binade k-1: floor = k-1-8; ceil = k-8; even rounds the
    # all-ones mantissa up to 2^k: k-8; rceil = ceil(k - 8.807...) = k-8. A rounded log2 lands
    # on k itself for large |k|, so exponents must come from the binary exponent.
    amax = torch.tensor([math.ldexp(1 - 2.0**-53, k)], dtype=torch.float64)
    expected = {"floor": k - 9, "even": k - 8, "ceil": k - 8, "rceil": k - 8}
    for rule in RULES:
        assert mx_scale_exponent(amax, rule).item() == expected[rule], rule
    # and E4M3 rounding of values just below a binade edge: 2^k (1 - 2^-53) for k in the
    # normal range rounds up to 2^k (the spacing below 2^k is 2^(k-4))
    if -6 <= k <= 8:
        assert round_to_e4m3(amax).item() == 2.0**k


def test_mx_scale_exponent_unknown_rule():
    with pytest.raises(ValueError, match="unknown MX scale rule"):
        mx_scale_exponent(torch.ones(1, dtype=torch.float64), "nearest")


@settings(max_examples=60, deadline=None)
@given(rule=st.sampled_from(RULES), exp=st.integers(-100, 100),
       seed=st.integers(0, 2**31 - 1))
def test_mx_scale_keeps_block_in_range(rule, exp, seed):
    # After scaling by 2^-exponent the block max sits at or below 448 for ceil/rceil (no
    # saturation) and in [256, 512) for floor: what each rule promises.
    gen = torch.Generator().manual_seed(seed)
    amax = (torch.rand(64, generator=gen, dtype=torch.float64) + 0.5) * 2.0**exp
    scaled = amax / torch.exp2(mx_scale_exponent(amax, rule))
    if rule in ("ceil", "rceil"):
        assert (scaled <= 448).all()
    if rule == "floor":
        assert ((scaled >= 256) & (scaled < 512)).all()
    if rule == "even":
        assert ((scaled >= 248) & (scaled < 496)).all()


@settings(max_examples=60, deadline=None)
@given(rule=st.sampled_from(("floor", "even")), exp=st.integers(-40, 40),
       seed=st.integers(0, 2**31 - 1), rows=st.integers(1, 4), blocks=st.integers(1, 4))
def test_quantize_mxfp8_is_idempotent(rule, exp, seed, rows, blocks):
    # For floor and even the largest code of a block lands in [256, 448], so the dequantized
    # block requantizes to the same exponent and the same (already E4M3) codes.
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(2, rows, 32 * blocks, generator=gen, dtype=torch.float64) * 2.0**exp
    w[0, 0, :32] = 0.0  # an all-zero block too
    first = quantize_mxfp8(w, rule)
    again = quantize_mxfp8(dequantize_canonical(first), rule)
    assert torch.equal(again.codes, first.codes)
    assert torch.equal(again.scales, first.scales)
    assert again.block == first.block == (1, 32)


@pytest.mark.parametrize("rule", ["floor", "even", "ceil", "rceil"])
def test_nonfinite_mx_block_is_nan_whole_block(rule):
    # OCP MX §5.4: a NaN scale makes every element of its block NaN; Inf has no E8M0 code.
    from moecert.reference.quantize import qdq_mxfp8

    x = torch.ones(3, 64, dtype=torch.float64)
    x[0, 3], x[1, 40] = float("inf"), float("nan")
    y = qdq_mxfp8(x, rule)
    assert torch.isnan(y[0, :32]).all() and torch.isnan(y[1, 32:]).all()
    assert torch.equal(y[0, 32:], x[0, 32:]) and torch.equal(y[2], x[2])


@pytest.mark.parametrize("name", sorted(n for n, el in ELEMENTS.items()
                                        if el.kind in (EXPONENT, FLOAT)))
def test_the_decode_table_gives_decode_s_values(name):
    """The reference decodes stored weights by look-up (`decode_codes`, issue 43: decode's
    arithmetic was 65 of 71 s of a DeepSeek-shaped fp8 reference on the CPU): the same float64
    values as `decode` on every code, bit for bit, NaN where decode has NaN, in the codes'
    shape. A table off by one code, or built for the wrong element, fails here."""
    el = ELEMENTS[name]
    codes = torch.randint(0, 1 << el.bits, (3, 5, 1 << el.bits), dtype=torch.int64)
    codes[0, 0] = torch.arange(1 << el.bits)  # every code once
    want, got = decode(codes, el), decode_codes(codes, el)
    assert got.shape == codes.shape and got.dtype == torch.float64
    assert torch.equal(torch.isnan(got), torch.isnan(want))
    bits = [t.nan_to_num(7.0).view(torch.int64) for t in (got, want)]
    assert torch.equal(*bits)
