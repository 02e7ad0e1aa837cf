"""Element and scale encodings: every float element of the element records (FP8 E4M3, FP4
E2M1, ...), E8M0, and the MX shared-scale rules.

Decoders, encoders and rounding are written once, from the formats' bit-field definitions
(OCP 8-bit floating point and OCP MX v1.0) with the fields of the element records
(`schemes.elements`), not through torch casts, so that the reference does not share a
conversion with the kernels it judges. `decode_e4m3`, `round_to_e2m1`, ... are the same
functions for one element each.
"""

from __future__ import annotations

import math

import torch

from .schemes.elements import (
    ELEMENTS,
    EXPONENT,
    FLOAT,
    ROUNDINGS,
    Element,
    MxScaleRule,
    get_element,
)

_E4M3, _E2M1, _E8M0 = ELEMENTS["e4m3"], ELEMENTS["e2m1"], ELEMENTS["e8m0"]
F8E4M3_MANTISSA_BITS = _E4M3.mantissa_bits  # 3
F8E4M3_MIN_NORMAL_EXP = _E4M3.min_normal_exp  # -6
F8E4M3_EMAX = _E4M3.emax  # 8: 448 = 1.75 * 2^8
F4E2M1_MANTISSA_BITS = _E2M1.mantissa_bits  # 1
F4E2M1_MIN_NORMAL_EXP = _E2M1.min_normal_exp  # 0
F4E2M1_EMAX = _E2M1.emax  # 2: 6 = 1.5 * 2^2


def _element(element: str | Element) -> Element:
    return element if isinstance(element, Element) else get_element(element)


def element_codes(stored: torch.Tensor, element: str | Element) -> torch.Tensor:
    """int64 codes of stored elements: a float8 tensor's bytes, or the elements packed
    several to a few storage units unpacked along the last dimension: `per_unit` codes of
    `bits` in every `units` bytes, least significant bits first (e2m1: element 2j in the low
    nibble of byte j; fp6: codes 4j..4j+3 in bytes 3j..3j+2)."""
    el = _element(element)
    t = stored.view(torch.uint8) if stored.dtype == torch.float8_e4m3fn else stored
    if el.per_unit == 1:
        return t.to(torch.int64)
    if el.per_unit * el.bits != 8 * el.units * t.element_size():
        raise NotImplementedError(f"{el.name}: {el.per_unit} elements per {el.units} "
                                  f"{t.dtype} units")
    groups = t.to(torch.int64).unflatten(-1, (-1, el.units))
    word = sum(groups[..., i] << (8 * i) for i in range(el.units))  # the group, low byte first
    mask = (1 << el.bits) - 1
    fields = [(word >> (i * el.bits)) & mask for i in range(el.per_unit)]
    return torch.stack(fields, dim=-1).flatten(-2)


def _pack_codes(codes: torch.Tensor, el: Element) -> torch.Tensor:
    """Inverse of `element_codes` for elements packed several to a few bytes."""
    groups = codes.to(torch.int64).unflatten(-1, (-1, el.per_unit))
    word = sum(groups[..., i] << (i * el.bits) for i in range(el.per_unit))
    units = [(word >> (8 * i)) & 0xFF for i in range(el.units)]
    return torch.stack(units, dim=-1).flatten(-2).to(torch.uint8)


def decode(codes: torch.Tensor, element: str | Element) -> torch.Tensor:
    """float64 values of a float or exponent element's integer codes (one per element).

    float:    (-1)^s * 2^(e - bias) * (1 + m / 2^mbits) for e > 0,
              (-1)^s * 2^(1 - bias) * (m / 2^mbits) for e = 0; NaN at the record's NaN codes
    exponent: 2^(code - bias); NaN at the record's NaN codes
    """
    el = _element(element)
    c = codes.to(torch.int64)
    if el.kind == EXPONENT:
        value = pow2(c - el.exp_bias)
    elif el.kind == FLOAT:
        sign = torch.where(c & el.sign_bit != 0, -1.0, 1.0).to(torch.float64)
        exp = (c >> el.mantissa_bits) & ((1 << el.exp_bits) - 1)
        frac = (c & ((1 << el.mantissa_bits) - 1)).to(torch.float64) / (1 << el.mantissa_bits)
        normal = (1.0 + frac) * pow2(exp - el.exp_bias)
        subnormal = frac * pow2(torch.full_like(exp, el.min_normal_exp))
        value = sign * torch.where(exp > 0, normal, subnormal)
    else:
        raise ValueError(f"{el.name} is a {el.kind} element; decode reads float and exponent "
                         "elements")
    for nan in el.nan_codes:
        value = torch.where(c == nan, torch.nan, value)
    return value


