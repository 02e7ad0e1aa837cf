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


@pytest.mark.parametrize("x,rne,rna", [
    (0.25, 0.0, 0.5),   # tie between 0 and 0.5: away from zero takes 0.5
    (0.24, 0.0, 0.0),
    (1.25, 1.0, 1.5),
    (2.5, 2.0, 3.0),
    (5.0, 4.0, 6.0),
    (0.75, 1.0, 1.0),   # ties where the even neighbour is also the larger one agree
    (3.5, 4.0, 4.0),
    (-2.5, -2.0, -3.0),  # away from zero on the negative side too
    (7.0, 6.0, 6.0),    # both saturate
])
def test_round_to_e2m1_ties_even_or_away(x, rne, rna):
    t = torch.tensor([x], dtype=torch.float64)
    assert round_to_e2m1(t).item() == rne
    assert round_to_e2m1(t, "rna").item() == rna


def test_mxfp4_quantize_known_blocks():
    """One row of two MX blocks, worked by hand. Block 0: amax 0.75 = 6 * 2^-3: rceil
    2^ceil(log2(0.75 / 6)) = 2^-3 (E8M0 byte 124), 0.75 -> code 6 (0b0111); 0.3125 = 2.5 *
    2^-3 is a tie: 3 away from zero, 2 to even. Block 1: amax 0.875 = 7 * 2^-3: rceil
    2^ceil(log2(0.875 / 6)) = 2^-2, 0.875 / 0.25 = 3.5 -> 4 either way; OCP floor would take
    2^(floor(log2 0.875) - 2) = 2^-3 and saturate 7 to 6."""
    from moecert.reference.quantize import quantize_mx

    w = torch.zeros(1, 1, 64, dtype=torch.float64)
    w[0, 0, 0], w[0, 0, 1], w[0, 0, 32] = 0.75, -0.3125, 0.875
    rna = quantize_mx(w, "rceil", "e2m1", "rna")
    assert rna.scales.flatten().tolist() == [2.0**-3, 2.0**-2]
    assert rna.codes[0, 0, [0, 1, 32]].tolist() == [6.0, -3.0, 4.0]
    assert quantize_mx(w, "rceil", "e2m1", "rne").codes[0, 0, 1].item() == -2.0
    floor = quantize_mx(w, "floor", "e2m1")
    assert floor.scales.flatten().tolist() == [2.0**-3, 2.0**-3]
    assert floor.codes[0, 0, 32].item() == 6.0  # 7 saturated


def test_mxfp4_checkpoint_known_bytes():
    """Bytes and values by hand: weight byte 0x21 holds element 0 = code 1 (0.5, low nibble)
    and element 1 = code 2 (1.0, high nibble); 0xF7 holds 6 and -6. E8M0 byte 127 is 1.0,
    byte 0 is 2^-127, byte 128 is 2."""
    from moecert.reference import Checkpoint, dequantize

    E, K, N = 1, 32, 32
    t = {"w13_weight": torch.zeros(E, 2 * N, K // 2, dtype=torch.uint8),
         "w13_weight_scale": torch.full((E, 2 * N, 1), 127, dtype=torch.uint8),
         "w2_weight": torch.zeros(E, K, N // 2, dtype=torch.uint8),
         "w2_weight_scale": torch.full((E, K, 1), 128, dtype=torch.uint8)}
    t["w13_weight"][0, 0, 0] = 0x21
    t["w13_weight"][0, 1, 3] = 0xF7
    t["w13_weight_scale"][0, 1, 0] = 0
    t["w2_weight"][0, 5, 15] = 0x9A  # low 0xA = -1.0 (element 30), high 0x9 = -0.5 (31)
    w = dequantize(Checkpoint("mxfp4", t))
    assert w["w13"][0, 0, :3].tolist() == [0.5, 1.0, 0.0]
    assert w["w13"][0, 1, 6:8].tolist() == [6.0 * 2.0**-127, -6.0 * 2.0**-127]
    assert w["w2"][0, 5, 30:].tolist() == [-2.0, -1.0]
    assert int((w["w13"] != 0).sum()) == 4 and int((w["w2"] != 0).sum()) == 2
