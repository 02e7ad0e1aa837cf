"""MXFP6's six-bit planes (layout.plane_fp6) and their PTX decode (gemm_kernel's
`_fp6_planes_asm`), on the CPU: the layout against its inverse and the element records, the
PTX run by an emulator of its instructions (tests/kernels/_ptx.py) against each code's value
times its scale, for every code in every plane and lane at the edges of the E8M0 range. The
compiled decode runs on a GPU in test_fp6_planes_cuda.py; the interpreter's integer decode in
the kernel runs in test_triton_backend.py's MXFP6 cases."""

from __future__ import annotations

import math
import random

import pytest
import torch
from moecert.kernels.triton_moe import gemm_kernel, layout
from moecert.reference.schemes import ELEMENTS

from . import _ptx

FP6 = ("e2m3", "e3m2")


@pytest.mark.parametrize("element", FP6)
def test_planes_round_trip_and_hold_six_bits_a_weight(element):
    exp_bits = ELEMENTS[element].exp_bits
    codes = torch.randint(0, 64, (2, 3, 2 * layout.FP6_SPAN), dtype=torch.uint8,
                          generator=torch.Generator().manual_seed(exp_bits))
    q = layout.plane_fp6(codes, exp_bits)
    assert q.shape == (2, 3, 2 * layout.FP6_SPAN * 3 // 4)
    assert torch.equal(layout.unplane_fp6(q, exp_bits), codes)


@pytest.mark.parametrize("element", FP6)
def test_word_nibbles_and_high_bits_sit_where_the_decode_reads_them(element):
    """Column j + 32p's low magnitude bits in nibble p of word j, its top bit and sign at
    fp6_top_sign's bits of the span's byte 2j (j < 16) or 2 (j - 16) + 1: the low and high
    byte of high word j % 16 (one column set at a time, the rest zero)."""
    exp_bits = ELEMENTS[element].exp_bits
    for p, (top, sign) in enumerate(layout.fp6_top_sign(exp_bits)):
        for j in (0, 5, 31):
            codes = torch.zeros(1, layout.FP6_SPAN, dtype=torch.uint8)
            codes[0, j + 32 * p] = 0b111010  # sign 1, top 1, low bits 1010
            q = layout.plane_fp6(codes, exp_bits)[0].to(torch.int32)
            word = int(q[2 * j]) | (int(q[2 * j + 1]) << 8)
            assert word == 0b1010 << (4 * p)
            at = 64 + 2 * (j % 16) + j // 16
            assert int(q[at]) == (1 << top) | (1 << sign)
            assert int(q.sum()) == (word & 0xFF) + (word >> 8) + int(q[at])


@pytest.mark.parametrize("element", FP6)
def test_top_and_sign_bits_are_one_shift_apart_and_fill_the_byte(element):
    exp_bits = ELEMENTS[element].exp_bits
    bits = layout.fp6_top_sign(exp_bits)
    assert all(top - sign == exp_bits - 1 for top, sign in bits)
    assert sorted(b for pair in bits for b in pair) == list(range(8))


@pytest.mark.parametrize("element", FP6)
def test_codes_widen_to_the_elements_values_and_back(element):
    """`fp6_e4m3_bytes` (codecs.widen_to_e4m3 of each code) holds every code's value, -0
    included, and `fp6_codes` inverts it; a byte that is no code's is refused."""
    values = layout.fp6_e4m3_bytes(element).view(torch.float8_e4m3fn).double()
    want = torch.tensor(ELEMENTS[element].values, dtype=torch.float64)
    assert torch.equal(values, want) and torch.equal(values.signbit(), want.signbit())
    codes = torch.arange(64, dtype=torch.uint8).repeat(3)
    assert torch.equal(layout.fp6_codes(layout.fp6_widened(codes, element), element), codes)
    outside = torch.tensor([0x7E], dtype=torch.uint8).view(torch.float8_e4m3fn)  # 448
    with pytest.raises(ValueError, match=f"no {element} code"):
        layout.fp6_codes(outside, element)


def test_scale_ranges_follow_the_elements():
    """The E8M0 bytes of an exact scaled decode: e4m3's 10..134 (round fourteen's), and per
    fp6 element the smallest subnormal times 2^(E - 127) a normal bf16, 2^(E - bias) too."""
    assert (gemm_kernel.E8M0_WORDS_MIN, gemm_kernel.E8M0_WORDS_MAX) == (10, 134)
    assert gemm_kernel.e8m0_words_range("e2m3") == (4, 128)
    assert gemm_kernel.e8m0_words_range("e3m2") == (5, 130)
    for element in FP6:
        lo, hi = gemm_kernel.e8m0_words_range(element)
        smallest = min(abs(v) for v in ELEMENTS[element].values if v)
        assert math.ldexp(smallest, lo - 127) == 2.0**-126
        assert hi - ELEMENTS[element].exp_bias == 127


def _decode(asm: str, words: list[tuple[int, int]], high: list[tuple[int, int]],
            scales: list[tuple[int, int]], bias: int) -> list[list[tuple[float, float]]]:
    """The asm on two elements of each half: words[half] (16 bits each), high[half] their
    bytes of top bits and signs, and per plane the two elements' E8M0 bytes (a plane's two
    halves share its scale) -> [half][plane] the two decoded values."""
    muls = [_ptx.bf16_pair(2.0 ** (s0 - bias), 2.0 ** (s1 - bias)) for s0, s1 in scales]
    regs = [w0 | (w1 << 16) for w0, w1 in words]
    packed_high = sum((high[0][e] | (high[1][e] << 8)) << (16 * e) for e in (0, 1))
    out = _ptx.run(asm, [*regs, packed_high, *muls], 8)
    return [[_ptx.lanes(r) for r in out[4 * half:4 * half + 4]] for half in (0, 1)]


def _pack(codes: list[int], exp_bits: int) -> tuple[int, int]:
    """One word's four plane codes -> (the word, its byte of top bits and signs)."""
    word = sum((c & 0xF) << (4 * p) for p, c in enumerate(codes))
    high = sum((((c >> 4) & 1) << top) | ((c >> 5) << sign)
               for c, (top, sign) in zip(codes, layout.fp6_top_sign(exp_bits), strict=True))
    return word, high


def _check_asm(asm: str, element: str) -> None:
    """Every code in every plane, half and lane, with scale bytes at the range's edges."""
    el = ELEMENTS[element]
    lo, hi = gemm_kernel.e8m0_words_range(element)
    rng = random.Random(el.exp_bits)
    for p in range(4):
        for code in range(64):
            for s in (lo, lo + 1, 127, hi - 1, hi):
                # codes[half][lane][plane]
                codes = [[[rng.randrange(64) for _ in range(4)] for _ in range(2)]
                         for _ in range(2)]
                codes[0][0][p], codes[0][1][p] = code, 63 - code
                codes[1][0][p], codes[1][1][p] = (code + 21) % 64, (code * 5) % 64
                scales = [(rng.randint(lo, hi), rng.randint(lo, hi)) for _ in range(4)]
                scales[p] = (s, lo + hi - s)
                packs = [[_pack(c, el.exp_bits) for c in half] for half in codes]
                words = [(half[0][0], half[1][0]) for half in packs]
                high = [(half[0][1], half[1][1]) for half in packs]
                got = _decode(asm, words, high, scales, el.exp_bias)
                for half in (0, 1):
                    for q in range(4):
                        for lane in (0, 1):
                            want = math.ldexp(el.values[codes[half][lane][q]],
                                              scales[q][lane] - 127)
                            value = got[half][q][lane]
                            assert value == want and math.copysign(1, value) == math.copysign(
                                1, want), (element, half, q, lane, codes[half][lane][q])


@pytest.mark.parametrize("element", FP6)
def test_the_ptx_decodes_every_code_of_every_plane_times_its_scale(element):
    exp_bits = ELEMENTS[element].exp_bits
    _check_asm(gemm_kernel._fp6_planes_asm(exp_bits), element)


@pytest.mark.parametrize("mutation", [("0x3311", "0x3300"), ("shl.b32 u, t, 5", "shl.b32 u, t, 6"),
                                      ("0x81008100", "0x81008180"), ("0xEA", "0xE8")],
                         ids=["permute", "shift", "mask", "lut"])
def test_a_planted_decode_bug_fails_the_emulated_check(mutation):
    asm = gemm_kernel._fp6_planes_asm(2)
    assert mutation[0] in asm
    with pytest.raises((AssertionError, ArithmeticError)):
        _check_asm(asm.replace(mutation[0], mutation[1], 1), "e2m3")


def test_the_e4m3_scaled_ptx_decodes_every_byte_times_its_scale():
    """Round fourteen's `_e4m3_scaled_asm` under the same emulator: every finite e4m3 byte in
    both bytes of both words, at the edges of E8M0_WORDS_MIN..MAX."""
    asm = gemm_kernel._e4m3_scaled_asm()
    values = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(
        torch.float8_e4m3fn).double().tolist()
    finite = [b for b in range(256) if b & 0x7F != 0x7F]
    for s in (gemm_kernel.E8M0_WORDS_MIN, 127, gemm_kernel.E8M0_WORDS_MAX):
        mul = _ptx.bf16_pair(2.0 ** (s - 7), 2.0 ** (s - 7))
        for i, b in enumerate(finite):
            c = finite[(i * 7 + 3) % len(finite)]
            word0, word1 = b | (c << 8), c | (b << 8)
            lo, hi = _ptx.run(asm, [word0 | (word1 << 16), mul], 2)
            got = [*_ptx.lanes(lo), *_ptx.lanes(hi)]
            want = [values[b], values[c], values[c], values[b]]
            for g, v in zip(got, want, strict=True):
                w = math.ldexp(v, s - 127)
                assert g == w and math.copysign(1, g) == math.copysign(1, w), (b, c, s)
