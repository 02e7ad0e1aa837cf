"""Every config key each producer writes, declared once: read (a rule matches it or the
variant comes from it), checked (read only with the one value moecert reads, any other refused
naming the key), or not read, with why. `producers.detect` lists the keys not read in
`Detected.not_read`; a key a producer writes that is not declared here is listed as unknown,
and `tests/reference/test_producer_rules.py` fails on it (docs/checkpoints.md, "Every config
key").
"""

from __future__ import annotations

from dataclasses import dataclass


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
    "symmetric": _only("symmetric Quark formats only (int4's zero points are read and must "
                       "be 0)", True, None),
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
        "input.scale_calculation_mode": Key(
            "the MX rule of dynamic MX inputs (the variant's mx_scale_rule): Quark's "
            "quantization of them, which an engine runs with it (docs/checkpoints.md, MXFP4 "
            "W4A4); other inputs take no MX scale", only_for=("mxfp4",)),
        "output_tensors": _only("outputs are not quantized", None),
        "bias": _only("biases are not quantized", None),
        "layer_quant_config": _only("no per-layer specs (the experts would be read as the "
                                    "global spec)", None, {}),
        "layer_type_quant_config": _only("no per-layer-type specs", None, {}),
        "export.weight_format": _only("real quantized weights (fake_quantized holds 16-bit "
                                      "weights)", "real_quantized"),
        "export.pack_method": _only("the int4 nibble order: reorder is 0,2,4,6,1,3,5,7 (the "
                                    "quark-int4 record's); int8 and MX exports write it too",
                                    "reorder"),
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
        "has_zero_point": _only("INT4 AWQ: symmetric codes, no zero points", False),
        "pre_quant_scale": _only("INT4 AWQ: the pre_quant_scale tensors the layout holds",
                                 True),
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
# AutoRound's keys (its default export and, beside GPTQ's own, its auto_gptq export)
_AUTOROUND_RUN = {k: _GPTQ_RUN for k in (
    "autoround_version", "iters", "nsamples", "seqlen", "batch_size", "lr", "minmax_lr",
    "enable_quanted_input", "enable_minmax_tuning", "scale_dtype", "amp", "low_gpu_mem_usage",
    "gradient_accumulate_steps", "to_quant_block_names", "block_name_to_quantize",
    "modules_in_block_to_quantize", "enable_norm_bias_tuning", "super_bits",
    "super_group_size", "act_bits", "act_group_size", "act_sym", "act_dynamic",
    "act_data_type")}
_AUTOROUND = {
    "data_type": _only("integer weights (AutoRound's int data type)", "int"),
    "provider": _read("the tool (AutoRound's GPTQ and AWQ exports say auto-round)"),
    "extra_config": _ignored("per-module overrides (AutoRound keeps the router and some "
                             "attention projections 16-bit); " + _UNQUANTIZED),
    **_AUTOROUND_RUN,
}
CONFIG_KEYS["gptq"].update(_AUTOROUND)
CONFIG_KEYS["auto-round"] = {
    "quant_method": _read("the producer"), "bits": _read("the element: the scheme"),
    "group_size": _read("elements per scale"), "sym": _read("zero points (the sym attribute)"),
    "packing_format": _read("the integer layout (auto_round:auto_gptq: GPTQ v1)"),
    **_AUTOROUND,
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
    "gptq_format": ("checkpoint_format", "format", "packing_format"),
    "awq_version": ("version", "format", "checkpoint_format"),
    "awq_sym": ("zero_point",),
    "tool": ("meta.quantizer", "provider"),
}
UNUSED = "a key the rules read, but not the rule of this scheme"
# fields every rule of a producer reads (the structure the fields come from)
STRUCTURE = ("quant_method", "config_groups", "global_quant_config", "weight")


def key_of(keys: dict[str, Key], name: str) -> Key | None:
    """The declaration of field `name` ("meta.*" declares every key under meta)."""
    if name in keys:
        return keys[name]
    head = name.rsplit(".", 1)[0]
    return keys.get(f"{head}.*") if "." in name else None
