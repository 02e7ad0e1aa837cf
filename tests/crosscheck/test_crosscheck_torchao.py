"""The reference against torchao (pinned 0.18.0, installed --no-deps).

* MX (to_mx / to_dtype) with float8_e4m3fn elements, scale modes FLOOR, EVEN, CEIL and RCEIL,
  vs mx_scale_exponent + round_to_e4m3 (through quantize_mxfp8 and a Checkpoint("mxfp8")):
  scale bytes and element bytes bit-exact on random blocks and on blocks whose amax sits at
  the rounding boundaries of each rule.
* E8M0 decode (get_fp_scale, float8_e8m0fnu) vs decode_e8m0 for all 256 bytes.
* torch's float32 -> float8_e4m3fn cast vs round_to_e4m3 on every tie and its neighbours.
* choose_qparams_affine / quantize_affine, int4 symmetric (amax/7.5), vs quantize_int_groups.
* FP4: f32_to_f4_unpacked / f4_unpacked_to_f32 vs round_to_e2m1 + encode_e2m1 / decode_e2m1
  on every tie and its neighbours, pack_uint4 / unpack_uint4 vs pack_nibbles (element 2j in
  the low nibble), to_mx with float4_e2m1fn_x2 and each scale mode vs quantize_mx(e2m1) and a
  Checkpoint("mxfp4"): bytes bit-exact.

Where torchao 0.18.0 follows another rule the test asserts that rule and counts it:
* RCEIL in eager mode takes ceil(log2(amax/448)) in float32, which rounds log2 of a quotient
  just above a power of two down to the integer (and amax/448 loses bits when subnormal), so
  it picks a scale one binade too small for such blocks; we take the exact ceiling (checked
  here against Python's exact arithmetic), as the cuBLAS rule and the PTX cvt.rp path do.
* Blocks whose scale byte is 0 (2^-127): torchao divides by 2^-126 (FLOOR/EVEN/CEIL clamp
  the float32 scale to the smallest normal) or by 1 (RCEIL), not by 2^-127.
* Inf blocks: 0.18.0 gives a finite byte (research notes 1.4); NaN blocks give 0xFF.
* quantize_affine multiplies by 1/s where we divide by s: codes may differ by 1 near ties.
"""

from __future__ import annotations

import math

import pytest
import torch

torchao = pytest.importorskip("torchao")

from _common import (  # noqa: E402
    as_bytes,
    boundary_blocks,
    exact_exponent,
    probe_values,
    random_blocks,
)
from _torchao import MODES, to_mx_round_trip  # noqa: E402
from moecert.reference.elements import (  # noqa: E402
    decode_e2m1,
    decode_e4m3,
    decode_e8m0,
    encode_e2m1,
    encode_e4m3,
    mx_scale_exponent,
    round_to_e2m1,
    round_to_e4m3,
)
from moecert.reference.packing import pack_nibbles, unpack_nibbles  # noqa: E402
from moecert.reference.quantize import (  # noqa: E402
    quantize_int_groups,
    quantize_mx,
    quantize_mxfp8,
)
from torchao.prototype.mx_formats.kernels import (  # noqa: E402
    f4_unpacked_to_f32,
    f32_to_f4_unpacked,
    pack_uint4,
    unpack_uint4,
)
from torchao.prototype.mx_formats.mx_tensor import get_fp_scale, to_mx  # noqa: E402
from torchao.quantization.quant_primitives import (  # noqa: E402
    MappingType,
    choose_qparams_affine,
    quantize_affine,
)

pytestmark = pytest.mark.crosscheck

E4M3 = torch.float8_e4m3fn
FP4X2 = torch.float4_e2m1fn_x2


def test_version_pinned():
    assert torchao.__version__.startswith("0.18.0"), torchao.__version__


def _mx_ours(x: torch.Tensor, rule: str):
    """(scale bytes, element bytes) of our reference for blocks of 32 along the last dim."""
    blocks = x.double().unflatten(-1, (-1, 32))
    exp = mx_scale_exponent(blocks.abs().amax(-1), rule)
    elems = round_to_e4m3(blocks / torch.exp2(exp).unsqueeze(-1)).flatten(-2)
    return (exp + 127).to(torch.uint8), as_bytes(encode_e4m3(elems))


# --- E8M0 and E4M3 element encodings ------------------------------------------------------