_TABLES: dict[tuple[str, torch.device], torch.Tensor] = {}


def decode_table(element: str | Element, device) -> torch.Tensor:
    """float64 [2^bits]: `decode` of every code of `element`, made once per device."""
    el = _element(element)
    device = torch.device(device)
    table = _TABLES.get((el.name, device))
    if table is None:
        codes = torch.arange(1 << el.bits, dtype=torch.int64)
        table = _TABLES[el.name, device] = decode(codes, el).to(device)
    return table


def decode_codes(codes: torch.Tensor, element: str | Element) -> torch.Tensor:
    """`decode` of integer codes that lie in [0, 2^bits) (`element_codes` of stored
    elements), looked up in `decode_table`: the same float64 values, NaN codes included.
    Why a table: decode's arithmetic makes about twenty float64 temporaries per element, and
    the reference decodes a layer's every weight (a DeepSeek-V3 fp8 layer: 11e9 codes per
    problem; on the CPU at E=8, 65 of the reference's 71 s); a look-up reads the codes once."""
    return decode_table(element, codes.device)[codes.to(torch.int64)]


def encode(values: torch.Tensor, element: str | Element) -> torch.Tensor:
    """int64 codes of `values`, which must already be values of the float `element` (round
    first); -0 encodes with the sign bit set. ValueError naming the element otherwise."""
    el = _element(element)
    v = values.to(torch.float64)
    mag = v.abs()
    exp = floor_log2(mag.clamp(min=2.0**-1000)).clamp(min=el.min_normal_exp)
    normal = mag >= 2.0**el.min_normal_exp
    steps = mag / pow2(exp - el.mantissa_bits)  # the mantissa with its leading bit
    man = steps - torch.where(normal, float(1 << el.mantissa_bits), 0.0)
    field = torch.where(normal, exp + el.exp_bias, torch.zeros_like(exp)).to(torch.int64)
    codes = ((torch.signbit(v).to(torch.int64) << (el.bits - 1))
             | (field << el.mantissa_bits) | man.to(torch.int64))
    ok = (steps == torch.round(steps)) & (field < (1 << el.exp_bits))
    # decoded back by look-up: a code outside [0, 2^bits) (NaN or infinite values) fails on
    # its own, and every code the two conditions above pass is inside
    top = (1 << el.bits) - 1
    ok &= (codes >= 0) & (codes <= top)
    ok &= (decode_codes(codes.clamp(0, top), el) == v) | ((v == 0) & (mag == 0))
    if not bool(ok.all()):
        raise ValueError(f"encode: values must be {el.name.upper()} values (round to "
                         f"{el.name} first)")
    return codes


def decode_e4m3(bits: torch.Tensor) -> torch.Tensor:
    """float64 values of E4M3FN bytes (uint8 or a float8_e4m3fn tensor viewed as bytes).

    value = (-1)^s * 2^(e-7) * (1 + m/8) for e > 0, (-1)^s * 2^-6 * (m/8) for e = 0;
    S.1111.111 is NaN; there is no infinity.
    """
    return decode_codes(element_codes(bits, _E4M3), _E4M3)


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


def round_to(x: torch.Tensor, element: str | Element, rounding: str | None = None
             ) -> torch.Tensor:
    """Round float64 values to the nearest value of the float `element`, saturating at its
    largest value; ties to even ("rne") or away from zero ("rna"); the element record's own
    rounding unless `rounding` says otherwise."""
    el = _element(element)
    return _round_minifloat(x, el.mantissa_bits, el.min_normal_exp, el.max,
                            rounding or el.rounding)


