"""Bit packing into int32 words and the AutoAWQ column interleave (reference/packing.py).

Known answers are worked out by hand from the formats (nibble i of a word at bits 4i..4i+3);
the properties check the packers against an oracle written with Python integers, one code at a
time, so that no torch shift or reshape is shared with the code under test.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from moecert.reference.packing import (
    awq_interleave,
    awq_undo_interleave,
    pack_int32,
    packed_length,
    unpack_int32,
)

PACKINGS = ("padded", "dense")


def as_int32(word: int) -> int:
    """The signed int32 holding the 32-bit pattern `word`."""
    return word - (1 << 32) if word >= 1 << 31 else word


def oracle_words(codes: list[int], bits: int, packing: str) -> list[int]:
    """Signed int32 words of `codes`, LSB first, built one code at a time with Python ints.

    padded: floor(32/b) codes per word, code j of a word at bits j*b; dense: one bitstream,
    code i at global bits i*b .. i*b+b-1, cut into 32-bit words.
    """
    if packing == "dense":
        stream = sum(c << (i * bits) for i, c in enumerate(codes))
        n = -(-len(codes) * bits // 32)
        return [as_int32((stream >> (32 * w)) & 0xFFFFFFFF) for w in range(n)]
    per = 32 // bits
    words = []
    for start in range(0, len(codes), per):
        words.append(as_int32(sum(c << (j * bits)
                                  for j, c in enumerate(codes[start:start + per]))))
    return words


def words_tensor(*words: int) -> torch.Tensor:
    return torch.tensor([as_int32(w) for w in words], dtype=torch.int32)


# --- known answers --------------------------------------------------------------------------

@pytest.mark.parametrize("packing", PACKINGS)
def test_ct_int4_row_minus8_to_7(packing):
    # compressed-tensors stores u = q + 8: q = -8..7 is u = 0..15. Word 0 holds u = 0..7 with
    # u_i in bits 4i..4i+3, read as hex from the top nibble: 0x76543210; word 1: 0xfedcba98.
    q = torch.arange(-8, 8)
    packed = pack_int32(q + 8, 4, packing=packing)
    assert packed.dtype == torch.int32
    assert torch.equal(packed, words_tensor(0x76543210, 0xFEDCBA98))
    assert packed[1].item() == 0xFEDCBA98 - (1 << 32)  # negative as a signed int32
    assert torch.equal(unpack_int32(packed, 4, 16, packing=packing) - 8, q.to(torch.int32))


def test_awq_columns_0_to_7():
    # AutoAWQ: slot i of a word holds column order[i], order = [0,2,4,6,1,3,5,7]. Column j
    # holds value j, so slots hold 0,2,4,6,1,3,5,7; top nibble first: 0x75316420.
    cols = torch.arange(8).view(1, 8)
    slots = awq_interleave(cols, dim=1)
    assert slots.tolist() == [[0, 2, 4, 6, 1, 3, 5, 7]]
    packed = pack_int32(slots, 4, dim=1)
    assert torch.equal(packed, words_tensor(0x75316420).view(1, 1))
    back = awq_undo_interleave(unpack_int32(packed, 4, 8, dim=1), dim=1)
    assert torch.equal(back, cols.to(torch.int32))


def test_gptq_nibbles():
    # Nibbles 8,12,2,2,5,10,8,14 at bits 0,4,...,28: top nibble first e,8,a,5,2,2,c,8.
    u = torch.tensor([8, 12, 2, 2, 5, 10, 8, 14])
    assert torch.equal(pack_int32(u, 4), words_tensor(0xE8A522C8))
    assert torch.equal(unpack_int32(words_tensor(0xE8A522C8), 4, 8), u.to(torch.int32))


def test_gptq_packs_along_dim0():
    # GPTQ qweight [in/8, out]: column o of word row w holds inputs 8w..8w+7 of output o.
    u = torch.stack([torch.tensor([8, 12, 2, 2, 5, 10, 8, 14]), torch.arange(8)], dim=1)
    assert torch.equal(pack_int32(u, 4, dim=0), words_tensor(0xE8A522C8, 0x76543210).view(1, 2))


@pytest.mark.parametrize("packing", PACKINGS)
def test_int8_bytes(packing):
    # GPTQ int8 stores u = q + 128: q = -128, -1, 0, 127 is u = 0x00, 0x7f, 0x80, 0xff in bytes
    # 0..3 of the word (byte 0 lowest): 0xff807f00.
    q = torch.tensor([-128, -1, 0, 127])
    packed = pack_int32(q + 128, 8, packing=packing)
    assert torch.equal(packed, words_tensor(0xFF807F00))
    assert torch.equal(unpack_int32(packed, 8, 4, packing=packing) - 128, q.to(torch.int32))


def test_three_bit_word_counts():
    # 64 three-bit codes: a dense bitstream needs ceil(192/32) = 6 words; padded holds
    # floor(32/3) = 10 codes per word and needs ceil(64/10) = 7.
    codes = torch.arange(64) % 8
    assert pack_int32(codes, 3, packing="dense").shape == (6,)
    assert pack_int32(codes, 3, packing="padded").shape == (7,)
    assert packed_length(64, 3, "dense") == 6
    assert packed_length(64, 3, "padded") == 7


@pytest.mark.parametrize("bad", [-1, 16])
def test_pack_rejects_codes_out_of_range(bad):
    with pytest.raises(ValueError, match="codes must lie in"):
        pack_int32(torch.tensor([0, bad]), 4)


def test_interleave_needs_multiples_of_8():
    with pytest.raises(ValueError, match="multiple of 8"):
        awq_interleave(torch.arange(12))


# --- properties -----------------------------------------------------------------------------

@st.composite
def packed_cases(draw, bit_choices=tuple(range(1, 9))):
    """(codes tensor, bits, dim, packing): rank 1-3, any packed dim, lengths with remainders."""
    bits = draw(st.sampled_from(bit_choices))
    rank = draw(st.integers(1, 3))
    shape = [draw(st.integers(1, 4)) for _ in range(rank)]
    dim = draw(st.integers(-rank, rank - 1))
    shape[dim] = draw(st.integers(1, 70))
    seed = draw(st.integers(0, 2**31 - 1))
    gen = torch.Generator().manual_seed(seed)
    codes = torch.randint(0, 1 << bits, shape, generator=gen)
    if draw(st.booleans()):  # all-ones codes exercise the sign bit and straddling high bits
        codes = torch.full(shape, (1 << bits) - 1)
    return codes, bits, dim, draw(st.sampled_from(PACKINGS))


@settings(max_examples=100, deadline=None)
@given(packed_cases())
def test_pack_then_unpack_is_identity(case):
    codes, bits, dim, packing = case
    count = codes.shape[dim]
    words = pack_int32(codes, bits, dim=dim, packing=packing)
    assert words.dtype == torch.int32
    assert words.shape[dim] == packed_length(count, bits, packing)
    back = unpack_int32(words, bits, count, dim=dim, packing=packing)
    assert back.dtype == torch.int32
    assert torch.equal(back, codes.to(torch.int32))


@settings(max_examples=100, deadline=None)
@given(bits=st.integers(1, 8), packing=st.sampled_from(PACKINGS),
       codes=st.data())
def test_pack_matches_integer_oracle(bits, packing, codes):
    row = codes.draw(st.lists(st.integers(0, (1 << bits) - 1), min_size=1, max_size=80))
    packed = pack_int32(torch.tensor(row), bits, packing=packing)
    assert packed.tolist() == oracle_words(row, bits, packing)


@settings(max_examples=100, deadline=None)
@given(bits=st.integers(1, 8), packing=st.sampled_from(PACKINGS), data=st.data())
def test_unpack_matches_integer_oracle(bits, packing, data):
    # Any word pattern unpacks to the fields the oracle wrote them from (bits past the last
    # code, or past floor(32/b)*b in a padded word, are not read).
    row = data.draw(st.lists(st.integers(0, (1 << bits) - 1), min_size=1, max_size=80))
    words = torch.tensor(oracle_words(row, bits, packing), dtype=torch.int32)
    assert unpack_int32(words, bits, len(row), packing=packing).tolist() == row


@settings(max_examples=60, deadline=None)
@given(packed_cases(bit_choices=(1, 2, 4, 8)))
def test_dense_and_padded_agree_when_b_divides_32(case):
    codes, bits, dim, _ = case
    dense = pack_int32(codes, bits, dim=dim, packing="dense")
    padded = pack_int32(codes, bits, dim=dim, packing="padded")
    assert torch.equal(dense, padded)


@settings(max_examples=60, deadline=None)
@given(bits=st.sampled_from((3, 5, 6, 7)), count=st.integers(1, 400))
def test_dense_and_padded_word_counts_when_b_does_not_divide_32(bits, count):
    codes = torch.zeros(count, dtype=torch.int64)
    dense = pack_int32(codes, bits, packing="dense").shape[0]
    padded = pack_int32(codes, bits, packing="padded").shape[0]
    assert dense == -(-count * bits // 32)
    assert padded == -(-count // (32 // bits))
    assert dense <= padded
    # Once the count spans a whole padded word's waste (32 - (32//b)*b bits per word), padded
    # needs strictly more words; 32 words' worth of codes always does.
    if count >= 32 * (32 // bits):
        assert dense < padded


@settings(max_examples=60, deadline=None)
@given(groups=st.integers(1, 6), lead=st.integers(1, 3), dim=st.sampled_from((0, 1, -1)),
       seed=st.integers(0, 2**31 - 1))
def test_awq_interleave_round_trips(groups, lead, dim, seed):
    gen = torch.Generator().manual_seed(seed)
    shape = [lead, lead + 1]
    shape[dim] = 8 * groups
    x = torch.randint(-1000, 1000, shape, generator=gen)
    assert torch.equal(awq_undo_interleave(awq_interleave(x, dim), dim), x)
    assert torch.equal(awq_interleave(awq_undo_interleave(x, dim), dim), x)
    # slot i of group c holds column 8c + order[i]
    order = (0, 2, 4, 6, 1, 3, 5, 7)
    moved = awq_interleave(x, dim).movedim(dim, -1)
    src = x.movedim(dim, -1)
    for c in range(groups):
        for i, j in enumerate(order):
            assert torch.equal(moved[..., 8 * c + i], src[..., 8 * c + j])
