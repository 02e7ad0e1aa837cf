"""FP4 E2M1 codes and their nibble packing (reference/elements.py, reference/packing.py).

Known answers are worked out by hand from OCP MX v1.0 §5.3.3 (1 sign, 2 exponent bits with
bias 1, 1 mantissa bit, no infinity or NaN); torch has no e2m1 dtype to compare against here,
so the cross-check against torchao's codec lives in tests/crosscheck.
"""

from __future__ import annotations

import math

import pytest
import torch
from moecert.reference.elements import decode_e2m1, encode_e2m1, round_to_e2m1
from moecert.reference.packing import pack_nibbles, unpack_nibbles


@pytest.mark.parametrize("code,value", [
    (0b0000, 0.0),    # e=0, m=0
    (0b0001, 0.5),    # subnormal: 2^0 * 1/2
    (0b0010, 1.0),    # e=1: 2^0
    (0b0011, 1.5),    # e=1, m=1
    (0b0100, 2.0),    # e=2: 2^1
    (0b0101, 3.0),
    (0b0110, 4.0),    # e=3: 2^2
    (0b0111, 6.0),    # largest: 2^2 * 1.5
    (0b1000, -0.0),
    (0b1011, -1.5),
    (0b1111, -6.0),
])
def test_decode_e2m1_known(code, value):
    got = decode_e2m1(torch.tensor([code]))
    assert got.dtype == torch.float64 and got.item() == value
    assert math.copysign(1.0, got.item()) == math.copysign(1.0, value)


@pytest.mark.parametrize("x,rounded", [
    (0.25, 0.0),     # tie between 0 and 0.5: 0 has the even mantissa
    (0.26, 0.5),
    (0.75, 1.0),     # tie between 0.5 (m=1) and 1.0 (m=0)
    (1.25, 1.0),     # tie between 1.0 and 1.5
    (1.75, 2.0),
    (2.5, 2.0),      # tie between 2 and 3: 2
    (3.5, 4.0),      # tie between 3 and 4: 4
    (5.0, 4.0),      # tie between 4 and 6: 4
    (5.01, 6.0),
    (7.0, 6.0),      # saturates
    (1e30, 6.0),
    (-0.3, -0.5),
    (-5.5, -6.0),
])
def test_round_to_e2m1_known(x, rounded):
    assert round_to_e2m1(torch.tensor([x], dtype=torch.float64)).item() == rounded


def test_round_to_e2m1_is_nearest():
    x = torch.linspace(-8, 8, 4001, dtype=torch.float64)
    grid = decode_e2m1(torch.arange(16))
    distance = (x.unsqueeze(-1) - grid).abs().min(-1).values
    got = round_to_e2m1(x)
    inside = x.abs() <= 6
    assert torch.equal((got - x).abs()[inside], distance[inside])
    assert torch.equal(got[~inside], 6.0 * x[~inside].sign())


def test_encode_e2m1_inverts_decode_and_refuses_non_values():
    codes = torch.arange(16)
    assert torch.equal(encode_e2m1(decode_e2m1(codes)).to(torch.int64), codes)
    with pytest.raises(ValueError, match="E2M1 values"):
        encode_e2m1(torch.tensor([2.5], dtype=torch.float64))


def test_nibbles_even_index_low():
    packed = pack_nibbles(torch.tensor([[0x1, 0x2, 0xF, 0x0]]))
    assert packed.dtype == torch.uint8 and packed.tolist() == [[0x21, 0x0F]]
    codes = torch.randint(0, 16, (3, 5, 8))
    assert torch.equal(unpack_nibbles(pack_nibbles(codes)), codes)
    with pytest.raises(ValueError, match="even length"):
        pack_nibbles(torch.zeros(3, dtype=torch.int64))
