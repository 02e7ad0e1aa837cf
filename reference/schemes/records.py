"""Versioned format records: every fact about a checkpoint layout that a reader depends on.

Two layouts that differ in any field (compressed-tensors before and after 0.18, GPTQ v1 and
v2) are two records, never one looser reader. The reference's readers and writers in
`layouts/` and the kernels' conversions take their packing, offsets, zero domain,
global-scale convention and scale rules from these records, so a record cannot drift from the
code that reads it. Each record lists the values its format rejects (`Rejected`: a tensor
role and a bit pattern of its storage, or a number), which every reader must refuse and the
harness's `malformed` check writes into a checkpoint one at a time.

Data only (no tensor math): kernels import it too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .elements import ELEMENTS, MxScaleRule

# AWQ's nibble order: nibble i of a word holds column 8c + order[i]
AWQ_PACK_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)


@dataclass(frozen=True)
class Rejected:
    """One value a format rejects in the tensors of one role (`schemes.tensors` roles:
    "weight", "scale", "global_scale"): a bit pattern of the tensor's storage unit (`bits`),
    or a number written in the tensor's floating dtype (`value`)."""

    role: str
    what: str  # for people: "E8M0 0xFF (NaN block)"
    bits: int | None = None
    value: float | None = None


def nan_codes(role: str, element: str) -> tuple[Rejected, ...]:
    """The NaN codes of `element` (its record's `nan_codes`) in tensors of `role`."""
    return tuple(Rejected(role, f"{element} NaN code 0x{c:02X}", bits=c)
                 for c in ELEMENTS[element].nan_codes)


def non_positive_codes(role: str, element: str) -> tuple[Rejected, ...]:
    """Zero, negative zero and -1 of a float `element`, for scales that must be > 0."""
    el = ELEMENTS[element]
    return tuple(Rejected(role, f"{element} {v} (0x{el.code_of(v):02X})", bits=el.code_of(v))
                 for v in (0.0, -0.0, -1.0))


def bad_numbers(role: str, sign: str = "positive") -> tuple[Rejected, ...]:
    """NaN, zero and (for `sign` "positive") a negative value: the float scales a format
    rejects. `sign` is the record's `scale_sign`: "any" keeps negative scales readable."""
    bad = (("NaN", math.nan), ("zero", 0.0), *((("negative", -1.0),) if sign == "positive"
                                              else ()))
    return tuple(Rejected(role, f"a {what} {role.replace('_', ' ')}", value=v)
                 for what, v in bad)


@dataclass(frozen=True)
class FormatRecord:
    """How one checkpoint format stores a quantized linear (out x in per expert)."""

    name: str
    version: str
    weight_layout: str  # tensor shape in the checkpoint, for people
    pack_dim: str | None  # "in", "out" or None (one element per storage unit)
    packing: str | None  # "padded": floor(32/b) codes per int32; "dense": bitstream;
    #                      "bytes": 8/b codes per uint8, lsb first
    bit_order: str | None  # "lsb-first": element i of a word sits at bits i*b .. i*b+b-1
    interleave: tuple[int, ...] | None  # slot i of a word holds element order[i]
    code_offset: int  # stored value = signed code + code_offset (2^(b-1) or 0)
    zero_domain: str | None  # "unsigned", "unsigned-minus-one", "signed" or None (no zeros)
    zero_pack_dim: str | None
    scale_layout: str
    scale_dtype: str  # dtype the producing tool writes
    global_scale: str  # "none", "multiply", "divide"
    scale_rule: str  # how the producing tool chooses scales (used by synthesize)
    element_rounding: str  # "rne" (round half to even) or "rna" (half away from zero)
    nonfinite: str  # what non-finite values mean, for people (the data: `rejected`)
    rejected: tuple[Rejected, ...] = ()  # every value the format rejects, by tensor role
    # MX formats: the producing tool's E8M0 rule (a `MxScaleRule` value) that synthesize uses
    # for the weights; None: the checkpoint's mx_scale_rule attribute
    mx_rule: str | None = None
    # the sign a float weight scale may take: "positive" (> 0) or "any" (the format's
    # arithmetic (q - z) * s has no sign rule and a tool writes negative scales: AutoRound's
    # symmetric rule maps each group's largest magnitude to the code -2^(b-1), so half of its
    # scales are negative). Readers, kernels' conversions and `rejected` all read this field
    scale_sign: str = "positive"
    # codes and zero points stored as two's complement fields (Quark's int4: -3 is 0xD), not
    # offset: the field is (code + code_offset) XOR 2^(b-1), so readers flip that bit and
    # read on as for an offset format
    twos_complement: bool = False

    @property
    def stored_zero_offset(self) -> int:
        """stored zero point = true zero + this (GPTQ v1 stores z - 1)."""
        return -1 if self.zero_domain == "unsigned-minus-one" else 0

    @property
    def key(self) -> str:
        return f"{self.name}@{self.version}"


