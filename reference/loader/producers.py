"""Which producer wrote a model folder, and which moecert scheme and variant its experts are.

The facts are data: `PRODUCERS` (a producer's `quant_method` and how its config reads),
`RULES` (config fields -> scheme and checkpoint attributes, first match wins),
`CONFIG_KEYS` (every key each producer writes: read, checked to hold the one value moecert
reads, or not read and why) and `FILE_SUFFIXES` (a producer's tensor suffix -> the moecert
suffix of SPEC section 2). `detect` only flattens a config into fields, checks each key
against `CONFIG_KEYS` and walks the rules. A config no rule reads is refused naming the key
that differs from the nearest rule; a file is never read as another scheme.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import CheckpointError
from ..schemes import (
    ACT_DYNAMIC_GROUP,
    ACT_DYNAMIC_TENSOR,
    ACT_DYNAMIC_TOKEN,
    ACT_MXFP8,
    ACT_NONE,
    ACT_NVFP4,
    ACT_STATIC_TENSOR,
    FP8_BLOCK,
    MX_BLOCK,
    NVFP4_BLOCK,
    STRATEGY_BLOCK,
    STRATEGY_CHANNEL,
    STRATEGY_GROUP,
    STRATEGY_TENSOR,
)

ANY = object()  # a rule field that matches any value, present or not
PRESENT = object()  # a rule field that must be present (and not null)
ABSENT = None  # a rule field that must be missing (or null) in the config


@dataclass(frozen=True)
class OneOf:
    """A rule field that matches any of `values` (ABSENT among them: may be missing)."""

    values: tuple

    def __repr__(self) -> str:
        return " or ".join(map(repr, self.values))


@dataclass(frozen=True)
class Rule:
    """Config fields (flattened, see `_flatten_*`) -> a scheme and checkpoint attributes.

    `attrs` values (and `producer`) that are a field name in angle brackets
    ("<weights.group_size>") are read from the config; `unsupported` names a scheme moecert
    recognises but cannot hold yet, and `key` the field whose value makes it so."""

    producer: str
    match: tuple[tuple[str, object], ...]
    scheme: str
    attrs: tuple[tuple[str, object], ...] = ()
    unsupported: str = ""
    key: str = ""

    @property
    def method(self) -> str:
        return dict(self.match)["quant_method"]

    def reads(self) -> set[str]:
        """The fields this rule reads: those it matches and those its attributes come from."""
        refs = {v[1:-1] for _, v in self.attrs if isinstance(v, str) and v.startswith("<")}
        if self.producer.startswith("<"):
            refs.add(self.producer[1:-1])
        return {k for k, _ in self.match} | refs


def _r(producer, scheme, match, attrs=None, unsupported="", key=""):
    return Rule(producer, tuple(match.items()), scheme, tuple((attrs or {}).items()),
                unsupported, key)


# --- how each producer's config keys are read --------------------------------------------------

@dataclass(frozen=True)
class Key:
    """One config key a producer writes. `read`: the rules or the variant read it (`why`
    says what for; a rule that does not use it lists it in `not_read` with this why);
    otherwise it is not read, and `why` says why that is safe. `allowed`: the only values
    moecert reads, any other refused naming the key."""

    why: str
    read: bool = True
    allowed: tuple | None = None
    only_for: tuple[str, ...] = ()  # the schemes that read it (empty: every rule does)


def _read(why: str) -> Key:
    return Key(why)


def _only(why: str, *allowed) -> Key:
    return Key(why, True, allowed)


def _ignored(why: str) -> Key:
    return Key(why, False)


_SCALES_STORED = ("how the tool chose its scales; stored scales are read, dynamic ones are "
                  "computed by the activation mode")
_DTYPES_CHECKED = "the stored tensors' dtypes are checked against the format when a layer is read"
_UNQUANTIZED = ("the modules left unquantized; the experts' tensors are checked against the "
                "scheme when a layer is read")
_NOT_MOE = "not part of an MoE layer's computation"
_CT_ARGS_READ = {
    "num_bits": _read("the element: the scheme"), "type": _read("int or float: the scheme"),
    "strategy": _read("the scale granularity"), "group_size": _read("elements per scale"),
}
_CT_WEIGHTS = {
    **{f"weights.{k}": v for k, v in _CT_ARGS_READ.items()},
    "weights.symmetric": _read("zero points (the sym attribute)"),
    "weights.block_structure": _read("the weight block shape of the block strategy"),
    "weights.strategy": _only("the scale granularity", "tensor", "channel", "group",
                              "tensor_group", "block"),
    "weights.actorder": _only("act order: group/dynamic store g_idx (act_order); static/"
                              "weight reorder at quantization time and store none",
                              None, "static", "weight", "group", "dynamic"),
    "weights.dynamic": _only("weights are quantized once, ahead of time", False),
    "weights.observer": _ignored(_SCALES_STORED),
    "weights.observer_kwargs": _ignored(_SCALES_STORED),
    "weights.scale_dtype": _ignored(_DTYPES_CHECKED),
    "weights.zp_dtype": _ignored(_DTYPES_CHECKED),
}
_CT_INPUTS = {
    **{f"input.{k}": v for k, v in _CT_ARGS_READ.items()},
    "input.dynamic": _read("dynamic (per call) or static (calibrated, stored) input scales"),
    "input.symmetric": _only("moecert's activation modes are symmetric", True),
    "input.actorder": _only("activations have no act order", None),
    "input.block_structure": _only("activations are not quantized in 2-D blocks", None),
    "input.observer": _ignored("how the tool calibrated static input scales; the stored "
                               "scales are read (dynamic modes compute their own)"),
    "input.observer_kwargs": _ignored("as observer"),
    "input.scale_dtype": _ignored("the activation scales' dtype, fixed by the mode"),
    "input.zp_dtype": _ignored("symmetric activations have no zero points"),
}
_QUARK_ARGS = {
    "dtype": _read("the element: the scheme"), "qscheme": _read("the scale granularity"),
    "ch_axis": _read("the channel axis of per_channel scales"),
    "group_size": _read("elements per scale (per_group)"),
    "is_dynamic": _read("dynamic or static (stored) scales"),
    "scale_format": _read("E8M0 scales of the OCP MX formats"),
    "symmetric": _only("zero points are not held for Quark formats", True, None),
    "scale_type": _only("float scales", "float"),
    "mx_element_dtype": _only("the MX element is the dtype", None),
    "block_size": _only("no 2-D blocks", None),
    "is_scale_quant": _only("unquantized scales", False),
    "observer_cls": _ignored(_SCALES_STORED),
    "scale_calculation_mode": _ignored(_SCALES_STORED + " (the record fixes the MX rule)"),
    "zero_point_type": _ignored(_DTYPES_CHECKED),
    "enable_buffer_reuse": _ignored("a memory setting of the tool"),
    "max_input_numel": _ignored("a memory setting of the tool"),
}
_GPTQ_RUN = _ignored("a setting of the quantization run; its result is the stored tensors")

# quant_method -> {flattened field: Key}. A key a producer writes that is missing here is
# listed in `not_read` as unknown to the reader (docs/checkpoints.md).
CONFIG_KEYS: dict[str, dict[str, Key]] = {
    "compressed-tensors": {
        "quant_method": _read("the producer"),
        "format": _read("the storage format: the scheme and layout"),
        "version": Key("the pack-quantized integer packing (ct-0.17 padded, ct-0.18 dense)",
                       only_for=("ct-int4", "ct-int8")),
        "quantization_status": _only("compressed weights (frozen/calibration folders hold "
                                     "16-bit fake-quantized weights)", "compressed"),
        "config_groups": _read("the config group targeting Linear"),
        "targets": _ignored("the modules the group quantizes: the one group targeting Linear "
                            "is read, and the experts' tensors are checked against it"),
        "output_activations": _only("outputs are not quantized", None),
        "sparsity_config": _only("no sparse compression (2:4 and bitmask formats are not "
                                 "held)", None, {}),
        "transform_config": _only("no online transforms (rotations change the computation)",
                                  None, {}),
        "ignore": _ignored(_UNQUANTIZED),
        "kv_cache_scheme": _ignored("KV-cache quantization: " + _NOT_MOE),
        "global_compression_ratio": _ignored("a statistic"),
        "input_activations": _read("quantized activations (the activation mode)"),
        **_CT_WEIGHTS, **_CT_INPUTS,
    },
    "quark": {
        "quant_method": _read("the producer"),
        "global_quant_config": _read("the specs every layer takes"),
        "weight": _read("the weight spec"), "input_tensors": _read("the input spec"),
        **{f"weights.{k}": v for k, v in _QUARK_ARGS.items()},
        "weights.round_method": _ignored("how the tool rounded; the stored codes are read"),
        **{f"input.{k}": v for k, v in _QUARK_ARGS.items()},
        "input.round_method": _only("half to even, moecert's activation rounding",
                                    "half_even"),
        "output_tensors": _only("outputs are not quantized", None),
        "bias": _only("biases are not quantized", None),
        "layer_quant_config": _only("no per-layer specs (the experts would be read as the "
                                    "global spec)", None, {}),
        "layer_type_quant_config": _only("no per-layer-type specs", None, {}),
        "export.weight_format": _only("real quantized weights (fake_quantized holds 16-bit "
                                      "weights)", "real_quantized"),
        "export.pack_method": _ignored("the int4 packing order; moecert reads no Quark int4"),
        "export.weight_merge_groups": _ignored("scale sharing across projections; gate and "
                                               "up scales are read as stored"),
        "export.kv_cache_group": _ignored("KV cache: " + _NOT_MOE),
        "export.min_kv_scale": _ignored("KV cache: " + _NOT_MOE),
        "target_device": _ignored("the device the tool targeted"),
        "exclude": _ignored(_UNQUANTIZED),
        "algo_config": _ignored("algorithms run at quantization time (GPTQ, SmoothQuant); "
                                "their result is the stored tensors"),
        "kv_cache_quant_config": _ignored("KV cache: " + _NOT_MOE),
        "kv_cache_post_rope": _ignored("KV cache: " + _NOT_MOE),
        "softmax_quant_spec": _ignored("attention softmax: " + _NOT_MOE),
        "quant_mode": _ignored("how the tool traced the model"),
        "version": _ignored("Quark's version: the formats read are Quark 0.13's"),
    },
    "gptq": {
        "quant_method": _read("the producer"), "bits": _read("the element: the scheme"),
        "group_size": _read("elements per scale"), "desc_act": _read("act order (g_idx)"),
        "sym": _read("zero points (the sym attribute)"),
        "checkpoint_format": _read("gptq (v1, zero - 1 stored) or gptq_v2"),
        "format": _read("as checkpoint_format"),
        "pack_dtype": _only("codes packed in int32 words", "int32"),
        "method": _only("restates quant_method", "gptq"),
        "meta.quantizer": _read("the tool (GPTQModel or AutoGPTQ / AutoAWQ)"),
        "meta.*": _ignored("a setting of the quantization run; its result is the stored "
                           "tensors"),
        "lm_head": _ignored("whether lm_head is quantized: " + _NOT_MOE),
        **{k: _GPTQ_RUN for k in ("damp_percent", "damp_auto_increment", "true_sequential",
                                  "static_groups", "model_name_or_path",
                                  "model_file_base_name", "mse", "v2", "act_group_aware",
                                  "hyb_act", "rotation", "adapter", "offload_to_disk",
                                  "offload_to_disk_path", "pack_impl", "device",
                                  "fail_safe", "dynamic")},
    },
    "modelopt": {
        "quant_method": _read("the producer"), "quant_algo": _read("the scheme"),
        "group_size": _read("elements per block scale"),
        "config_groups": _ignored("restates quant_algo in compressed-tensors' words"),
        "kv_cache_quant_algo": _ignored("KV cache: " + _NOT_MOE),
        "exclude_modules": _ignored(_UNQUANTIZED), "ignore": _ignored(_UNQUANTIZED),
        "producer": _ignored("the tool's name and version"),
    },
    "mxfp4": {
        "quant_method": _read("the producer and the scheme"),
        "modules_to_not_convert": _ignored(_UNQUANTIZED),
    },
    "fp8": {
        "quant_method": _read("the producer"),
        "weight_block_size": _read("the weight block shape"),
        "activation_scheme": _read("the activation mode"),
        "fmt": _only("e4m3 weights", "e4m3"),
        "ignored_layers": _ignored(_UNQUANTIZED),
        "modules_to_not_convert": _ignored(_UNQUANTIZED),
    },
}
_AWQ_KEYS = {k: v for k, v in CONFIG_KEYS["gptq"].items() if k not in ("sym", "method")}
CONFIG_KEYS["awq"] = {
    **_AWQ_KEYS, "method": _only("restates quant_method", "awq"),
    "zero_point": _read("zero points (the sym attribute)"),
    "version": _read("the AWQ kernel layout (GEMM only)"),
    "modules_to_not_convert": _ignored(_UNQUANTIZED),
}
# derived fields -> the config fields they are computed from (a rule that reads a derived
# field reads those)
DERIVED: dict[str, tuple[str, ...]] = {
    "activation": ("input_activations", "input_tensors", "input.type", "input.num_bits",
                   "input.strategy", "input.dynamic", "input.group_size", "input.qscheme",
                   "input.is_dynamic", "input.ch_axis"),
    "input": ("input_activations", "input_tensors"),
    "group_size": ("weights.group_size", "weights.strategy", "group_size"),
    "weights.strategy": ("weights.strategy", "weights.block_structure"),
    "weights.qscheme": ("weights.qscheme", "weights.ch_axis"),
    "ct_version": ("version",),
    "act_order": ("weights.actorder", "desc_act"),
    "gptq_format": ("checkpoint_format", "format"),
    "awq_version": ("version", "format", "checkpoint_format"),
    "awq_sym": ("zero_point",),
    "tool": ("meta.quantizer",),
}
UNUSED = "a key the rules read, but not the rule of this scheme"
# fields every rule of a producer reads (the structure the fields come from)
STRUCTURE = ("quant_method", "config_groups", "global_quant_config", "weight")


# compressed-tensors (llm-compressor): config_groups.<g>.{weights, input_activations}, format.
# (input type, bits, strategy, dynamic, group size) -> activation mode
_CT_ACT = {
    ("int", 8, "token", True, None): ACT_DYNAMIC_TOKEN,
    ("int", 8, "tensor", False, None): ACT_STATIC_TENSOR,
    ("int", 8, "tensor", True, None): ACT_DYNAMIC_TENSOR,
    ("float", 8, "token", True, None): ACT_DYNAMIC_TOKEN,
    ("float", 8, "tensor", False, None): ACT_STATIC_TENSOR,
    ("float", 8, "group", True, FP8_BLOCK): ACT_DYNAMIC_GROUP,
}
_CT_STRATEGY = {"tensor": STRATEGY_TENSOR, "channel": STRATEGY_CHANNEL, "group": STRATEGY_GROUP,
                "tensor_group": STRATEGY_GROUP}
# act order (g_idx) is read for the pack-quantized integer formats only
_CT = {"quant_method": "compressed-tensors", "act_order": False}
_W4A16 = {"quant_method": "compressed-tensors", "format": "pack-quantized",
          "weights.type": "int", "weights.strategy": OneOf((STRATEGY_GROUP, STRATEGY_CHANNEL)),
          "input": ABSENT}
_INT = {**_CT, "format": "int-quantized", "weights.type": "int", "weights.num_bits": 8,
        "weights.group_size": ABSENT}
_FLOAT = {**_CT, "format": "float-quantized", "weights.type": "float", "weights.num_bits": 8,
          "weights.group_size": ABSENT}
# the weights of compressed-tensors' float-block presets: symmetric float groups of `block`
_CT_FP_BLOCKS = {"weights.type": "float", "weights.strategy": STRATEGY_GROUP,
                 "weights.symmetric": True}
_CT_NVFP4 = {**_CT, "format": "nvfp4-pack-quantized", **_CT_FP_BLOCKS, "weights.num_bits": 4,
             "weights.group_size": NVFP4_BLOCK}
_CT_MXFP4 = {**_CT, "format": "mxfp4-pack-quantized", **_CT_FP_BLOCKS, "weights.num_bits": 4,
             "weights.group_size": MX_BLOCK}
_CT_MXFP8 = {**_CT, "format": "mxfp8-quantized", **_CT_FP_BLOCKS, "weights.num_bits": 8,
             "weights.group_size": MX_BLOCK}
# activations: NVFP4 (static global scale, e4m3 block scales per 16), MXFP8 (E8M0 per 32)
_CT_IN_NVFP4 = {"input.type": "float", "input.num_bits": 4, "input.strategy": "tensor_group",
                "input.group_size": NVFP4_BLOCK, "input.dynamic": "local"}
_CT_IN_MX = {"input.type": "float", "input.strategy": "group", "input.group_size": MX_BLOCK,
             "input.dynamic": True}

# Quark's OCP MX weight spec (its OCP_MXSpec defaults): per_group 32 along in, E8M0 scales
_STATIC_WEIGHTS = OneOf((False, ABSENT))
_QUARK = {"quant_method": "quark", "weights.group_size": ABSENT, "weights.scale_format": ABSENT,
          "weights.is_dynamic": _STATIC_WEIGHTS, "input.group_size": ABSENT,
          "input.scale_format": ABSENT}
_QUARK_MX = {"quant_method": "quark", "weights.qscheme": "per_group",
             "weights.group_size": MX_BLOCK, "weights.scale_format": "e8m0",
             "weights.is_dynamic": _STATIC_WEIGHTS}

RULES: tuple[Rule, ...] = (
    _r("llm-compressor", "ct-int4", {**_W4A16, "weights.num_bits": 4},
       {"group_size": "<group_size>", "sym": "<weights.symmetric>",
        "checkpoint_format": "<ct_version>", "act_order": "<act_order>"}),
    _r("llm-compressor", "ct-int8", {**_W4A16, "weights.num_bits": 8},
       {"group_size": "<group_size>", "sym": "<weights.symmetric>",
        "checkpoint_format": "<ct_version>", "act_order": "<act_order>"}),
    # W4AFP8: int4 codes unpacked in int8 (int-quantized), symmetric, fp8 per-token inputs
    _r("llm-compressor", "w4a8-fp8", {**_CT, "format": "int-quantized", "weights.type": "int",
                                      "weights.num_bits": 4, "weights.symmetric": True,
                                      "weights.strategy": STRATEGY_GROUP, "input.type": "float"},
       {"group_size": "<group_size>", "activation": "<activation>"}),
    _r("llm-compressor", "int8-w8a8", {**_INT, "weights.symmetric": True, "input.type": "int"},
       {"weight_strategy": "<weights.strategy>", "activation": "<activation>"}),
    _r("llm-compressor", "int8-w8a16", {**_INT, "weights.symmetric": True, "input": ABSENT},
       {"weight_strategy": "<weights.strategy>"}),
    _r("llm-compressor", "fp8-w8a8", {**_FLOAT, "weights.symmetric": True,
                                      "input.type": "float"},
       {"weight_strategy": "<weights.strategy>", "activation": "<activation>"}),
    _r("llm-compressor", "fp8-w8a16", {**_FLOAT, "weights.symmetric": True, "input": ABSENT},
       {"weight_strategy": "<weights.strategy>"}),
    _r("llm-compressor", "nvfp4", {**_CT_NVFP4, "input": ABSENT},
       {"checkpoint_format": "ct", "activation": ACT_NONE}),
    _r("llm-compressor", "nvfp4", {**_CT_NVFP4, **_CT_IN_NVFP4},
       {"checkpoint_format": "ct", "activation": ACT_NVFP4}),
    _r("llm-compressor", "mxfp4", {**_CT_MXFP4, "input": ABSENT}, {"activation": ACT_NONE}),
    _r("llm-compressor", "mxfp4", {**_CT_MXFP4, **_CT_IN_MX, "input.num_bits": 8},
       {"activation": ACT_MXFP8}),
    # llm-compressor's MXFP4 preset (compressed-tensors 0.19 `MXFP4`) is W4A4: MXFP4
    # activations, E8M0 per 32, dynamic. moecert has no MXFP4 activation mode (a reference
    # rule, two backends, tolerances and mutants): refused, never read as W4A8 or W4A16
    _r("llm-compressor", "mxfp4-w4a4", {**_CT_MXFP4, "input.num_bits": 4},
       unsupported="MXFP4 activations (llm-compressor's MXFP4 preset, W4A4: input "
                   "activations e2m1 with an E8M0 scale per 32); moecert reads MXFP4 weights "
                   "with 16-bit or MXFP8 activations only", key="input.num_bits"),
    _r("llm-compressor", "mxfp8", {**_CT_MXFP8, "input": ABSENT}, {"activation": ACT_NONE}),
    _r("llm-compressor", "mxfp8", {**_CT_MXFP8, **_CT_IN_MX, "input.num_bits": 8},
       {"activation": ACT_MXFP8}),
    # GPTQModel / AutoGPTQ: bits, group_size, desc_act, sym, checkpoint_format
    _r("<tool>", "gptq-int4", {"quant_method": "gptq", "bits": 4},
       {"group_size": "<group_size>", "sym": "<sym>", "checkpoint_format": "<gptq_format>",
        "act_order": "<act_order>"}),
    _r("<tool>", "gptq-int8", {"quant_method": "gptq", "bits": 8},
       {"group_size": "<group_size>", "sym": "<sym>", "checkpoint_format": "<gptq_format>",
        "act_order": "<act_order>"}),
    # AutoAWQ / GPTQModel's awq: GEMM layout only, no act order
    _r("<tool>", "awq-int4", {"quant_method": "awq", "bits": 4, "awq_version": "gemm",
                              "act_order": False},
       {"group_size": "<group_size>", "sym": "<awq_sym>", "checkpoint_format": "awq"}),
    # NVIDIA ModelOpt: quant_algo in hf_quant_config.json (or config.json)
    _r("modelopt", "fp8-w8a8", {"quant_method": "modelopt", "quant_algo": "FP8",
                                "group_size": ABSENT},
       {"weight_strategy": STRATEGY_TENSOR, "activation": ACT_STATIC_TENSOR}),
    _r("modelopt", "nvfp4", {"quant_method": "modelopt", "quant_algo": "NVFP4",
                             "group_size": OneOf((NVFP4_BLOCK, ABSENT))},
       {"checkpoint_format": "modelopt", "activation": ACT_NVFP4}),
    _r("modelopt", "mxfp8", {"quant_method": "modelopt", "quant_algo": "MXFP8",
                             "group_size": OneOf((MX_BLOCK, ABSENT))},
       {"activation": ACT_MXFP8}),
    # AMD Quark: global_quant_config.{weight, input_tensors}
    _r("quark", "int8-w8a8", {**_QUARK, "weights.dtype": "int8", "input.dtype": "int8"},
       {"weight_strategy": "<weights.qscheme>", "activation": "<activation>"}),
    _r("quark", "int8-w8a16", {**_QUARK, "weights.dtype": "int8", "input": ABSENT},
       {"weight_strategy": "<weights.qscheme>"}),
    _r("quark", "fp8-w8a8", {**_QUARK, "weights.dtype": "fp8_e4m3",
                             "input.dtype": "fp8_e4m3"},
       {"weight_strategy": "<weights.qscheme>", "activation": "<activation>"}),
    # Quark OCP MX fp6 (OCP_MXFP6E2M3Spec / OCP_MXFP6E3M2Spec): blocks of 32 along in, E8M0
    # scales; weight-only holds; vLLM's W6A6 (fp6 inputs of the same spec) does not yet
    *(_r("quark", f"mxfp6-{el}", {**_QUARK_MX, "weights.dtype": f"fp6_{el}", "input": ABSENT},
         {"activation": ACT_NONE}) for el in ("e2m3", "e3m2")),
    *(_r("quark", f"mxfp6-{el}", {**_QUARK_MX, "weights.dtype": f"fp6_{el}", "input": PRESENT},
         unsupported="MXFP6 weights with quantized activations (vLLM's W6A6: MXFP6 "
                     "activations of the same element)", key="input")
      for el in ("e2m3", "e3m2")),
    # gpt-oss release: MXFP4 experts, 16-bit activations
    _r("gpt-oss", "mxfp4", {"quant_method": "mxfp4"}, {"activation": ACT_NONE}),
    # DeepSeek-V3 / Qwen3 FP8 releases: 128x128 blocks, dynamic 1x128 activation groups
    _r("fp8-release", "fp8-w8a8", {"quant_method": "fp8",
                                   "weight_block_size": [FP8_BLOCK, FP8_BLOCK],
                                   "activation_scheme": "dynamic"},
       {"weight_strategy": STRATEGY_BLOCK, "activation": ACT_DYNAMIC_GROUP}),
)

# Producer -> the quant_method values it writes.
PRODUCERS: dict[str, tuple[str, ...]] = {
    "llm-compressor": ("compressed-tensors",), "gptqmodel": ("gptq", "awq"),
    "autogptq": ("gptq",), "autoawq": ("awq",), "modelopt": ("modelopt",), "quark": ("quark",),
    "gpt-oss": ("mxfp4",), "fp8-release": ("fp8",), "unquantized": (),
}
# (producer, scheme or None for all its schemes) -> {suffix in its files: moecert suffix} where
# the two differ; every other suffix keeps its name (vLLM's loader keeps the file's suffix too).
# A fused tensor without a suffix (gate_up_proj) is suffix "weight".
FILE_SUFFIXES: dict[tuple[str, str | None], dict[str, str]] = {
    ("gpt-oss", None): {"blocks": "weight", "scales": "weight_scale"},
    ("fp8-release", None): {"weight_scale_inv": "weight_scale"},
    ("llm-compressor", "mxfp4"): {"weight_packed": "weight"},
}
# what `detect` reads besides the weights (for `not_read` and for people)
QUANT_CONFIG_FILES = ("config.json", "hf_quant_config.json", "quantize_config.json")


def known() -> str:
    """The producers and schemes this reader knows, for error messages."""
    schemes = sorted({r.scheme for r in RULES if not r.unsupported} | {"bf16", "fp16"})
    methods = sorted({m for ms in PRODUCERS.values() for m in ms})
    return (f"quant_method one of {', '.join(methods)} (or none: 16-bit); schemes "
            f"{', '.join(schemes)}")


@dataclass
class Detected:
    """The scheme and checkpoint attributes of a folder's experts, and who wrote them.
    `not_read`: each config key written but not read ("<file>: <key path>" -> why)."""

    producer: str
    scheme: str
    attrs: dict = field(default_factory=dict)
    config_file: str = "config.json"
    config: dict = field(default_factory=dict)  # the quantization config as read
    not_read: dict[str, str] = field(default_factory=dict)
    rule: Rule | None = None

    @property
    def suffixes(self) -> dict[str, str]:
        return {**FILE_SUFFIXES.get((self.producer, None), {}),
                **FILE_SUFFIXES.get((self.producer, self.scheme), {})}


@dataclass
class _Fields:
    """A flattened config: rule fields (raw and derived), and each raw field's path in the
    config as written (for messages) and value."""

    values: dict = field(default_factory=dict)
    paths: dict[str, str] = field(default_factory=dict)  # raw field -> key path in the file
    raws: dict = field(default_factory=dict)  # raw field -> its value as written

    def raw(self, name: str, path: str, value) -> None:
        self.values[name] = self.raws[name] = value
        self.paths[name] = path

    def drop(self, name: str) -> None:
        for d in (self.values, self.paths, self.raws):
            d.pop(name, None)

    def path(self, name: str) -> str:
        """The key path in the file of a raw or derived field (derived: its first source
        present)."""
        if name in self.paths:
            return self.paths[name]
        for src in DERIVED.get(name, ()):
            if src in self.paths:
                return self.paths[src]
        return name


def detect(config: dict, hf_quant: dict | None, quantize_config: dict | None,
           weight_dtype: str, config_file: str = "config.json") -> Detected:
    """The producer, scheme and attributes from `config.json`'s `quantization_config`,
    ModelOpt's `hf_quant_config.json` or GPTQ's `quantize_config.json`; 16-bit when none
    (the scheme then follows the stored weight dtype `weight_dtype`, "bf16" or "fp16")."""
    qc, source = config.get("quantization_config"), f"{config_file}: quantization_config"
    if qc is None and hf_quant is not None:
        qc, source = {"quant_method": "modelopt", **hf_quant.get("quantization", {})}, \
            "hf_quant_config.json: quantization"
    if qc is None and quantize_config is not None:
        qc, source = quantize_config, "quantize_config.json"
    if qc is None:
        if weight_dtype not in ("bf16", "fp16"):
            raise CheckpointError(f"{config_file}: quantization_config", "a quantization config "
                                  f"for experts stored as {weight_dtype} ({known()})", "none")
        return Detected("unquantized", weight_dtype, {}, config_file, {})
    if not isinstance(qc, dict):
        raise CheckpointError(source, "a JSON object", type(qc).__name__)
    f = _flatten(qc, source)
    method = f.values.get("quant_method")
    keys = CONFIG_KEYS.get(method, {})
    for name, path in f.paths.items():  # the values moecert reads only one way
        key = _key(keys, name)
        if key is not None and key.allowed is not None and not _one_of(f.raws[name],
                                                                         key.allowed):
            raise CheckpointError(f"{source}.{path}", f"{' or '.join(map(repr, key.allowed))} "
                                  f"({key.why})", repr(f.raws[name]))
    for rule in RULES:
        if all(_matches(f.values.get(k, ABSENT), v) for k, v in rule.match):
            if rule.unsupported:
                raise CheckpointError(f"{source}.{f.path(rule.key)}", "a scheme moecert holds; "
                                      f"this is {rule.unsupported}, scheme {rule.scheme} not "
                                      f"supported yet ({known()})", f"scheme {rule.scheme}")
            attrs = {k: _value(v, f, source) for k, v in rule.attrs}
            return Detected(_value(rule.producer, f, source), rule.scheme, attrs,
                            source.split(":")[0], qc, _not_read(f, rule, keys, source), rule)
    _refuse(f, source, method)


def _key(keys: dict[str, Key], name: str) -> Key | None:
    """The declaration of field `name` ("meta.*" declares every key under meta)."""
    if name in keys:
        return keys[name]
    head = name.rsplit(".", 1)[0]
    return keys.get(f"{head}.*") if "." in name else None


def _one_of(value, allowed) -> bool:
    # True == 1 in Python: a bool and an int are different values in a config
    return any(type(value) is type(a) and value == a for a in allowed)


def _refuse(f: _Fields, source: str, method) -> None:
    """No rule reads the config: name the field the nearest rule of the producer wants
    otherwise (or the quant_method, for an unknown producer)."""
    rules = [r for r in RULES if r.method == method and not r.unsupported]
    if not rules:
        what = ", ".join(f"{k}={v!r}" for k, v in sorted(f.values.items())
                         if k in ("quant_method", "format", "bits", "quant_algo")
                         and not isinstance(v, dict))
        raise CheckpointError(f"{source}.quant_method", known(), what or "no quant_method")

    def misses(r: Rule) -> list[tuple[str, object]]:
        return [(k, v) for k, v in r.match if not _matches(f.values.get(k, ABSENT), v)]

    # fewest fields differ; on a tie, a rule of the config's own format or algorithm, and
    # one that names a key over one that wants the whole input section gone
    nearest = min(rules, key=lambda r: (len(misses(r)), any(
        k in ("format", "quant_algo", "bits") for k, _ in misses(r)),
        any(k == "input" for k, _ in misses(r))))
    k = misses(nearest)[0][0]
    wanted = " / ".join(dict.fromkeys(
        repr(dict(r.match)[k]) for r in rules if len(misses(r)) == len(misses(nearest))
        and k in dict(r.match)))
    raise CheckpointError(f"{source}.{_field_path(f, k)}", f"{wanted} (the nearest {method} "
                          f"scheme moecert reads is {nearest.scheme}; {known()})",
                          _found(f, k))


def _field_path(f: _Fields, k: str) -> str:
    if k == "activation" or (k not in f.paths and k.startswith("input")):
        return f.path("input")
    return f.path(k)


def _found(f: _Fields, k: str) -> str:
    if k in DERIVED:  # every source as written
        return ", ".join(f"{f.paths[s]}={f.raws[s]!r}" for s in DERIVED[k] if s in f.paths) \
            or "missing"
    return repr(f.values.get(k, ABSENT)) if k in f.values else "missing"


def _not_read(f: _Fields, rule: Rule, keys: dict[str, Key], source: str) -> dict[str, str]:
    """Each config key written but not read by `rule`, and why (docs/checkpoints.md)."""
    reads = set(STRUCTURE)
    for name in rule.reads():
        reads.add(name)
        reads.update(DERIVED.get(name, ()))
        if name.startswith("input."):  # a rule that reads an input key reads the section
            reads.update(DERIVED["input"])
    out = {}
    for name, path in f.paths.items():
        key = _key(keys, name)
        if key is None:
            out[f"{source}.{path}"] = "a key this reader does not know: not read"
        elif not key.read:
            out[f"{source}.{path}"] = key.why
        elif key.allowed is None and name not in reads and f.raws[name] is not None:
            # a key a rule should read but does not is a gap of the rules (a test holds
            # that none is left); one read for some schemes only says so
            out[f"{source}.{path}"] = (f"{key.why}: read for {', '.join(key.only_for)} only"
                                       if key.only_for else f"{UNUSED}: {rule.scheme}")
    return out


def _matches(found, want) -> bool:
    if want is ANY:
        return True
    if isinstance(want, OneOf):
        return any(_matches(found, w) for w in want.values)
    if want is PRESENT:
        return found is not ABSENT
    return _one_of(found, (want,))


def _value(v, f: _Fields, source: str):
    if not (isinstance(v, str) and v.startswith("<")):
        return v
    key = v[1:-1]
    if f.values.get(key, ABSENT) is ABSENT:
        if key == "activation":
            raise CheckpointError(f"{source}.{_field_path(f, key)}", "an activation "
                                  "quantization moecert reads (dynamic per-token, static or "
                                  "dynamic per-tensor, dynamic 1x128 fp8 groups)",
                                  _found(f, key))
        raise CheckpointError(f"{source}.{f.path(key)}", "a value moecert reads",
                              _found(f, key) if key in f.values else "missing")
    return f.values[key]


# --- flattening each producer's config into rule fields ---------------------------------------

def _flatten(qc: dict, source: str) -> _Fields:
    method = qc.get("quant_method")
    f = _Fields()
    for k, v in qc.items():
        f.raw(k, k, v)
    if method == "compressed-tensors":
        _flatten_ct(qc, source, f)
    elif method == "quark":
        _flatten_quark(qc, source, f)
    elif method in ("gptq", "awq"):
        _flatten_gptq(qc, source, f)
    return f


def _flatten_gptq(qc: dict, source: str, f: _Fields) -> None:
    method = qc["quant_method"]
    v = f.values
    if method == "gptq":
        formats = {k: qc[k] for k in ("checkpoint_format", "format") if qc.get(k) is not None}
        for k, fmt in formats.items():
            if fmt not in ("gptq", "gptq_v2"):
                raise CheckpointError(f"{source}.{k}", "gptq or gptq_v2 (moecert reads these "
                                      "two GPTQ layouts)", repr(fmt))
        if len(set(formats.values())) > 1:
            raise CheckpointError(f"{source}.format", f"the checkpoint_format "
                                  f"{formats['checkpoint_format']!r}", repr(formats["format"]))
        v["gptq_format"] = next(iter(formats.values()), "gptq")
        v["act_order"] = bool(qc.get("desc_act", False))  # else g_idx, if written, is k // g
    else:
        versions = {k: str(qc[k]).lower() for k in ("version", "format", "checkpoint_format")
                    if qc.get(k) is not None}
        v["awq_version"] = next(iter(versions.values()), "gemm")
        first = next(iter(versions), None)
        for k, ver in versions.items():
            if ver != v["awq_version"]:
                raise CheckpointError(f"{source}.{k}", f"{v['awq_version']!r} like "
                                      f"{source}.{first}", repr(qc[k]))
        v["awq_sym"] = not qc.get("zero_point", True)
        v["act_order"] = bool(qc.get("desc_act", False))
    v["sym"] = qc.get("sym", True)
    v["group_size"] = qc.get("group_size", -1)
    meta = qc.get("meta") or {}
    if not isinstance(meta, dict):
        raise CheckpointError(f"{source}.meta", "a JSON object", type(meta).__name__)
    f.drop("meta")
    for k, val in meta.items():
        f.raw(f"meta.{k}", f"meta.{k}", val)
    quantizer = " ".join(meta.get("quantizer") or [])
    v["tool"] = "gptqmodel" if "gptqmodel" in quantizer else \
        "autogptq" if method == "gptq" else "autoawq"


def _flatten_ct(qc: dict, source: str, f: _Fields) -> None:
    """The one config group that targets the experts' Linear layers."""
    groups = qc.get("config_groups") or {}
    linear = [(n, g) for n, g in groups.items() if "Linear" in (g.get("targets") or [])] or \
        list(groups.items())
    if len(linear) != 1:
        raise CheckpointError(f"{source}.config_groups", "one config group targeting Linear",
                              f"{len(linear)} groups")
    name, g = linear[0]
    base = f"config_groups.{name}"
    w, a = g.get("weights") or {}, g.get("input_activations")
    for part, val in (("weights", w), ("input_activations", a)):
        if val is not None and not isinstance(val, dict):
            raise CheckpointError(f"{source}.{base}.{part}", "a JSON object (or null)",
                                  repr(val))
    for k, val in g.items():
        if k not in ("weights", "format"):
            f.raw(k, f"{base}.{k}", val)
    top = qc.get("format")
    fmt = g.get("format") or top
    if g.get("format") and top not in (None, g["format"], "mixed-precision"):
        raise CheckpointError(f"{source}.format", f"the format of {source}.{base}.format "
                              f"({g['format']!r}) or 'mixed-precision'", repr(top))
    f.raw("format", f"{base}.format" if g.get("format") else "format", fmt)
    for k, val in w.items():
        f.raw(f"weights.{k}", f"{base}.weights.{k}", val)
    v = f.values
    strategy = w.get("strategy")
    v["weights.strategy"] = _CT_STRATEGY.get(strategy, strategy)
    if strategy == "block":  # DeepSeek-style 128 x 128 weight blocks only
        if w.get("block_structure") != [FP8_BLOCK, FP8_BLOCK]:
            raise CheckpointError(f"{source}.{base}.weights.block_structure",
                                  f"[{FP8_BLOCK}, {FP8_BLOCK}] (the block shape moecert "
                                  "reads)", repr(w.get("block_structure")))
        v["weights.strategy"] = STRATEGY_BLOCK
    elif w.get("block_structure") is not None:
        raise CheckpointError(f"{source}.{base}.weights.block_structure", "null (blocks "
                              f"belong to the block strategy; {base}.weights.strategy is "
                              f"{strategy!r})", repr(w["block_structure"]))
    v["group_size"] = w.get("group_size") if strategy in ("group", "tensor_group") else -1
    version = str(qc.get("version") or "0.18")
    v["ct_version"] = "ct-0.17" if _version(version) < (0, 18) else "ct-0.18"
    # "group" (alias "dynamic") stores weight_g_idx; "weight" (alias "static") reorders the
    # columns at quantization time and stores none
    v["act_order"] = w.get("actorder") in ("group", "dynamic")
    if a:
        f.raw("input_activations", f"{base}.input_activations", a)
        for k, val in a.items():
            f.raw(f"input.{k}", f"{base}.input_activations.{k}", val)
        v["input"] = True
        v["activation"] = _CT_ACT.get((a.get("type"), a.get("num_bits"), a.get("strategy"),
                                       a.get("dynamic"), a.get("group_size")), ABSENT)