def test_e8m0_decode_all_bytes():
    b = torch.arange(256, dtype=torch.uint8)
    ours = decode_e8m0(b)
    theirs = get_fp_scale(b)  # float32, 2^(b-127), byte 0 is the float32 subnormal 2^-127
    cast = b.view(torch.float8_e8m0fnu).to(torch.float32)
    for t in (theirs, cast):
        assert torch.equal(torch.isnan(t), torch.isnan(ours))
        assert torch.isnan(ours[255]) and torch.isnan(ours).sum() == 1
        assert torch.equal(t.double()[:255], ours[:255])


def _e4m3_probe_values() -> torch.Tensor:
    """float32 inputs: every finite E4M3 value, every midpoint between neighbours (exact ties),
    the float32 neighbours of each midpoint, the overflow range, Inf, and random values."""
    grid = decode_e4m3(torch.arange(256, dtype=torch.uint8))
    pos = torch.unique(grid[torch.isfinite(grid) & (grid >= 0)])  # 0 .. 448, sorted
    gen = torch.Generator().manual_seed(0)
    rand = torch.randn(20000, generator=gen) * torch.exp2(
        torch.randint(-14, 10, (20000,), generator=gen).float())
    return probe_values(pos, [448.0, 456.0, 464.0, 472.0, 480.0, 500.0, 1e4, 3e38, math.inf,
                              2.0**-10, 2.0**-11, 3 * 2.0**-11, 2.0**-149, 0.0], rand.abs())


def test_e4m3_cast():
    x = _e4m3_probe_values()
    theirs = as_bytes(x.to(E4M3))
    ours = as_bytes(encode_e4m3(round_to_e4m3(x.double())))
    assert torch.equal(theirs, ours)
    # NaN stays NaN (0x7F / 0xFF)
    nan = torch.tensor([math.nan], dtype=torch.float32)
    assert torch.isnan(decode_e4m3(as_bytes(nan.to(E4M3)))).all()
    assert torch.isnan(round_to_e4m3(nan.double())).all()


# --- to_mx: random blocks -----------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16],
                         ids=lambda d: str(d).removeprefix("torch."))
@pytest.mark.parametrize("rule", list(MODES))
def test_to_mx_random(rule, dtype, xc_counts):
    def stored(data, ours):
        assert torch.equal(decode_e4m3(as_bytes(data)), ours.codes)
        assert torch.equal(as_bytes(data), as_bytes(encode_e4m3(ours.codes)))
        return data

    to_mx_round_trip(list(MODES).index(rule), rule, dtype, E4M3, "mxfp8",
                     lambda w: quantize_mxfp8(w, rule), stored, xc_counts)


# --- to_mx: boundary blocks -----------------------------------------------------------------

_U = 2.0**-23  # float32 ulp at 1


def _boundary_blocks(exponents):
    """One block per (binade k, mantissa m, sign): amax = m * 2^k at each rule's boundary,
    the other 31 elements uniform in (-amax, amax)."""
    mants = [1.0, 1 + _U, 1.5, 1.75 - _U, 1.75, 1.75 + _U, 1.75 + 2 * _U, 1.875,
             1.9375 - _U, 1.9375, 1.9375 + _U, 2 - _U]
    x = boundary_blocks(exponents, mants, seed=11)
    assert (x.abs().amax(-1).double() == x.double().abs().amax(-1)).all()
    return x


def _scales_three_ways(x, rule):
    """torchao's elements and scale bytes, ours, and the exact-arithmetic scale bytes."""
    scale, data = to_mx(x, E4M3, 32, MODES[rule])
    ours_s, ours_e = _mx_ours(x, rule)
    exact = torch.tensor([exact_exponent(a, rule, "e4m3") + 127
                          for a in x.abs().amax(-1).tolist()], dtype=torch.uint8)
    return data, as_bytes(scale).view(-1), ours_s.view(-1), ours_e, exact


@pytest.mark.parametrize("rule", list(MODES))
def test_to_mx_boundaries(rule, xc_counts):
    # normal binades only: scale byte >= 1 for every rule (byte 0 is the next test)
    x = _boundary_blocks(list(range(-100, -80)) + list(range(-12, 13)) + list(range(100, 128)))
    data, theirs, ours_s, ours_e, exact = _scales_three_ways(x, rule)
    assert torch.equal(ours_s, exact), "our rule disagrees with exact arithmetic"
    assert (ours_s >= 1).all()
    differ = theirs != ours_s
    if rule == "rceil":
        # torchao eager: ceil(log2(amax/448)) in float32 rounds the log of a quotient just
        # above a power of two to the integer below: one binade too small.
        assert differ.any()
        assert (theirs[differ].long() == ours_s[differ].long() - 1).all()
        q = (x.abs().amax(-1).double() / 448)[differ]
        above = q / torch.exp2(torch.floor(torch.log2(q))) - 1  # relative excess over 2^n
        assert (above > 0).all() and (above < 2.0**-20).all()
        # with the smaller scale the block's amax saturates at 448 in their elements
        dv = decode_e4m3(as_bytes(data))[differ]
        assert (dv.abs().amax(-1) == 448).all()
    else:
        assert not differ.any()
    same = ~differ
    assert torch.equal(as_bytes(data)[same], ours_e[same])
    xc_counts(blocks=len(theirs), scale_byte_minus_1=int(differ.sum()))


