"""MXFP6 (OCP MX v1.0 FP6 E2M3 and E3M2) in the reference against torchao's MX code (pinned
0.18.0, installed --no-deps), which covers both FP6 elements on the CPU, unpacked (one code
per uint8: bit 5 sign, then exponent and mantissa).

* Element codec: `f6_e2m3_unpacked_to_f32` / `f6_e3m2_unpacked_to_f32` vs the reference's
  decode of every one of the 64 codes; `f32_to_f6_*_unpacked` (RNE, saturating) vs
  round_to + encode on every value, every tie between neighbours, their float32 neighbours,
  the overflow range and random values.
* to_mx(DTYPE_FP6_*) with each scale mode (FLOOR, EVEN, CEIL, RCEIL) vs quantize_mx(w,
  rule, element): scale bytes and element codes bit-exact on random blocks and on blocks whose
  amax sits at each rule's boundary for the element's mantissa width; their codes, packed as
  Quark writes them (four codes in three bytes, by this file's own packer), through an mxfp6
  checkpoint of the reference equal to their `to_dtype`.

Where torchao 0.18.0 follows another rule the test asserts that rule and counts it (as
test_crosscheck_torchao.py does for E4M3): RCEIL in eager mode takes ceil(log2(amax / max))
in float32, a binade too small for quotients just above a power of two; we take the exact
ceiling, checked here in Python's exact arithmetic.
"""

from __future__ import annotations

import math

import pytest
import torch

torchao = pytest.importorskip("torchao")

from _common import as_bytes, boundary_blocks, exact_exponent, probe_values  # noqa: E402
from _torchao import MODES, to_mx_round_trip  # noqa: E402
from moecert.reference.elements import decode, encode, mx_scale_exponent, round_to  # noqa: E402
from moecert.reference.quantize import quantize_mx  # noqa: E402
from moecert.reference.schemes.elements import get_element  # noqa: E402
from torchao.prototype.mx_formats import constants as C  # noqa: E402
from torchao.prototype.mx_formats.kernels import (  # noqa: E402
    f6_e2m3_unpacked_to_f32,
    f6_e3m2_unpacked_to_f32,
    f32_to_f6_e2m3_unpacked,
    f32_to_f6_e3m2_unpacked,
)
from torchao.prototype.mx_formats.mx_tensor import to_mx  # noqa: E402

pytestmark = pytest.mark.crosscheck

# element name -> (moecert scheme, torchao dtype, their decode, their encode)
FP6 = {"e2m3": ("mxfp6-e2m3", C.DTYPE_FP6_E2M3, f6_e2m3_unpacked_to_f32,
                f32_to_f6_e2m3_unpacked),
       "e3m2": ("mxfp6-e3m2", C.DTYPE_FP6_E3M2, f6_e3m2_unpacked_to_f32,
                f32_to_f6_e3m2_unpacked)}


def test_version_pinned():
    assert torchao.__version__.startswith("0.18.0"), torchao.__version__


def _quark_pack(codes: torch.Tensor) -> torch.Tensor:
    """Quark's fp6 storage, written here from its definition: codes v0..v3 of elements
    4j..4j+3 as the little-endian bytes of the 24-bit word v0 | v1<<6 | v2<<12 | v3<<18."""
    c = codes.to(torch.int64).unflatten(-1, (-1, 4))
    word = c[..., 0] | (c[..., 1] << 6) | (c[..., 2] << 12) | (c[..., 3] << 18)
    return torch.stack([(word >> s) & 0xFF for s in (0, 8, 16)], -1).flatten(-2).to(torch.uint8)


# --- the element codec ----------------------------------------------------------------------

@pytest.mark.parametrize("name", list(FP6))
def test_fp6_decode_every_code(name):
    codes = torch.arange(64, dtype=torch.uint8)
    theirs = FP6[name][2](codes).double()
    ours = decode(codes, name)
    assert torch.equal(ours, theirs)
    assert torch.equal(torch.signbit(ours), torch.signbit(theirs))  # -0.0 at code 32
    assert torch.isfinite(ours).all()  # no Inf or NaN code (OCP MX v1.0 §5.3.2)
    assert ours.abs().max() == get_element(name).max