def _int_record(name, version, bits, **kw) -> FormatRecord:
    sign = kw.get("scale_sign", "positive")
    base = dict(name=name, version=version, bit_order="lsb-first", interleave=None,
                code_offset=1 << (bits - 1), global_scale="none", element_rounding="rne",
                nonfinite="rejected: scales must be finite and " + (
                    "> 0" if sign == "positive" else "non-zero (any sign)"),
                rejected=bad_numbers("scale", sign))
    base.update(kw)
    return FormatRecord(**base)


def _gptq(version: str, bits: int) -> FormatRecord:
    # (q - z) * s: no sign rule. GPTQModel, AutoGPTQ's kernels and AutoRound's own read a
    # negative scale as signed, and AutoRound's symmetric export writes them (issue 42)
    return _int_record(
        f"gptq-{version}-int{bits}", version, bits, scale_sign="any",
        weight_layout=f"qweight int32 [E, in*{bits}/32, out]", pack_dim="in", packing="padded",
        zero_domain="unsigned-minus-one" if version == "v1" else "unsigned", zero_pack_dim="out",
        scale_layout="scales [E, in/g, out]", scale_dtype="fp16",
        scale_rule="sym: amax/((2^b-1)/2), z=2^(b-1); asym: (max-min)/(2^b-1), z=round(-min/s)"
        + ("; z raised to >= 1 so that z-1 is storable" if version == "v1" else ""))


def _ct(version: str, bits: int) -> FormatRecord:
    # compressed-tensors 0.18 (PR #732) packs a dense bitstream; before, floor(32/b) per word.
    # For b in {1, 2, 4, 8} the two agree, but they are still two formats.
    return _int_record(
        f"ct-pack-quantized-int{bits}", version, bits,
        weight_layout=f"weight_packed int32 [E, out, ceil(in*{bits}/32)]", pack_dim="in",
        packing="dense" if version == "0.18" else "padded", zero_domain="signed",
        zero_pack_dim="out", scale_layout="weight_scale [E, out, in/g]", scale_dtype="model",
        scale_rule="sym: amax/((qmax-qmin)/2); asym: (max-min)/(qmax-qmin), zp=qmin-round(min/s)")


def _nvfp4(name, version, weight, global_name, convention, rule) -> FormatRecord:
    # Two e2m1 codes per byte, element 2j in the low nibble (compressed-tensors packs [0.5,
    # -1.0] to 0xa1; ModelOpt and torchao the same); block 16 along in. `convention`: how
    # every stored global and input scale of the format is read, "multiply" (w = e2m1 *
    # block scale * stored; activations: g = fp32(1 / max input_scale), GEMM multiplier max
    # input_scale) or "divide" (w = e2m1 * block scale / stored; activations: g = min
    # input_global_scale, multiplier 1 / g). The one place that says it: the reference
    # (quantize.nvfp4_multiplier, nvfp4_activation_scales) and the kernels
    # (kernels/convert.py) each read it from here (docs/checkpoints.md).
    return FormatRecord(
        name, version, f"{weight} uint8 [E, out, in/2] (e2m1 pairs)", "in", "dense",
        "lsb-first", None, 0, None, None,
        f"weight_scale float8_e4m3fn [E, out, in/16]; {global_name} fp32 [E] ([E, 2] w13)",
        "e4m3", convention, rule, "rne",
        "rejected: NaN, non-positive block scales; non-finite or non-positive global scales",
        rejected=(*nan_codes("scale", "e4m3"), *non_positive_codes("scale", "e4m3"),
                  *bad_numbers("global_scale")))