def _flatten_quark(qc: dict, source: str, f: _Fields) -> None:
    g = qc.get("global_quant_config") or {}
    w, a = g.get("weight") or {}, g.get("input_tensors")
    if isinstance(w, list):
        w = w[0] if w else {}
    base = "global_quant_config"
    for part, val in (("weight", w), ("input_tensors", a)):
        if val is not None and not isinstance(val, dict):
            raise CheckpointError(f"{source}.{base}.{part}", "a JSON object (or null)",
                                  repr(val))
    for k, val in g.items():
        f.raw(k, f"{base}.{k}", val)
    for k, val in (qc.get("export") or {}).items():
        f.raw(f"export.{k}", f"export.{k}", val)
    f.drop("export")
    for k, val in w.items():
        f.raw(f"weights.{k}", f"{base}.weight.{k}", val)
    v = f.values
    # (qscheme, ch_axis) -> strategy; per_group stays raw (the MX rules match it)
    qscheme = {("per_tensor", None): STRATEGY_TENSOR, ("per_channel", 0): STRATEGY_CHANNEL,
               ("per_group", -1): "per_group", ("per_group", 1): "per_group"}
    v["weights.qscheme"] = qscheme.get((w.get("qscheme"), w.get("ch_axis")), ABSENT)
    if a:
        for k, val in a.items():
            f.raw(f"input.{k}", f"{base}.input_tensors.{k}", val)
        v["input"] = True
        mode = {("per_tensor", False, None): ACT_STATIC_TENSOR,
                ("per_tensor", True, None): ACT_DYNAMIC_TENSOR,
                ("per_token", True, 1): ACT_DYNAMIC_TOKEN, ("per_token", True, None):
                ACT_DYNAMIC_TOKEN, ("per_channel", True, 1): ACT_DYNAMIC_TOKEN}
        v["activation"] = mode.get((a.get("qscheme"), a.get("is_dynamic"), a.get("ch_axis")),
                                   ABSENT)


def _version(v: str) -> tuple[int, ...]:
    out = []
    for part in v.split(".")[:3]:
        digits = "".join(c for c in part if c.isdigit())
        out.append(int(digits or 0))
    return tuple(out)
