"""Element and scale encodings: FP8 E4M3, FP4 E2M1, E8M0, and the MX shared-scale rules.

Decoders are written from the formats' definitions (OCP 8-bit floating point and OCP MX
v1.0), not through torch casts, so that the reference does not share a conversion with the
kernels it judges.
"""

from __future__ import annotations

import math

import torch

from .schemes import E8M0_BIAS, E8M0_NAN, F4E2M1_EXP_BIAS, F4E2M1_MAX, F8E4M3_EXP_BIAS, F8E4M3_MAX

F8E4M3_MANTISSA_BITS = 3
F8E4M3_MIN_NORMAL_EXP = 1 - F8E4M3_EXP_BIAS  # -6
F8E4M3_EMAX = 8  # exponent of the largest normal, 448 = 1.75 * 2^8
F4E2M1_MANTISSA_BITS = 1
F4E2M1_MIN_NORMAL_EXP = 1 - F4E2M1_EXP_BIAS  # 0
F4E2M1_EMAX = 2  # exponent of the largest normal, 6 = 1.5 * 2^2


def decode_e4m3(bits: torch.Tensor) -> torch.Tensor:
    """float64 values of E4M3FN bytes (uint8 or a float8_e4m3fn tensor viewed as bytes).

    value = (-1)^s * 2^(e-7) * (1 + m/8) for e > 0, (-1)^s * 2^-6 * (m/8) for e = 0;
    S.1111.111 is NaN; there is no infinity.
    """
    b = (bits.view(torch.uint8) if bits.dtype == torch.float8_e4m3fn else bits).to(torch.int64)
    sign = torch.where(b & 0x80 != 0, -1.0, 1.0).to(torch.float64)
    exp, man = (b >> 3) & 0xF, (b & 0x7).to(torch.float64)
    normal = (1.0 + man / 8) * pow2(exp - F8E4M3_EXP_BIAS)
    subnormal = (man / 8) * pow2(torch.full_like(exp, F8E4M3_MIN_NORMAL_EXP))
    value = sign * torch.where(exp > 0, normal, subnormal)
    return torch.where((b & 0x7F) == 0x7F, torch.nan, value)


_POW2_MIN, _POW2_MAX = -1074, 1023
# Every float64 power of two, from Python's exact math.ldexp; indexed, never computed by
# exp2/pow/ldexp on the device (CUDA implements those with an ulp of error or through pow).
_POW2_TABLE = torch.tensor([math.ldexp(1.0, k) for k in range(_POW2_MIN, _POW2_MAX + 1)],
                           dtype=torch.float64)
_POW2_ON: dict[torch.device, torch.Tensor] = {}


def pow2(exp: torch.Tensor) -> torch.Tensor:
    """2^exp (float64) for integer-valued exp, exactly on every device, by table look-up."""
    table = _POW2_ON.get(exp.device)
    if table is None:
        table = _POW2_ON[exp.device] = _POW2_TABLE.to(exp.device)
    return table[exp.to(torch.int64).clamp(_POW2_MIN, _POW2_MAX) - _POW2_MIN]


def floor_log2(x: torch.Tensor) -> torch.Tensor:
    """floor(log2 x) for x > 0, exactly: from the binary exponent (frexp), not a rounded log2,
    which can land on the next integer just below a power of two and differs across devices."""
    _, exp = torch.frexp(x.to(torch.float64))
    return (exp - 1).to(torch.float64)


def ceil_log2(x: torch.Tensor) -> torch.Tensor:
    """ceil(log2 x) for x > 0, exactly."""
    mantissa, exp = torch.frexp(x.to(torch.float64))
    return torch.where(mantissa == 0.5, exp - 1, exp).to(torch.float64)


ROUNDINGS = ("rne", "rna")  # ties to even; ties away from zero


def _round_minifloat(x: torch.Tensor, mantissa_bits: int, min_normal_exp: int,
                     max_value: float, rounding: str = "rne") -> torch.Tensor:
    """Round float64 values to the nearest value of a sign-magnitude minifloat with
    `mantissa_bits`, subnormals below 2^min_normal_exp and no infinity, saturating at
    ±max_value; ties to even ("rne") or away from zero ("rna"). The spacing around |x| is
    2^(max(floor(log2|x|), min_normal_exp) - mantissa_bits); on that grid "even" is an even
    multiple of the spacing, which is the element with mantissa LSB 0."""
    if rounding not in ROUNDINGS:
        raise ValueError(f"unknown rounding {rounding!r}; known: {', '.join(ROUNDINGS)}")
    x = x.to(torch.float64)
    mag = x.abs().clamp(max=max_value)
    exp = floor_log2(mag.clamp(min=2.0**-30)).clamp(min=min_normal_exp)
    ulp = pow2(exp - mantissa_bits)
    steps = torch.round(mag / ulp) if rounding == "rne" else torch.floor(mag / ulp + 0.5)
    rounded = (steps * ulp).clamp(max=max_value)
    return torch.where(torch.isnan(x), x, torch.copysign(rounded, x))