@pytest.mark.parametrize("rule", list(MODES))
def test_to_mx_subnormal_scale_range(rule, xc_counts):
    """Blocks with tiny amax. Scale bytes agree where torchao's float32 arithmetic is exact;
    blocks with byte 0 (2^-127) are scaled by 2^-126 (FLOOR/EVEN/CEIL: float32 scale clamped
    to the smallest normal) or 1 (RCEIL) in torchao 0.18.0, by 2^-127 in ours."""
    x = _boundary_blocks(range(-149, -100))
    x = x[x.abs().amax(-1) > 0]
    data, theirs, ours_s, ours_e, exact = _scales_three_ways(x, rule)
    assert torch.equal(ours_s, exact)
    differ = theirs != ours_s
    if rule == "rceil":  # float32 amax/448 is subnormal here and loses the excess bits
        assert (theirs[differ].long() == ours_s[differ].long() - 1).all()
    else:
        assert not differ.any()
    zero = (ours_s == 0) & ~differ
    assert zero.any()
    divisor = 1.0 if rule == "rceil" else 2.0**-126
    predicted = as_bytes(encode_e4m3(round_to_e4m3(x[zero].double() / divisor)))
    assert torch.equal(as_bytes(data)[zero], predicted)
    assert not torch.equal(as_bytes(data)[zero], ours_e[zero])
    normal = ~zero & ~differ
    assert torch.equal(as_bytes(data)[normal], ours_e[normal])
    xc_counts(blocks=len(theirs), byte0_blocks=int(zero.sum()),
              byte0_element_diffs=int((as_bytes(data)[zero] != ours_e[zero]).sum()),
              scale_byte_minus_1=int(differ.sum()))


@pytest.mark.parametrize("rule", list(MODES))
def test_to_mx_nonfinite_blocks(rule, xc_counts):
    """NaN block: 0xFF. Inf block: torchao 0.18.0 gives a finite byte (the unbiased exponent
    of Inf reads as 128: FLOOR/EVEN/CEIL 128 - 8 + 127 = 247, RCEIL 254), research notes 1.4.
    Ours follows OCP MX §5.4 (and torchao HEAD): every non-finite block gets the NaN scale."""
    x = torch.randn(3, 32, generator=torch.Generator().manual_seed(0))
    x[0, 3] = math.nan
    x[1, 5] = math.inf
    x[2, 7] = -math.inf
    theirs = as_bytes(to_mx(x, E4M3, 32, MODES[rule])[0]).view(-1).tolist()
    inf_byte = 254 if rule == "rceil" else 247
    assert theirs == [255, inf_byte, inf_byte]
    assert torch.isnan(decode_e8m0(torch.tensor([255], dtype=torch.uint8))).all()
    ours = mx_scale_exponent(x.double().abs().amax(-1), rule)
    assert torch.isnan(ours).all()
    xc_counts(torchao_bytes=theirs, our_exponents=ours.tolist())


# --- int4 symmetric affine quantization ---------------------------------------------------

def _affine_int4(w: torch.Tensor, group: int):
    block = (1, group)
    s, zp = choose_qparams_affine(w, MappingType.SYMMETRIC, block, torch.int8, quant_min=-8,
                                  quant_max=7, scale_dtype=w.dtype)
    q = quantize_affine(w, block, s, zp, torch.int8, quant_min=-8, quant_max=7)
    return s, zp, q