def round_to_e4m3(x: torch.Tensor) -> torch.Tensor:
    """Round float64 values to the nearest E4M3FN value, ties to even, saturating at ±448."""
    return round_to(x, _E4M3, "rne")


def round_to_e2m1(x: torch.Tensor, rounding: str = "rne") -> torch.Tensor:
    """Round float64 values to the nearest FP4 E2M1 value (±{0, 0.5, 1, 1.5, 2, 3, 4, 6}),
    ties to even (or away from zero: rounding "rna", as OpenAI's triton_kernels
    `downcast_to_mxfp` rounds), saturating at ±6 (OCP MX v1.0 §5.3.3: conversions to FP4
    saturate)."""
    return round_to(x, _E2M1, rounding)


def decode_e2m1(codes: torch.Tensor) -> torch.Tensor:
    """float64 values of FP4 E2M1 codes (integers 0..15: bit 3 sign, bits 2-1 exponent, bit 0
    mantissa). value = (-1)^s * 2^(e-1) * (1 + m/2) for e > 0, (-1)^s * m/2 for e = 0;
    every code is finite (OCP MX v1.0 §5.3.3)."""
    return decode(codes, _E2M1)


def encode_e2m1(values: torch.Tensor) -> torch.Tensor:
    """E2M1 codes (uint8, 0..15) of `values`, which must already be E2M1 values; -0 encodes
    as 0x8 and 0 as 0x0."""
    return encode(values, _E2M1).to(torch.uint8)


def encode_e4m3(values: torch.Tensor) -> torch.Tensor:
    """float8_e4m3fn tensor holding `values`, which must already be E4M3 values."""
    return encode_stored(values, _E4M3)


def encode_stored(values: torch.Tensor, element: str | Element) -> torch.Tensor:
    """`values` (already the element's values) as the element record's storage along the
    last dimension: a float8 tensor's bytes, uint8 codes, or codes packed several to a few
    bytes as `element_codes` unpacks them."""
    el = _element(element)
    if el.per_unit > 1:
        return _pack_codes(encode(values, el), el)
    codes = encode(values, el).to(torch.uint8)
    return codes.view(el.storage) if el.storage != torch.uint8 else codes


def decode_e8m0(bits: torch.Tensor) -> torch.Tensor:
    """float64 2^(e - 127) of E8M0 bytes; 0xFF is NaN (OCP MX §5.4)."""
    return decode(bits, _E8M0)


def mx_scale_exponent(amax: torch.Tensor, rule: str, element: str | Element = "e4m3"
                      ) -> torch.Tensor:
    """Unbiased shared exponent of MX blocks with absolute maximum `amax` (float64, >= 0).

    floor (OCP §6.3): floor(log2 amax) - emax_elem
    even:  amax rounded to the element's mantissa width (ties to even), then floor
    ceil:  ceil(log2 amax) - emax_elem
    rceil: ceil(log2(amax / elem_max))   (cuBLAS; DeepSeek ceil_to_ue8m0)
    computed from the rule's declared fields (`schemes.elements.MxScaleRule`).
    Clamped to [-127, 127]; amax = 0 gives -127 (byte 0); a NaN or infinite amax gives NaN,
    the E8M0 NaN (0xFF): the whole block is NaN (OCP MX §5.4).
    """
    el, rule = _element(element), MxScaleRule.of(rule)
    a = amax.to(torch.float64)
    safe = a.clamp(min=2.0**-200)
    if rule.rounds_to_mantissa:
        ulp = pow2(floor_log2(safe) - el.mantissa_bits)
        safe = torch.round(safe / ulp) * ulp
    log2 = ceil_log2 if rule.ceil else floor_log2
    exp = log2(safe / el.max) if rule.of_max else log2(safe) - el.emax
    bias = _E8M0.exp_bias
    exp = torch.where(a == 0, -bias, exp).clamp(-bias, bias)
    return torch.where(torch.isfinite(a), exp, torch.nan)


def mx_scale(exp: torch.Tensor) -> torch.Tensor:
    """float64 block scale 2^exp of `mx_scale_exponent`'s result; NaN stays NaN."""
    nan = torch.isnan(exp)
    return torch.where(nan, torch.nan, pow2(torch.where(nan, 0.0, exp)))
