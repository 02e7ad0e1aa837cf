"""Element records: what one stored number of a format is, declared once as data.

Every reader of a stored element takes its facts from here: the reference's decoders and
rounding (`reference/elements.py`), the layouts and the tensor declarations (storage dtype,
elements per storage unit), `random_checkpoint` (the spread of drawn codes), the kernels'
conversion and the Triton kernels (through constexpr mirrors). A new element type (FP6
E2M3 / E3M2 of OCP MX v1.0, say) is one more `Element` in `ELEMENTS`.

Float elements are sign-magnitude minifloats: sign bit, `exp_bits` exponent field with bias
`exp_bias`, `mantissa_bits` mantissa field;

    value = (-1)^s * 2^(e - bias) * (1 + m / 2^mbits)     e > 0
    value = (-1)^s * 2^(1 - bias) * (m / 2^mbits)         e = 0 (subnormal)

with no infinities, and NaN exactly at `nan_codes`. The code table (`values`) is built here
from those fields with Python's exact `math.ldexp`, for the largest finite value and for
readers that decode by look-up; the reference decodes from the bit fields on its own, and a
test holds the two equal.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum
from fractions import Fraction

import torch

INT = "int"  # two's complement integer codes in [min, max]
FLOAT = "float"  # sign-magnitude minifloat (the module docstring)
EXPONENT = "exponent"  # unsigned power-of-two exponent: value 2^(code - bias) (E8M0)
NATIVE = "native"  # a torch floating dtype read by a cast (bf16, fp16 weights)
KINDS = (INT, FLOAT, EXPONENT, NATIVE)
ROUNDINGS = ("rne", "rna")  # ties to even; ties away from zero


@dataclass(frozen=True)
class Element:
    """One stored element type."""

    name: str  # stable key: schemes and format records name elements by it
    kind: str  # KINDS
    bits: int  # width of one element
    storage: torch.dtype  # dtype of the tensor holding the elements unpacked (dense layout)
    # elements packed several to a storage unit: `per_unit` elements in every `units`
    # storage units, a least-significant-bit-first bitstream of `bits`-bit codes (e2m1: two
    # per uint8, element 2j in the low nibble; fp6: four in three bytes)
    per_unit: int = 1
    units: int = 1
    exp_bits: int = 0
    mantissa_bits: int = 0
    exp_bias: int = 0
    nan_codes: tuple[int, ...] = ()  # bit patterns that mean NaN
    int_range: tuple[int, int] | None = None  # INT: (min, max) code
    rounding: str = "rne"  # how values round onto the grid unless a format says otherwise
    # standard deviation of the codes `random_checkpoint` draws (uniform integer codes,
    # unit normals rounded to e4m3, uniform e2m1 codes), which sizes the scales it draws
    draw_std: float = 1.0
    values: tuple[float, ...] = field(default=(), compare=False, repr=False)

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"element {self.name}: kind {self.kind!r} not in {KINDS}")
        if self.kind in (FLOAT, EXPONENT) and not self.values:
            object.__setattr__(self, "values", tuple(_value(self, c)
                                                     for c in range(1 << self.bits)))

    @property
    def per_storage_unit(self) -> Fraction:
        """Elements per storage unit of the dense layout (e2m1 2, fp6 4/3)."""
        return Fraction(self.per_unit, self.units)

    @property
    def codes(self) -> int:
        return 1 << self.bits

    @property
    def max(self) -> float:
        """The largest finite value (INT: the largest code)."""
        if self.kind == INT:
            return float(self.int_range[1])
        if self.kind == NATIVE:
            return float(torch.finfo(self.storage).max)
        return max(v for v in self.values if not math.isnan(v))

    @property
    def min_code(self) -> int:
        """INT: the smallest code."""
        return self.int_range[0]

    @property
    def emax(self) -> int:
        """Exponent of the largest finite value: floor(log2 max) (e4m3 8, e2m1 2)."""
        return math.frexp(self.max)[1] - 1

    @property
    def min_normal_exp(self) -> int:
        """Exponent of the smallest normal value, 1 - bias (e4m3 -6, e2m1 0)."""
        return 1 - self.exp_bias

    @property
    def sign_bit(self) -> int:
        """The sign bit's mask in a code (FLOAT)."""
        return 1 << (self.bits - 1)

    def code_of(self, value: float) -> int:
        """The code of an exactly representable `value` (ValueError otherwise); -0.0 -> the
        negative zero code."""
        for c, v in enumerate(self.values):
            if v == value and math.copysign(1.0, v) == math.copysign(1.0, value):
                return c
        raise ValueError(f"{value} is no {self.name} value")