def _probe_values(name: str) -> torch.Tensor:
    """float32: every value of the element, every midpoint (exact ties), their float32
    neighbours, the overflow range, Inf, tiny values, random values over its binades."""
    el = get_element(name)
    pos = torch.unique(decode(torch.arange(32), name))
    rand = torch.rand(20000, generator=torch.Generator().manual_seed(6)) * el.max * 1.2
    return probe_values(pos, [el.max * 1.03, el.max * 1.07, el.max * 2, 1e4, 3e38, math.inf,
                              2.0**-149, 0.0], rand)


@pytest.mark.parametrize("name", list(FP6))
def test_fp6_rounding(name, xc_counts):
    x = _probe_values(name)
    theirs = FP6[name][3](x)  # RNE, saturating at the element's max, sign kept on zero
    ours = encode(round_to(x.double(), name), name).to(torch.uint8)
    assert torch.equal(theirs, ours)
    xc_counts(values=x.numel(), code_diffs=int((theirs != ours).sum()))


# --- to_mx --------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16],
                         ids=lambda d: str(d).removeprefix("torch."))
@pytest.mark.parametrize("rule", list(MODES))
@pytest.mark.parametrize("name", list(FP6))
def test_to_mx_fp6_random(name, rule, dtype, xc_counts):
    """Scale bytes and codes bit-exact; their codes, packed as Quark packs them, through the
    reference's mxfp6 checkpoint reader equal to their dequantization."""
    scheme, tdtype, _, _ = FP6[name]

    def stored(data, ours):
        assert torch.equal(data, encode(ours.codes, name).to(torch.uint8))
        return _quark_pack(data)

    to_mx_round_trip(20 + list(MODES).index(rule), rule, dtype, tdtype, scheme,
                     lambda w: quantize_mx(w, rule, name), stored, xc_counts)


_U = 2.0**-23  # float32 ulp at 1


def _boundary_blocks(exponents):
    """One block per (binade k, mantissa m, sign): amax = m * 2^k at the rules' boundaries
    for 2 and 3 mantissa bits (1.75, 1.875, 1.9375 and their float32 neighbours), the other
    31 elements uniform in (-amax, amax)."""
    mants = [1.0, 1 + _U, 1.5, 1.75 - _U, 1.75, 1.75 + _U, 1.875 - _U, 1.875, 1.875 + _U,
             1.9375 - _U, 1.9375, 1.9375 + _U, 2 - _U]
    return boundary_blocks(exponents, mants, seed=12)


@pytest.mark.parametrize("rule", list(MODES))
@pytest.mark.parametrize("name", list(FP6))
def test_to_mx_fp6_boundaries(name, rule, xc_counts):
    # normal binades with scale byte >= 1 for every rule
    x = _boundary_blocks(list(range(-100, -80)) + list(range(-12, 13)) + list(range(100, 124)))
    tdtype = FP6[name][1]
    scale, data = to_mx(x, tdtype, 32, MODES[rule])
    theirs = as_bytes(scale).view(-1)
    exp = mx_scale_exponent(x.double().abs().amax(-1), rule, name)
    ours = (exp + 127).to(torch.uint8)
    exact = torch.tensor([exact_exponent(a, rule, name) + 127
                          for a in x.abs().amax(-1).tolist()], dtype=torch.uint8)
    assert torch.equal(ours, exact), "our rule disagrees with exact arithmetic"
    differ = theirs != ours
    if rule == "rceil":
        # torchao eager: ceil(log2(amax / max)) in float32 rounds the log of a quotient just
        # above a power of two down to the integer: one binade too small.
        assert (theirs[differ].long() == ours[differ].long() - 1).all()
    else:
        assert not differ.any()
    codes = encode(round_to(x.double() / torch.exp2(exp).unsqueeze(-1), name), name)
    same = ~differ
    assert torch.equal(data[same], codes.to(torch.uint8)[same])
    xc_counts(blocks=len(theirs), scale_byte_minus_1=int(differ.sum()))