def round_to_e4m3(x: torch.Tensor) -> torch.Tensor:
    """Round float64 values to the nearest E4M3FN value, ties to even, saturating at ±448."""
    return _round_minifloat(x, F8E4M3_MANTISSA_BITS, F8E4M3_MIN_NORMAL_EXP, F8E4M3_MAX)


def round_to_e2m1(x: torch.Tensor, rounding: str = "rne") -> torch.Tensor:
    """Round float64 values to the nearest FP4 E2M1 value (±{0, 0.5, 1, 1.5, 2, 3, 4, 6}),
    ties to even (or away from zero: rounding "rna", as OpenAI's triton_kernels
    `downcast_to_mxfp` rounds), saturating at ±6 (OCP MX v1.0 §5.3.3: conversions to FP4
    saturate)."""
    return _round_minifloat(x, F4E2M1_MANTISSA_BITS, F4E2M1_MIN_NORMAL_EXP, F4E2M1_MAX,
                            rounding)


def decode_e2m1(codes: torch.Tensor) -> torch.Tensor:
    """float64 values of FP4 E2M1 codes (integers 0..15: bit 3 sign, bits 2-1 exponent, bit 0
    mantissa). value = (-1)^s * 2^(e-1) * (1 + m/2) for e > 0, (-1)^s * m/2 for e = 0;
    every code is finite (OCP MX v1.0 §5.3.3)."""
    c = codes.to(torch.int64)
    sign = torch.where(c & 0x8 != 0, -1.0, 1.0).to(torch.float64)
    exp, man = (c >> 1) & 0x3, (c & 0x1).to(torch.float64)
    normal = (1.0 + man / 2) * pow2(exp - F4E2M1_EXP_BIAS)
    subnormal = (man / 2) * pow2(torch.full_like(exp, F4E2M1_MIN_NORMAL_EXP))
    return sign * torch.where(exp > 0, normal, subnormal)


def encode_e2m1(values: torch.Tensor) -> torch.Tensor:
    """E2M1 codes (uint8, 0..15) of `values`, which must already be E2M1 values; -0 encodes
    as 0x8 and 0 as 0x0."""
    v = values.to(torch.float64)
    table = decode_e2m1(torch.arange(16, device=v.device))
    match = (v.unsqueeze(-1) == table) & (torch.signbit(v).unsqueeze(-1)
                                          == torch.signbit(table))
    if not bool(match.any(-1).all()):
        raise ValueError("encode_e2m1: values must be E2M1 values (round_to_e2m1 first)")
    return match.to(torch.uint8).argmax(-1).to(torch.uint8)


def encode_e4m3(values: torch.Tensor) -> torch.Tensor:
    """float8_e4m3fn tensor holding `values`, which must already be E4M3 values."""
    return values.to(torch.float32).to(torch.float8_e4m3fn)


def decode_e8m0(bits: torch.Tensor) -> torch.Tensor:
    """float64 2^(e - 127) of E8M0 bytes; 0xFF is NaN (OCP MX §5.4)."""
    e = bits.to(torch.int64)
    value = pow2(e - E8M0_BIAS)
    return torch.where(e == E8M0_NAN, torch.nan, value)


def mx_scale_exponent(amax: torch.Tensor, rule: str, elem_emax: int = F8E4M3_EMAX,
                      elem_max: float = F8E4M3_MAX,
                      elem_mantissa_bits: int = F8E4M3_MANTISSA_BITS) -> torch.Tensor:
    """Unbiased shared exponent of MX blocks with absolute maximum `amax` (float64, >= 0).

    floor (OCP §6.3): floor(log2 amax) - emax_elem
    even:  amax rounded to the element's mantissa width (ties to even), then floor
    ceil:  ceil(log2 amax) - emax_elem
    rceil: ceil(log2(amax / elem_max))   (cuBLAS; DeepSeek ceil_to_ue8m0)
    Clamped to [-127, 127]; amax = 0 gives -127 (byte 0); a NaN or infinite amax gives NaN,
    the E8M0 NaN (0xFF): the whole block is NaN (OCP MX §5.4).
    """
    a = amax.to(torch.float64)
    safe = a.clamp(min=2.0**-200)
    if rule == "floor":
        exp = floor_log2(safe) - elem_emax
    elif rule == "even":
        ulp = pow2(floor_log2(safe) - elem_mantissa_bits)
        exp = floor_log2(torch.round(safe / ulp) * ulp) - elem_emax
    elif rule == "ceil":
        exp = ceil_log2(safe) - elem_emax
    elif rule == "rceil":
        exp = ceil_log2(safe / elem_max)
    else:
        raise ValueError(f"unknown MX scale rule {rule!r}")
    exp = torch.where(a == 0, -E8M0_BIAS, exp).clamp(-E8M0_BIAS, E8M0_BIAS)
    return torch.where(torch.isfinite(a), exp, torch.nan)


def mx_scale(exp: torch.Tensor) -> torch.Tensor:
    """float64 block scale 2^exp of `mx_scale_exponent`'s result; NaN stays NaN."""
    nan = torch.isnan(exp)
    return torch.where(nan, torch.nan, pow2(torch.where(nan, 0.0, exp)))