RECORDS: dict[str, FormatRecord] = {
    r.key: r
    for r in (
        _gptq("v1", 4), _gptq("v2", 4), _gptq("v1", 8), _gptq("v2", 8),
        _int_record(
            "awq-gemm-int4", "autoawq-0.2", 4,
            weight_layout="qweight int32 [E, in, out/8]", pack_dim="out", packing="padded",
            interleave=AWQ_PACK_ORDER, zero_domain="unsigned", zero_pack_dim="out",
            scale_layout="scales [E, in/g, out]", scale_dtype="fp16",
            scale_rule="s=max(max-min,1e-5)/15, z=clamp(-round(min/s),0,15) (no clip to 0)"),
        # AMD Quark 0.13's int4 per-group export (`Pack_4_bits`, pack_method "reorder"): the
        # [out, in] codes transposed to [in, out], eight signed nibbles per int32 along out
        # in AWQ's order, zero points the same way; scales [in/g, out] in the model's dtype
        _int_record(
            "quark-int4", "0.13", 4, weight_layout="weight int32 [E, in, out/8]",
            pack_dim="out", packing="padded", interleave=AWQ_PACK_ORDER, twos_complement=True,
            zero_domain="signed", zero_pack_dim="out", scale_layout="weight_scale [E, in/g, out]",
            scale_dtype="model",
            scale_rule="sym: amax/((qmax-qmin)/2) (Quark PerGroupMinMaxObserver), z = 0"),
        # NVIDIA ModelOpt 0.47's INT4 AWQ export (`pack_int4_in_uint8`): codes round(w / s)
        # clamped to [-8, 7] as two's complement nibbles, rows 2i and 2i+1 of a column in
        # the low and high nibble of one byte; fp32 scales amax / 7 per group along in; the
        # AWQ smoothing factor `pre_quant_scale` [in] (bf16) multiplies the layer's input
        _int_record(
            "modelopt-int4-awq", "0.47", 4,
            weight_layout="weight uint8 [E, out/2, in] (row 2i low nibble, 2i+1 high)",
            pack_dim="out", packing="bytes", twos_complement=True, zero_domain=None,
            zero_pack_dim=None, scale_layout="weight_scale fp32 [E, out, in/g]; "
            "pre_quant_scale [E, in]", scale_dtype="fp32",
            scale_rule="sym: amax/7 per group (ModelOpt INT4QTensor), codes clamped to [-8, 7]",
            rejected=(*bad_numbers("scale"), *bad_numbers("pre_quant_scale"))),
        _ct("0.17", 4), _ct("0.18", 4), _ct("0.17", 8), _ct("0.18", 8),
        # compressed-tensors int-quantized (W4AFP8): codes as signed int8 values, no packing;
        # symmetric only (the preset's), scales in the model's dtype
        _int_record(
            "ct-int-quantized-int4", "0.19", 4, weight_layout="weight int8 [E, out, in]",
            pack_dim=None, packing=None, bit_order=None, code_offset=0, zero_domain=None,
            zero_pack_dim=None, scale_layout="weight_scale [E, out, in/g]", scale_dtype="model",
            scale_rule="sym: amax/((qmax-qmin)/2) (compressed-tensors)"),
        _int_record(
            "int8-dense", "1", 8, weight_layout="weight int8 [E, out, in]", pack_dim=None,
            packing=None, bit_order=None, code_offset=0, zero_domain=None, zero_pack_dim=None,
            scale_layout="weight_scale [E] / [E, 2] (tensor) or [E, out, 1] (channel)",
            scale_dtype="fp32", scale_rule="amax/127 (Quark ptpc_int8)"),
        FormatRecord(
            "fp8-e4m3fn", "ocp-1.0", "weight float8_e4m3fn [E, out, in]", None, None, None, None,
            0, None, None,
            "weight_scale [E] / [E, 2] (tensor), [E, out, 1] (channel), "
            "[E, ceil(out/128), ceil(in/128)] (block)", "fp32", "none", "amax/448", "rne",
            "rejected: NaN codes (0x7f, 0xff) and non-finite or non-positive scales",
            rejected=(*nan_codes("weight", "e4m3"), *bad_numbers("scale"))),
        FormatRecord(
            "mxfp8-e4m3", "ocp-mx-1.0", "weight float8_e4m3fn [E, out, in]", None, None, None,
            None, 0, None, None, "weight_scale uint8 E8M0 [E, out, in/32]", "e8m0", "none",
            "OCP FLOOR: 2^(floor(log2(amax)) - 8)", "rne",
            "rejected: E8M0 0xFF (NaN block) and NaN element codes",
            rejected=(*nan_codes("scale", "e8m0"), *nan_codes("weight", "e4m3"))),
        _nvfp4("nvfp4-modelopt", "1", "weight", "weight_scale_2", "multiply",
               "ModelOpt NVFP4QTensor: s2 = fp32(amax / (6 * 448)) per linear (per w1 / w3 "
               "shard); block scale e4m3(block_amax / (6 * s2)), 0 -> 1; codes = e2m1 RNE of "
               "w / (block scale * s2). Input scales: amax / (6 * 448)."),
        _nvfp4("nvfp4-pack-quantized", "ct-0.20", "weight_packed", "weight_global_scale",
               "divide",
               "compressed-tensors TENSOR_GROUP (nvfp4-pack-quantized): g = fp32(448 * 6 / "
               "amax) per linear (per w1 / w3 shard), stored; block scale e4m3(block_amax / 6 "
               "* g), 0 -> 1; codes = e2m1 RNE of w / (block scale / g). Input global scales: "
               "448 * 6 / amax (the reciprocal of ModelOpt's input_scale)."),
        # gpt-oss's experts. The producing tool: OpenAI's triton_kernels
        # `numerics_details/mxfp/downcast_to_mxfp` (transformers' Mxfp4HfQuantizer and the
        # gpt-oss reference quantize with it, default DequantScaleRoundingMode.ROUND_UP):
        # scale = 2^ceil(log2(amax / 6)) from the fp32 bit pattern (never saturates, unlike
        # OCP's floor(log2 amax) - 2), elements rounded half away from zero (+1 at the bit
        # below e2m1's mantissa, then shifted), saturating at 6.
        FormatRecord(
            "mxfp4-e2m1", "ocp-mx-1.0",
            "weight uint8 [E, out, in/2] (e2m1 element 2j in the low nibble, 2j+1 high)", "in",
            "dense", "lsb-first", None, 0, None, None, "weight_scale uint8 E8M0 [E, out, in/32]",
            "e8m0", "none",
            "triton_kernels downcast_to_mxfp ROUND_UP: 2^ceil(log2(amax / 6)) (rceil)", "rna",
            "rejected: E8M0 0xFF (NaN block); every e2m1 code is finite",
            mx_rule=MxScaleRule.RCEIL.value, rejected=nan_codes("scale", "e8m0")),
        # AMD Quark 0.13's OCP MX fp6 export (`Pack_fp6`): codes 4j..4j+3 in the 24-bit
        # little-endian word v0 | v1 << 6 | v2 << 12 | v3 << 18, E8M0 scales by Quark's
        # default "even" rule (`even_round`), elements RNE saturating (docs/mxfp6.md)
        *(FormatRecord(
            f"mxfp6-{el}", "ocp-mx-1.0",
            f"weight uint8 [E, out, in*3/4] ({el} codes 4j..4j+3 in 3 bytes, lsb first)", "in",
            "dense", "lsb-first", None, 0, None, None, "weight_scale uint8 E8M0 [E, out, in/32]",
            "e8m0", "none",
            "Quark even_round: 2^(floor(log2(amax rounded to the element's mantissa bits)) "
            "- emax)", "rne", f"rejected: E8M0 0xFF (NaN block); every {el} code is finite",
            mx_rule=MxScaleRule.EVEN.value, rejected=nan_codes("scale", "e8m0"))
          for el in ("e2m3", "e3m2")),
        FormatRecord(
            "dense", "1", "weight bf16/fp16 [E, out, in]", None, None, None, None, 0, None, None,
            "none", "model", "none", "none", "none", "rejected: non-finite weights",
            rejected=(Rejected("weight", "a NaN weight", value=math.nan),
                      Rejected("weight", "an infinite weight", value=math.inf))),
    )
}


def get_record(name: str, version: str) -> FormatRecord:
    key = f"{name}@{version}"
    if key not in RECORDS:
        raise KeyError(f"no format record {key}; known: {', '.join(RECORDS)}")
    return RECORDS[key]