def _value(el: Element, code: int) -> float:
    """The value of `code` from the bit fields (the module docstring), exactly."""
    if code in el.nan_codes:
        return math.nan
    if el.kind == EXPONENT:
        return math.ldexp(1.0, code - el.exp_bias)
    sign = -1.0 if code & el.sign_bit else 1.0
    e = (code >> el.mantissa_bits) & ((1 << el.exp_bits) - 1)
    m = code & ((1 << el.mantissa_bits) - 1)
    if e == 0:
        return sign * math.ldexp(m, 1 - el.exp_bias - el.mantissa_bits)
    return sign * math.ldexp((1 << el.mantissa_bits) + m, e - el.exp_bias - el.mantissa_bits)


ELEMENTS: dict[str, Element] = {
    e.name: e
    for e in (
        Element("bf16", NATIVE, 16, torch.bfloat16),
        Element("fp16", NATIVE, 16, torch.float16),
        # int4 unpacked is one code per int8 (compressed-tensors int-quantized); packed
        # layouts hold it in int32 words (the format record's packing)
        Element("int4", INT, 4, torch.int8, int_range=(-8, 7), draw_std=4.6),
        Element("int8", INT, 8, torch.int8, int_range=(-128, 127), draw_std=73.9),
        # OCP 8-bit floating point E4M3FN: S.1111.111 is NaN, no infinity, max 448;
        # draw_std: unit normals rounded to e4m3
        Element("e4m3", FLOAT, 8, torch.float8_e4m3fn, exp_bits=4, mantissa_bits=3,
                exp_bias=7, nan_codes=(0x7F, 0xFF), draw_std=1.0),
        # OCP MX v1.0 FP4 E2M1: every code finite, max 6; two per byte, element 2j low;
        # draw_std: root mean square of 0, .5, 1, 1.5, 2, 3, 4, 6
        Element("e2m1", FLOAT, 4, torch.uint8, per_unit=2, exp_bits=2, mantissa_bits=1,
                exp_bias=1, draw_std=2.93),
        # OCP MX v1.0 FP6 E2M3 (max 7.5) and E3M2 (max 28): every code finite; four codes in
        # three bytes as AMD Quark stores them (docs/mxfp6.md); draw_std: root mean square
        # of the 32 magnitudes
        Element("e2m3", FLOAT, 6, torch.uint8, per_unit=4, units=3, exp_bits=2,
                mantissa_bits=3, exp_bias=1, draw_std=3.37),
        Element("e3m2", FLOAT, 6, torch.uint8, per_unit=4, units=3, exp_bits=3,
                mantissa_bits=2, exp_bias=3, draw_std=9.16),
        # OCP MX v1.0 E8M0 block scale: 2^(b - 127), 0xFF is NaN
        Element("e8m0", EXPONENT, 8, torch.uint8, exp_bits=8, exp_bias=127,
                nan_codes=(0xFF,)),
    )
}


class MxScaleRule(StrEnum):
    """How an MX block's shared E8M0 exponent is chosen from the block's absolute maximum
    (amax) for an element with largest value `max` = 1.x * 2^emax, as torchao's
    ScaleCalculationMode names them. Each rule is declared by three fields, from which the
    reference (`elements.mx_scale_exponent`) and the kernels (`activations.mx_exponent`) each
    compute, without branching on the rule's name:

        a = amax rounded to the element's mantissa width first    if rounds_to_mantissa
        exponent = log2(a / max)                                    if of_max
                   log2(a) - emax                                   otherwise
        log2 rounded down (floor), or up                            if ceil

    The value is the stable string checkpoints, configs and case ids carry ("floor", ...).
    """

    def __new__(cls, value: str, rounds_to_mantissa: bool, ceil: bool, of_max: bool):
        rule = str.__new__(cls, value)
        rule._value_ = value
        rule.rounds_to_mantissa, rule.ceil, rule.of_max = rounds_to_mantissa, ceil, of_max
        return rule

    FLOOR = "floor", False, False, False  # OCP MX v1.0 section 6.3
    EVEN = "even", True, False, False  # AMD Quark's even_round (MXFP6 files)
    CEIL = "ceil", False, True, False
    RCEIL = "rceil", False, True, True  # cuBLAS; DeepSeek's ceil_to_ue8m0; triton_kernels

    @classmethod
    def of(cls, rule: str) -> MxScaleRule:
        """The rule called `rule`; ValueError naming the known ones otherwise."""
        try:
            return cls(rule)
        except ValueError:
            raise ValueError(f"unknown MX scale rule {rule!r}; known: "
                             f"{', '.join(MX_SCALE_RULES)}") from None


MX_SCALE_RULES: tuple[str, ...] = tuple(r.value for r in MxScaleRule)


def get_element(name: str) -> Element:
    """The element called `name`; KeyError listing the known ones otherwise."""
    try:
        return ELEMENTS[name]
    except KeyError:
        raise KeyError(f"unknown element {name!r}; known: {', '.join(ELEMENTS)}") from None


__all__ = ["ELEMENTS", "EXPONENT", "FLOAT", "INT", "KINDS", "MX_SCALE_RULES", "NATIVE",
           "ROUNDINGS", "Element", "MxScaleRule", "get_element"]