def _check_affine(w, group, xc_counts):
    """Same scales (amax/7.5); codes equal except +-1 where x/s is within torchao's own
    rounding error (x * fl(1/s)) of a half-integer. Returns the number of such codes."""
    n_out = w.shape[0]
    s, zp, q = _affine_int4(w, group)
    assert (zp == 0).all()
    ours = quantize_int_groups(w.double().unsqueeze(0), 4, group, True, "ct", w.dtype)
    assert torch.equal(ours.scales[0].to(w.dtype).reshape(s.shape), s), "amax/7.5 scales differ"
    s = s.reshape(n_out, -1)
    codes = ours.codes[0]
    diff = codes != q.to(torch.int32)
    s_full = s.repeat_interleave(group, -1)
    exact = w.double() / s_full.double()  # what we round (x / s)
    theirs_pre = (w * (1.0 / s_full)).double()  # what torchao rounds (x * fl(1/s))
    half = torch.floor(exact) + 0.5
    near_tie = (exact - half).abs() <= (exact - theirs_pre).abs()
    assert ((codes - q.to(torch.int32)).abs()[diff] == 1).all()
    assert not (diff & ~near_tie).any(), "code differences away from a rounding tie"
    at_exact_tie = diff & ((theirs_pre - torch.floor(theirs_pre)) == 0.5)
    xc_counts(codes=q.numel(), code_diff=int(diff.sum()),
              their_value_exact_tie=int(at_exact_tie.sum()),
              our_value_exact_tie=int((diff & ((exact - torch.floor(exact)) == 0.5)).sum()))
    return int(diff.sum())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16],
                         ids=lambda d: str(d).removeprefix("torch."))
@pytest.mark.parametrize("group", [32, 128])
def test_affine_int4_sym_random(group, dtype, xc_counts):
    gen = torch.Generator().manual_seed(group)
    w = random_blocks(gen, (512, 1024), -6, 6).to(dtype)
    _check_affine(w, group, xc_counts)


def test_affine_int4_sym_near_ties(xc_counts):
    """Values placed on (j + 1/2) * s, rounded to float32: x/s and x * (1/s) fall on both
    sides of the tie, so torchao's reciprocal visibly differs from our division."""
    gen = torch.Generator().manual_seed(5)
    rows, group = 256, 32
    amax = torch.rand(rows, 1, generator=gen, dtype=torch.float64) * 3 + 0.1
    s = (amax / 7.5).float().double()
    j = torch.randint(-8, 7, (rows, group), generator=gen).double()
    w = ((j + 0.5) * s).float()
    w[:, 0] = amax.squeeze(1).float()  # pin the group's amax (and so its scale)
    assert _check_affine(w, group, xc_counts) > 0


# --- FP4 E2M1 elements and MXFP4 (torchao's float4_e2m1fn_x2) --------------------------------

def _e2m1_probe_values() -> torch.Tensor:
    """float32: every E2M1 value, every midpoint (exact ties), their float32 neighbours, the
    overflow range, Inf, and random values over the element's binades."""
    pos = torch.unique(decode_e2m1(torch.arange(8)))  # 0 .. 6
    rand = torch.rand(20000, generator=torch.Generator().manual_seed(1)) * 8
    return probe_values(pos, [6.5, 7.0, 1e4, 3e38, math.inf, 0.1, 2.0**-149, 0.0], rand)


def test_e2m1_codec_and_nibbles(xc_counts):
    codes = torch.arange(16, dtype=torch.uint8)
    assert torch.equal(f4_unpacked_to_f32(codes).double(), decode_e2m1(codes))
    x = _e2m1_probe_values()
    theirs = f32_to_f4_unpacked(x)  # RNE, saturating, sign kept on zero
    ours = encode_e2m1(round_to_e2m1(x.double()))
    assert torch.equal(theirs, ours)
    pairs = torch.randint(0, 16, (64, 34), generator=torch.Generator().manual_seed(2),
                          dtype=torch.int32).to(torch.uint8)
    assert torch.equal(pack_uint4(pairs), pack_nibbles(pairs))  # element 2j low
    assert torch.equal(unpack_uint4(pack_uint4(pairs)), unpack_nibbles(pack_nibbles(pairs))
                       .to(torch.uint8))
    xc_counts(values=x.numel(), code_diffs=int((theirs != ours).sum()))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16],
                         ids=lambda d: str(d).removeprefix("torch."))
@pytest.mark.parametrize("rule", list(MODES))
def test_to_mx_fp4_random(rule, dtype, xc_counts):
    """to_mx(float4_e2m1fn_x2) against quantize_mx(e2m1, rne) with each scale rule: scale
    bytes and packed bytes bit-exact, and their tensors through our mxfp4 checkpoint reader
    equal to their dequantization. (The gpt-oss producing tool's element rounding, half away
    from zero, is checked by hand in tests/reference: torchao rounds to even.)"""
    def stored(data, ours):
        assert torch.equal(as_bytes(data), pack_nibbles(encode_e2m1(ours.codes)))
        return as_bytes(data)

    to_mx_round_trip(10 + list(MODES).index(rule), rule, dtype, FP4X2, "mxfp4",
                     lambda w: quantize_mx(w, rule, "e2m1", "rne"), stored, xc_counts)
