"""The scheme table: `Scheme` rows (formats, element, scale encoding, variants, activation
modes), their `SchemeFormat`s, the constants read off the element records, and the accessors
(`get_scheme`, `scheme_format`, `format_record`, `layout_of`).

Its own module so that `variant.py`, `tensors.py` and `shapes.py` import it directly, and the
package (`reference/schemes/__init__.py`) imports them all in plain order: no import cycle
held together by placing an import last.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from .elements import ELEMENTS, Element
from .records import AWQ_PACK_ORDER as AWQ_PACK_ORDER  # re-exported: readers take facts here
from .records import RECORDS, FormatRecord
from .records import Rejected as Rejected
from .records import get_record as get_record

# --- Format constants, read off the element records (value in the trailing comment) ------
INT4_MIN, INT4_MAX = ELEMENTS["int4"].int_range  # -8, 7
INT8_MIN, INT8_MAX = ELEMENTS["int8"].int_range  # -128, 127
F8E4M3_MAX = ELEMENTS["e4m3"].max  # 448.0
F8E4M3_EXP_BIAS = ELEMENTS["e4m3"].exp_bias  # 7
F4E2M1_MAX = ELEMENTS["e2m1"].max  # 6.0
F4E2M1_EXP_BIAS = ELEMENTS["e2m1"].exp_bias  # 1
E8M0_BIAS = ELEMENTS["e8m0"].exp_bias  # 127
(E8M0_NAN,) = ELEMENTS["e8m0"].nan_codes  # 0xFF
MX_BLOCK = 32
NVFP4_BLOCK = 16  # NVFP4: one e4m3 block scale per 16 elements along in
FP8_BLOCK = 128  # DeepSeek-style 128x128 weight blocks
SWIGLUOAI_ALPHA = 1.702
SWIGLUOAI_LIMIT = 7.0

ACTIVATION_DTYPES = ("bf16", "fp16")
ACTIVATIONS = ("silu", "gelu", "swigluoai", "swigluoai-split", "relu2")
GATED_ACTIVATIONS = ("silu", "gelu", "swigluoai", "swigluoai-split")
ACTIVATION_FORMATS = ("standard", "batched")

# Activation quantization modes (what q1/q2 do to a GEMM's input). The scaled modes quantize
# to the scheme's `activation_element` (int8 or e4m3) with s = amax / ACT_ELEMENT_MAX[element].
ACT_NONE = "none"  # 16-bit activations, no quantization
ACT_DYNAMIC_TOKEN = "dynamic-token"  # one scale per token (row)
ACT_STATIC_TENSOR = "static-tensor"  # checkpoint input_scale (max over experts)
ACT_DYNAMIC_TENSOR = "dynamic-tensor"  # one scale for the whole GEMM input
ACT_DYNAMIC_GROUP = "dynamic-group"  # one scale per token per ACT_GROUP columns along K
ACT_MXFP8 = "mxfp8"  # e4m3 elements, E8M0 scale per 32 along K
ACT_MXFP4 = "mxfp4"  # e2m1 elements, E8M0 scale per 32 along K (W4A4; OCP MX v1.0)
ACT_NVFP4 = "nvfp4"  # e2m1 elements, e4m3 scale per 16 along K, global scale 1/input_scale
# modes whose checkpoint carries static per-expert input scales ({p}_input_scale or its name
# in the format: `SchemeFormat.names`)
STATIC_INPUT_MODES = (ACT_STATIC_TENSOR, ACT_NVFP4)
# the MX activation modes and the element each rounds to (per 32 along K, an E8M0 scale by
# the variant's `mx_scale_rule`, OCP's floor unless told): read by the reference's q1 / q2,
# the kernels' quantizers and the exact tier alike
MX_ACTIVATION_ELEMENTS = {ACT_MXFP8: "e4m3", ACT_MXFP4: "e2m1"}
# DeepSeek's 1 x 128 activation groups (one per weight block column); a last group of K %
# 128 columns, where K is no multiple of 128, holds those columns
ACT_GROUP = FP8_BLOCK
ACT_ELEMENTS = ("none", "int8", "e4m3")  # "none": 16-bit or MX activations only
# the scale maps amax to the element's largest value (int8 127, e4m3 448)
ACT_ELEMENT_MAX = {e: ELEMENTS[e].max for e in ACT_ELEMENTS if e != "none"}

# Weight scale granularities.
STRATEGY_TENSOR = "tensor"  # [E] or [E, 2] (w1/w3 shard scales)
STRATEGY_CHANNEL = "channel"  # [E, out, 1]
STRATEGY_GROUP = "group"  # [E, in/g, out] (GPTQ, AWQ) or [E, out, in/g] (compressed-tensors)
STRATEGY_BLOCK = "block"  # [E, ceil(out/128), ceil(in/128)]

# Tensor layouts (which tensors a linear has, `schemes.tensors`; which reader reads them):
# the integer-code layouts with group scales (three packed in int32 words, and "ct-int":
# compressed-tensors' int-quantized format, one code per int8, how llm-compressor writes
# W4AFP8), "quark-int" (Quark's int4: AWQ's packing under Quark's tensor names),
# "modelopt-int" (ModelOpt's INT4 AWQ: two signed codes a byte along out, and a pre_quant_scale
# per input channel that multiplies the GEMM's input), and "dense": one unpacked weight tensor
# (+ its scale) per linear.
PACKED_LAYOUTS = ("gptq", "awq", "ct", "ct-int", "quark-int", "modelopt-int")
LAYOUTS = (*PACKED_LAYOUTS, "dense")

# How weight scales are stored: none (16-bit weights), float (the tool's float dtype), or an
# element record's codes (E8M0 bytes 2^(b - 127), float8_e4m3fn block scales)
SCALE_ENCODINGS = ("none", "float", "e8m0", "e4m3")
# a per-tensor fp32 scale on top of the block scales: "tensor" is one per expert linear, one
# per w1 / w3 shard for w13 ([E, 2]); whether it multiplies or divides is the format record's
# `global_scale` ("multiply" / "divide")
GLOBAL_SCALES = ("none", "tensor")


@dataclass(frozen=True)
class SchemeFormat:
    """One way a scheme's checkpoint is stored: the `checkpoint_format` attribute's value (None
    for a scheme stored one way only), its tensor layout and its format record."""

    name: str | None
    layout: str  # one of LAYOUTS
    record: str  # key of `records.RECORDS`: "name@version"
    sym: bool = True  # default of the `sym` attribute (AutoAWQ files carry zero points)
    # tensor suffixes by role where this format names them its own way (role, suffix); roles
    # not listed take the layout's names (`schemes.tensors`)
    names: tuple[tuple[str, str], ...] = ()

    def suffix(self, role: str, default: str) -> str:
        return dict(self.names).get(role, default)

    @property
    def format_record(self) -> FormatRecord:
        return RECORDS[self.record]

    @property
    def global_scale(self) -> str:
        """How a stored global scale is read: the format record's convention ("none",
        "multiply": w = e2m1 * block scale * stored, "divide": ... / stored)."""
        return self.format_record.global_scale


@dataclass(frozen=True)
class Scheme:
    """What a scheme name means: how it is stored and which options it admits."""

    name: str
    # a label for people ("gptq", "fp8", "w4a8", ... in `moecert list`); code never branches
    # on it: it reads the fields below
    family: str
    weight_bits: int
    element: str  # a stored weight element: key of `elements.ELEMENTS`
    scale_encoding: str  # how weight scales are stored (SCALE_ENCODINGS)
    formats: tuple[SchemeFormat, ...]  # the first is the default
    strategies: tuple[str, ...]
    activation_modes: tuple[str, ...]
    group_sizes: tuple[int, ...] = ()
    asym: bool = False  # may carry zero points
    act_order: bool = False  # may carry g_idx
    scale_block: int = 0  # elements per scale along in fixed by the format (MX: 32); 0: none
    global_scale: str = "none"  # GLOBAL_SCALES
    activation_element: str = "none"  # ACT_ELEMENTS: what the scaled activation modes yield
    # attribute sets the producing tools ship that differ from the defaults in more than one
    # attribute (a variant each, beside the one-attribute changes), as (name, value) pairs
    shipped: tuple[tuple[tuple[str, object], ...], ...] = ()

    @property
    def quantized(self) -> bool:
        return self.scale_encoding != "none"

    @property
    def weight_element(self) -> Element:
        return ELEMENTS[self.element]

    @property
    def scale_element(self) -> Element | None:
        """The element record of coded weight scales (E8M0, E4M3); None for float scales."""
        return ELEMENTS.get(self.scale_encoding)

    @property
    def elements_per_byte(self) -> Fraction:
        """Weight elements per storage unit of the "dense" layout (e2m1 2, fp6 4/3)."""
        return self.weight_element.per_storage_unit

    @property
    def checkpoint_formats(self) -> tuple[str, ...]:
        """The names the `checkpoint_format` attribute may take (none: stored one way)."""
        return tuple(f.name for f in self.formats if f.name is not None)

    @property
    def packed(self) -> bool:
        """Integer codes with group scales (GPTQ, AWQ, CT, W4A8 packed in int32 words; W4AFP8
        one code per int8)."""
        return all(f.layout in PACKED_LAYOUTS for f in self.formats)

    def format(self, name: str | None) -> SchemeFormat:
        """The stored form called `name` (None: the default); KeyError if the scheme has none
        of that name."""
        if name is None or not self.checkpoint_formats:  # stored one way: no name to check
            return self.formats[0]
        for f in self.formats:
            if f.name == name:
                return f
        raise KeyError(f"{self.name} has no checkpoint format {name!r}; known: "
                       f"{', '.join(self.checkpoint_formats) or 'none'}")

    def defaults(self) -> dict:
        """The variant attributes a `Variant` of this scheme has unless told (`sym` here is
        the default format's: `variant.py` takes it from the format given)."""
        fmt = self.formats[0]
        return {"checkpoint_format": fmt.name, "sym": fmt.sym,
                "group_size": self.group_sizes[-1] if self.group_sizes else -1,
                "weight_strategy": self.strategies[0] if self.strategies else None,
                "activation": self.activation_modes[0]}

    def variant_overrides(self) -> tuple[dict, ...]:
        """Attribute changes from the defaults that give the variants selection and the suites
        cover: zero points, act order, the smallest group, other checkpoint formats, other
        strategies and activation modes, and what the tools ship (`shipped`)."""
        out: list[dict] = []
        if self.packed:
            if self.asym and self.defaults()["sym"]:
                out.append({"sym": False})
            if self.act_order:
                out.append({"act_order": True})
            out.append({"group_size": min(g for g in self.group_sizes if g > 0)})
        # the other checkpoint formats decode the same tensors differently (GPTQ v1 stores zero
        # z - 1, v2 stores z): a backend that ignores the format is wrong only there
        out += [{"checkpoint_format": f} for f in self.checkpoint_formats[1:]]
        out += [{"weight_strategy": s} for s in self.strategies[1:]]
        out += [{"activation": m} for m in self.activation_modes[1:]]
        out += [dict(pairs) for pairs in self.shipped]
        return tuple(out)


_INT_GROUPS = (-1, 32, 64, 128)


def _gptq_formats(bits: int) -> tuple[SchemeFormat, ...]:
    return (SchemeFormat("gptq", "gptq", f"gptq-v1-int{bits}@v1"),
            SchemeFormat("gptq_v2", "gptq", f"gptq-v2-int{bits}@v2"))


def _ct_formats(bits: int) -> tuple[SchemeFormat, ...]:
    return tuple(SchemeFormat(f"ct-{v}", "ct", f"ct-pack-quantized-int{bits}@{v}")
                 for v in ("0.17", "0.18"))


_AWQ = SchemeFormat("awq", "awq", "awq-gemm-int4@autoawq-0.2", sym=False)
# llm-compressor's W4AFP8 preset: int4 codes in [-8, 7] unpacked in int8 tensors (the
# compressed-tensors format "int-quantized", chosen because activations are quantized too)
_CT_INT4 = SchemeFormat(None, "ct-int", "ct-int-quantized-int4@0.19")
# AMD Quark's int4 per group (`int4_wo_32` / `_64` / `_128`): signed codes, symmetric (the
# templates' Int4PerGroupSpec), zero points written anyway (all 0)
_QUARK_INT4 = SchemeFormat(None, "quark-int", "quark-int4@0.13", sym=True)
# NVIDIA ModelOpt's INT4 AWQ export (quant_algo W4A16_AWQ): symmetric int4 groups along in
# and the AWQ smoothing factor kept as a tensor, pre_quant_scale [in], which the layer
# multiplies its input by (AutoAWQ folds the same factor into the weights and the norm)
_MODELOPT_INT4 = SchemeFormat(None, "modelopt-int", "modelopt-int4-awq@0.47", sym=True)
# NVFP4 (w = e2m1 * e4m3 block scale per 16 * fp32 global scale, one per w1 / w3 shard): the
# ModelOpt export (vLLM's ModelOptNvFp4FusedMoE names) and compressed-tensors'
# nvfp4-pack-quantized, whose global scales are the reciprocals (w = e2m1 * scale / global).
# W4A4 activations: NVFP4 per 16 along K with a1_gscale = 1 / input_scale (a2 likewise). The
# checkpoint's input scales, [E, 2] for w13 (w1, w3) and [E] for w2, are collapsed to one per
# GEMM, the maximum over experts and shards, as vLLM does for its FlashInfer NVFP4 MoE
# backends (`prepare_nvfp4_moe_layer_for_fi_or_cutlass`: a13_scale.max() for backends with a
# global input scale factor); vLLM's own CUTLASS path keeps one per expert (max over the two
# shards), a quantizer this reference does not model.
_NVFP4_FORMATS = (
    SchemeFormat("modelopt", "dense", "nvfp4-modelopt@1",
                 names=(("global_scale", "weight_scale_2"), ("input_scale", "input_scale"))),
    SchemeFormat("ct", "dense", "nvfp4-pack-quantized@ct-0.20",
                 names=(("weight", "weight_packed"), ("global_scale", "weight_global_scale"),
                        ("input_scale", "input_global_scale"))),
)
_DENSE = (SchemeFormat(None, "dense", "dense@1"),)


def _int_scheme(name, family, bits, formats, **kw) -> Scheme:
    return Scheme(name, family, bits, f"int{bits}", "float", formats, (STRATEGY_GROUP,),
                  kw.pop("activation_modes", (ACT_NONE,)), _INT_GROUPS,
                  asym=kw.pop("asym", True), **kw)


SCHEMES: dict[str, Scheme] = {
    s.name: s
    for s in (
        Scheme("bf16", "dense", 16, "bf16", "none", _DENSE, (), (ACT_NONE,)),
        Scheme("fp16", "dense", 16, "fp16", "none", _DENSE, (), (ACT_NONE,)),
        _int_scheme("gptq-int4", "gptq", 4, _gptq_formats(4), act_order=True),
        _int_scheme("gptq-int8", "gptq", 8, _gptq_formats(8), act_order=True),
        _int_scheme("awq-int4", "awq", 4, (_AWQ,)),
        _int_scheme("quark-int4", "quark", 4, (_QUARK_INT4,), asym=False),
        _int_scheme("modelopt-int4-awq", "modelopt", 4, (_MODELOPT_INT4,), asym=False),
        _int_scheme("ct-int4", "ct", 4, _ct_formats(4), act_order=True),
        _int_scheme("ct-int8", "ct", 8, _ct_formats(8), act_order=True),
        Scheme("int8-w8a16", "int8", 8, "int8", "float",
               (SchemeFormat(None, "dense", "int8-dense@1"),),
               (STRATEGY_CHANNEL, STRATEGY_TENSOR), (ACT_NONE,)),
        Scheme("fp8-w8a16", "fp8", 8, "e4m3", "float",
               (SchemeFormat(None, "dense", "fp8-e4m3fn@ocp-1.0"),),
               (STRATEGY_TENSOR, STRATEGY_CHANNEL, STRATEGY_BLOCK), (ACT_NONE,)),
        Scheme("int8-w8a8", "int8", 8, "int8", "float",
               (SchemeFormat(None, "dense", "int8-dense@1"),),
               (STRATEGY_CHANNEL, STRATEGY_TENSOR),
               (ACT_DYNAMIC_TOKEN, ACT_STATIC_TENSOR, ACT_DYNAMIC_TENSOR),
               activation_element="int8"),
        # DeepSeek-V3/R1, Qwen3 FP8: 128x128 weight blocks with 1x128 activation groups (the
        # default); llm-compressor FP8_DYNAMIC: channel + token; FP8 static: tensor + static;
        # one dynamic scale for the whole input: vLLM's fp8 MoE on Hopper runs per-tensor
        # weights so (its Fp8Config "dynamic" activations, and fp8 W8A16 files there)
        Scheme("fp8-w8a8", "fp8", 8, "e4m3", "float",
               (SchemeFormat(None, "dense", "fp8-e4m3fn@ocp-1.0"),),
               (STRATEGY_BLOCK, STRATEGY_TENSOR, STRATEGY_CHANNEL),
               (ACT_DYNAMIC_GROUP, ACT_DYNAMIC_TOKEN, ACT_STATIC_TENSOR, ACT_DYNAMIC_TENSOR),
               activation_element="e4m3",
               # llm-compressor's FP8_DYNAMIC (channel weights, dynamic per-token
               # activations) and FP8 (tensor weights, static tensor activations)
               shipped=((("weight_strategy", STRATEGY_CHANNEL), ("activation", ACT_DYNAMIC_TOKEN)),
                        (("weight_strategy", STRATEGY_TENSOR), ("activation", ACT_STATIC_TENSOR)))),
        _int_scheme("w4a8-int8", "w4a8", 4, (_AWQ, *_gptq_formats(4)),
                    activation_modes=(ACT_DYNAMIC_TOKEN,), activation_element="int8"),
        # W4AFP8 (compressed-tensors preset; vLLM's int4_w4afp8, CUTLASS on Hopper): symmetric
        # int4 group weights (vLLM takes group 128 only; the format holds any group) and e4m3
        # activations quantized per token, s = amax / 448
        _int_scheme("w4a8-fp8", "w4afp8", 4, (_CT_INT4,), asym=False,
                    activation_modes=(ACT_DYNAMIC_TOKEN,), activation_element="e4m3"),
        Scheme("mxfp8", "mxfp8", 8, "e4m3", "e8m0",
               (SchemeFormat(None, "dense", "mxfp8-e4m3@ocp-mx-1.0"),),
               (STRATEGY_GROUP,), (ACT_NONE, ACT_MXFP8), group_sizes=(MX_BLOCK,),
               scale_block=MX_BLOCK),
        Scheme("nvfp4", "nvfp4", 4, "e2m1", "e4m3", _NVFP4_FORMATS, (STRATEGY_GROUP,),
               (ACT_NONE, ACT_NVFP4), group_sizes=(NVFP4_BLOCK,), scale_block=NVFP4_BLOCK,
               global_scale="tensor"),
        # W4A16, W4A8 (MXFP8 activations) and W4A4 (MXFP4 activations: llm-compressor's
        # MXFP4 preset, Quark's OCP MXFP4 W4A4, what AMD's MI355 MoE releases ship)
        Scheme("mxfp4", "mxfp4", 4, "e2m1", "e8m0",
               (SchemeFormat(None, "dense", "mxfp4-e2m1@ocp-mx-1.0"),),
               (STRATEGY_GROUP,), (ACT_NONE, ACT_MXFP8, ACT_MXFP4), group_sizes=(MX_BLOCK,),
               scale_block=MX_BLOCK),
        # OCP MX v1.0 FP6, as AMD Quark exports it (OCP_MXFP6E2M3Spec / OCP_MXFP6E3M2Spec,
        # weight-only) and AMD's MI355 runs it; 16-bit activations (vLLM takes MXFP6 weights
        # only with MXFP6 activations, not held here: docs/mxfp6.md)
        *(Scheme(f"mxfp6-{el}", "mxfp6", 6, el, "e8m0",
                 (SchemeFormat(None, "dense", f"mxfp6-{el}@ocp-mx-1.0"),),
                 (STRATEGY_GROUP,), (ACT_NONE,), group_sizes=(MX_BLOCK,),
                 scale_block=MX_BLOCK) for el in ("e2m3", "e3m2")),
    )
}

SCHEME_NAMES: tuple[str, ...] = tuple(SCHEMES)


def get_scheme(name: str) -> Scheme:
    """The scheme called `name`; KeyError listing the known names otherwise."""
    try:
        return SCHEMES[name]
    except KeyError:
        raise KeyError(f"unknown scheme {name!r}; known: {', '.join(SCHEMES)}") from None


def scheme_format(attrs) -> SchemeFormat:
    """The stored form of a `Variant` (what a backend receives) or a Checkpoint (which
    holds one): anything with `.scheme` and `.checkpoint_format`."""
    return get_scheme(attrs.scheme).format(attrs.checkpoint_format)


def format_record(attrs) -> FormatRecord:
    """The format record of a `Variant` or a Checkpoint (`scheme_format`)."""
    return scheme_format(attrs).format_record


def layout_of(attrs) -> str:
    """The tensor layout ("gptq", "awq", "ct", "ct-int" or "dense": which tensors, which
    reader) of a `Variant` or a Checkpoint (`scheme_format`)."""
    return scheme_format(attrs).layout
