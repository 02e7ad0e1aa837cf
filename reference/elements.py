"""Element and scale encodings: FP8 E4M3, E8M0, and the MX shared-scale rules.

Decoders are written from the formats' definitions (OCP 8-bit floating point and OCP MX
v1.0), not through torch casts, so that the reference does not share a conversion with the
kernels it judges.
"""

from __future__ import annotations

import math

import torch

from .schemes import E8M0_BIAS, E8M0_NAN, F8E4M3_EXP_BIAS, F8E4M3_MAX

F8E4M3_MANTISSA_BITS = 3
F8E4M3_MIN_NORMAL_EXP = 1 - F8E4M3_EXP_BIAS  # -6
F8E4M3_EMAX = 8  # exponent of the largest normal, 448 = 1.75 * 2^8


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


def round_to_e4m3(x: torch.Tensor) -> torch.Tensor:
    """Round float64 values to the nearest E4M3FN value, ties to even, saturating at ±448.

    The spacing of E4M3 values around |x| is 2^(max(floor(log2|x|), -6) - 3).
    """
    x = x.to(torch.float64)
    mag = x.abs().clamp(max=F8E4M3_MAX)
    exp = floor_log2(mag.clamp(min=2.0**-30)).clamp(min=F8E4M3_MIN_NORMAL_EXP)
    ulp = pow2(exp - F8E4M3_MANTISSA_BITS)
    rounded = (torch.round(mag / ulp) * ulp).clamp(max=F8E4M3_MAX)
    return torch.where(torch.isnan(x), x, torch.copysign(rounded, x))


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
