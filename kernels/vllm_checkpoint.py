"""What vLLM reads from a model file, made from a moecert checkpoint: the `quantization_config`
dict of the model's config.json, and the layer's tensors under vLLM's per-expert checkpoint
names (`{e}.gate_proj.qweight`, `{e}.up_proj.qweight`, `{e}.down_proj.qweight`, ...).

`VARIANT_CONFIGS` is the one table: scheme variant -> the producer whose files carry that
variant and the `quantization_config` such a file holds (the producers' keys as written in
`../shared/research/real_checkpoints.md`), plus the tensor suffixes the producer names its own
way. vLLM's `get_quantization_config(...).from_config` then reads the dict, and vLLM's oracle
decides: it builds the layer and picks an experts class, or it refuses with its own reason.

moecert stores each linear stacked over experts with gate and up concatenated in w13 (SPEC
section 2); a model file holds one tensor per expert and projection. The mapping is slicing
and naming only: every number reaches vLLM as the checkpoint stores it, and vLLM's own weight
loaders, quant configs and weight processing do the rest. Data only, no vLLM import.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import torch
from moecert.reference.schemes import (
    ACT_DYNAMIC_GROUP,
    ACT_DYNAMIC_TENSOR,
    ACT_DYNAMIC_TOKEN,
    ACT_MXFP4,
    ACT_MXFP8,
    ACT_NONE,
    ACT_STATIC_TENSOR,
    FP8_BLOCK,
    MX_BLOCK,
    NVFP4_BLOCK,
    STRATEGY_BLOCK,
    STRATEGY_CHANNEL,
    STRATEGY_TENSOR,
    SWIGLUOAI_ALPHA,
    SWIGLUOAI_LIMIT,
)
from moecert.reference.schemes.tensors import declared_tensors

from .quant_config import Variant

# moecert activation -> (vLLM MoEActivation value, FusedMoEFactory keyword arguments).
# swigluoai (gpt-oss, gate/up interleaved row by row) is absent: vLLM reads that interleave
# only from a fused gate_up tensor, and the per-expert gate/up loaders place the shards as
# two halves. swigluoai-split passes what a model with that activation passes its FusedMoE
# (vLLM's MiniMax-M3 config: alpha 1.702, limit 7, beta 1.0, "the (up + 1) bias"): vLLM's
# activation computes gate * sigmoid(alpha * gate) * (up + beta) and defaults beta to 0.
SWIGLUOAI_UP_BIAS = 1.0
ACTIVATIONS = {
    "silu": ("silu", {}),
    "gelu": ("gelu", {}),
    "swigluoai-split": ("swigluoai_uninterleave", {"swiglu_alpha": SWIGLUOAI_ALPHA,
                                                   "swiglu_limit": SWIGLUOAI_LIMIT,
                                                   "swiglu_beta": SWIGLUOAI_UP_BIAS}),
    "relu2": ("relu2_no_mul", {}),
}

# The packed layouts' split per tensor role (schemes.tensors names the tensors; vLLM's
# per-expert files keep moecert's suffixes): (the axis of one expert's tensor that holds
# output channels, how many output channels one element along it covers).
_PACKED_SPLITS = {
    # GPTQ: [K/pack, 2N] packed along the input; zeros [G, 2N/pack] packed along N
    "gptq": {"weight": (-1, 1), "scale": (-1, 1), "zeros": (-1, "pack"), "g_idx": (None, None)},
    # AWQ: [K, 2N/pack] packed along N
    "awq": {"weight": (-1, "pack"), "scale": (-1, 1), "zeros": (-1, "pack")},
    # Quark int4: AWQ's shapes under Quark's names
    "quark-int": {"weight": (-1, "pack"), "scale": (-1, 1), "zeros": (-1, "pack")},
    # ModelOpt INT4 AWQ: [2N/2, K] two rows a byte, scales [2N, G], pre_quant_scale [K] (one
    # for gate and up)
    "modelopt-int": {"weight": (0, 2), "scale": (0, 1), "pre_quant_scale": (None, None)},
    # compressed-tensors: [2N, K/pack], scales [2N, G], zeros [2N/pack, G]
    "ct": {"weight": (0, 1), "scale": (0, 1), "zeros": (0, "pack"), "g_idx": (None, None),
           "shape": ("shape", None)},
}
# The dense layout's split per tensor role (schemes.tensors): rows along axis 0, except
# per-tensor and per-shard values ("tensor": [] for both shards, [2] one per shard).
_DENSE_SPLITS = {"weight": (0, 1), "global_scale": ("tensor", None),
                 "input_scale": ("tensor", None), "bias": (-1, 1)}
_SCALE_SPLITS = {STRATEGY_TENSOR: ("tensor", None), STRATEGY_BLOCK: (0, FP8_BLOCK)}


# --- the producers' quantization_config dicts ------------------------------------------------

def _gptq(q: Variant) -> dict:  # GPTQModel / AutoGPTQ config.json
    return {"quant_method": "gptq", "bits": q.bits, "group_size": q.group_size,
            "desc_act": q.act_order, "sym": q.sym, "checkpoint_format": q.checkpoint_format,
            "lm_head": False}


def _awq(q: Variant) -> dict:  # AutoAWQ / GPTQModel awq gemm
    return {"quant_method": "awq", "bits": 4, "group_size": q.group_size,
            "zero_point": not q.sym, "version": "gemm"}


def _ct_args(num_bits: int, type_: str, strategy: str, *, dynamic: bool = False,
             group_size: int | None = None, symmetric: bool = True, **extra) -> dict:
    return {"num_bits": num_bits, "type": type_, "symmetric": symmetric, "strategy": strategy,
            "group_size": group_size, "dynamic": dynamic, **extra}


def _ct(fmt: str, weights: dict, inputs: dict | None) -> dict:  # llm-compressor
    return {"quant_method": "compressed-tensors", "format": fmt,
            "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights,
                                          "input_activations": inputs, "format": fmt}},
            "ignore": [], "quantization_status": "compressed"}


def _ct_pack(q: Variant) -> dict:
    g = q.group_size
    return _ct("pack-quantized", _ct_args(q.bits, "int", "group" if g > 0 else "channel",
                                          group_size=g if g > 0 else None, symmetric=q.sym,
                                          actorder="group" if q.act_order else None), None)


# compressed-tensors activation arguments per moecert activation mode (8-bit elements)
_CT_INPUTS = {ACT_DYNAMIC_TOKEN: {"strategy": "token", "dynamic": True},
              ACT_DYNAMIC_GROUP: {"strategy": "group", "dynamic": True,
                                  "group_size": FP8_BLOCK},
              ACT_STATIC_TENSOR: {"strategy": "tensor", "dynamic": False},
              ACT_DYNAMIC_TENSOR: {"strategy": "tensor", "dynamic": True}}


def _ct_dense(type_: str) -> Callable[[Variant], dict]:
    """compressed-tensors `int-quantized` / `float-quantized` (8-bit weights, one per byte)."""
    def config(q: Variant) -> dict:
        block = {"block_structure": [FP8_BLOCK, FP8_BLOCK]} \
            if q.weight_strategy == STRATEGY_BLOCK else {}
        weights = _ct_args(8, type_, q.weight_strategy, **block)
        inputs = None if q.activation == ACT_NONE else _ct_args(8, type_, **_CT_INPUTS[
            q.activation])
        return _ct(f"{type_}-quantized", weights, inputs)
    return config


# the element bits of compressed-tensors' MX input activations per activation mode
_CT_MX_INPUT_BITS = {ACT_MXFP8: 8, ACT_MXFP4: 4}


def _ct_mx(q: Variant) -> dict:  # llm-compressor MXFP8 / MXFP4 (A16, MXFP8 or W4A4)
    bits = q.bits
    weights = _ct_args(bits, "float", "group", group_size=MX_BLOCK, scale_dtype="torch.uint8")
    inputs = None if q.activation == ACT_NONE else _ct_args(
        _CT_MX_INPUT_BITS[q.activation], "float", "group", group_size=MX_BLOCK, dynamic=True,
        scale_dtype="torch.uint8")
    return _ct("mxfp8-quantized" if bits == 8 else "mxfp4-pack-quantized", weights, inputs)


def _ct_mxfp4a16(q: Variant) -> dict:
    """llm-compressor's MXFP4A16 preset: weights only, whatever inputs the variant names (a
    rule no W4A4 file states): vLLM's kernel then chooses them and the adapter declares what
    it ran, as for the gpt-oss file."""
    return _ct_mx(replace(q, activation=ACT_NONE))


def _ct_nvfp4(q: Variant) -> dict:  # llm-compressor NVFP4 / NVFP4A16
    args = _ct_args(4, "float", "tensor_group", group_size=NVFP4_BLOCK)
    inputs = None if q.activation == ACT_NONE else {**args, "dynamic": "local"}
    return _ct("nvfp4-pack-quantized", args, inputs)


def _fp8(q: Variant) -> dict:  # vLLM's own fp8 (DeepSeek-V3, AutoFP8, ModelOpt-style)
    d = {"quant_method": "fp8", "fmt": "e4m3",
         "activation_scheme": "static" if q.activation == ACT_STATIC_TENSOR else "dynamic"}
    if q.weight_strategy == STRATEGY_BLOCK:
        d["weight_block_size"] = [FP8_BLOCK, FP8_BLOCK]
    return d


# Quark's int8 specs: weights per_channel (ch_axis 0) or per_tensor; inputs per_tensor
# (static or dynamic) or per_channel with is_dynamic (Quark's per-token "ptpc_int8")
_QUARK_INPUTS = {ACT_DYNAMIC_TOKEN: ("per_channel", True), ACT_STATIC_TENSOR: ("per_tensor", False),
                 ACT_DYNAMIC_TENSOR: ("per_tensor", True)}


def _quark_spec(qscheme: str, dynamic: bool, ch_axis: int | None) -> dict:
    return {"dtype": "int8", "qscheme": qscheme, "ch_axis": ch_axis, "is_dynamic": dynamic,
            "symmetric": True, "group_size": None, "round_method": "half_even",
            "scale_type": "float", "observer_cls": "PerChannelMinMaxObserver"
            if qscheme == "per_channel" else "PerTensorMinMaxObserver"}


def _quark(q: Variant) -> dict:  # AMD Quark int8 W8A8
    wq = "per_channel" if q.weight_strategy == STRATEGY_CHANNEL else "per_tensor"
    iq, dynamic = _QUARK_INPUTS[q.activation]
    spec = {"weight": _quark_spec(wq, False, 0 if wq == "per_channel" else None),
            "input_tensors": _quark_spec(iq, dynamic, 1 if iq == "per_channel" else None),
            "output_tensors": None, "bias": None}
    return {"quant_method": "quark", "global_quant_config": spec, "layer_quant_config": {},
            "layer_type_quant_config": {}, "exclude": [],
            "export": {"kv_cache_group": [], "pack_method": "reorder"}}


def _quark_mx_spec(dtype: str, block: int, dynamic: bool, rule: str) -> dict:
    return {"dtype": dtype, "qscheme": "per_group", "group_size": block, "ch_axis": -1,
            "is_dynamic": dynamic, "scale_format": "e8m0", "scale_calculation_mode": rule,
            "round_method": "half_even", "scale_type": "float", "symmetric": None,
            "observer_cls": "PerBlockMXObserver"}


def _quark_mx(q: Variant) -> dict:  # AMD Quark OCP MX: OCP_MXFP6*Spec (weight-only), OCP_MXFP4Spec
    # Quark names fp4 "fp4" and fp6 by its element ("fp6_e2m3"); an MX input spec is dynamic
    # and states the rule of its scales (the variant's mx_scale_rule)
    dtype = "fp4" if q.bits == 4 else f"fp{q.bits}_{q.info.element}"
    weight = _quark_mx_spec(dtype, q.info.scale_block, False, "even")
    inputs = (None if q.activation == ACT_NONE
              else _quark_mx_spec(dtype, q.info.scale_block, True, q.mx_scale_rule))
    return {"quant_method": "quark", "global_quant_config": {
                "weight": weight, "input_tensors": inputs, "output_tensors": None, "bias": None},
            "layer_quant_config": {}, "layer_type_quant_config": {}, "exclude": [],
            "export": {"kv_cache_group": [], "pack_method": "reorder"}}


def _quark_int4(q: Variant) -> dict:  # AMD Quark int4_wo_<g> (Int4PerGroupSpec)
    spec = {"dtype": "int4", "qscheme": "per_group", "group_size": q.group_size,
            "ch_axis": -1, "is_dynamic": False, "symmetric": True,
            "round_method": "half_even", "scale_type": "float",
            "observer_cls": "PerGroupMinMaxObserver"}
    return {"quant_method": "quark", "global_quant_config": {
                "weight": spec, "input_tensors": None, "output_tensors": None, "bias": None},
            "layer_quant_config": {}, "layer_type_quant_config": {}, "exclude": [],
            "export": {"kv_cache_group": [], "pack_method": "reorder"}}


def _modelopt(algo: str, group_size: int | None = None) -> Callable[[Variant], dict]:
    def config(q: Variant) -> dict:  # config.json of an NVIDIA ModelOpt export
        d = {"quant_method": "modelopt", "quant_algo": algo, "kv_cache_quant_algo": None,
             "exclude_modules": []}
        if group_size:
            d["group_size"] = group_size
        return d
    return config


def _mxfp4(q: Variant) -> dict:  # the gpt-oss release
    return {"quant_method": "mxfp4", "modules_to_not_convert": []}


@dataclass(frozen=True)
class VllmFileConfig:
    """One row of the table: which variants it covers (None: any), the producer whose file
    carries them, its quantization_config, and the suffixes it names its own way."""

    scheme: str
    producer: str
    config: Callable[[Variant], dict | None]
    strategy: tuple[str, ...] | None = None
    activation: tuple[str, ...] | None = None
    formats: tuple[str, ...] | None = None
    # the MX rules of dynamic MX inputs the file can state (None: any, or no MX inputs)
    mx_scale_rules: tuple[str, ...] | None = None
    names: tuple[tuple[str, str], ...] = ()  # (moecert suffix, the file's suffix)
    # the file stores a per-channel weight scale as [out] (Quark), not [out, 1]
    channel_scale_1d: bool = False
    # the MoE activations of the models whose files the producer writes (None: any); a
    # caller that names no activation (transformers' table reads) is not restricted
    activations: tuple[str, ...] | None = None

    def matches(self, q: Variant, activation: str | None = None) -> bool:
        return (q.scheme == self.scheme
                and (self.activations is None or activation is None
                     or activation in self.activations)
                and (self.strategy is None or q.weight_strategy in self.strategy)
                and (self.activation is None or q.activation in self.activation)
                and (self.formats is None or q.checkpoint_format in self.formats)
                and (self.mx_scale_rules is None or q.mx_scale_rule in self.mx_scale_rules))


_CT_FP8 = _ct_dense("float")
_GPT_OSS = "gpt-oss release (mxfp4)"
def _ct_w4afp8(q: Variant) -> dict:  # llm-compressor W4AFP8: int4 codes one per int8
    weights = _ct_args(4, "int", "group", group_size=q.group_size, symmetric=True)
    inputs = _ct_args(8, "float", **_CT_INPUTS[q.activation])
    return _ct("int-quantized", weights, inputs)


VARIANT_CONFIGS: tuple[VllmFileConfig, ...] = (
    VllmFileConfig("bf16", "unquantized", lambda q: None),
    VllmFileConfig("fp16", "unquantized", lambda q: None),
    VllmFileConfig("gptq-int4", "GPTQModel", _gptq),
    VllmFileConfig("gptq-int8", "GPTQModel", _gptq),
    VllmFileConfig("awq-int4", "AutoAWQ", _awq),
    VllmFileConfig("ct-int4", "llm-compressor W4A16", _ct_pack),
    VllmFileConfig("ct-int8", "llm-compressor W8A16", _ct_pack),
    # an int4 file says nothing of its activations: the int4 producers' own configs, and the
    # engine's kernel chooses int8 activations (vLLM's CPU int4 kernel, Marlin with
    # VLLM_MARLIN_INPUT_DTYPE=int8); the backend declares what it ran (numerics)
    VllmFileConfig("w4a8-int8", "AutoAWQ", _awq, formats=("awq",)),
    VllmFileConfig("w4a8-int8", "GPTQModel", _gptq, formats=("gptq", "gptq_v2")),
    VllmFileConfig("int8-w8a16", "llm-compressor int8 W8A16 (int-quantized)", _ct_dense("int")),
    VllmFileConfig("int8-w8a8", "AMD Quark int8", _quark, channel_scale_1d=True),
    VllmFileConfig("quark-int4", "AMD Quark int4 (int4_wo)", _quark_int4),
    # vLLM 0.25.1 / 0.32.0 list no W4A16_AWQ in ModelOpt's QUANT_ALGOS: vLLM refuses it
    VllmFileConfig("modelopt-int4-awq", "NVIDIA ModelOpt INT4 AWQ (W4A16_AWQ)",
                   lambda q: {**_modelopt("W4A16_AWQ", q.group_size)(q),
                              "has_zero_point": False, "pre_quant_scale": True}),
    # vLLM's own fp8: DeepSeek-V3 (128x128 blocks, weight_scale_inv) and per-tensor files
    VllmFileConfig("fp8-w8a16", "DeepSeek-V3 fp8 (activations chosen by the kernel)", _fp8,
                   strategy=(STRATEGY_BLOCK,), names=(("weight_scale", "weight_scale_inv"),)),
    VllmFileConfig("fp8-w8a16", "vLLM fp8 (activations chosen by the kernel)", _fp8,
                   strategy=(STRATEGY_TENSOR,)),
    VllmFileConfig("fp8-w8a16", "llm-compressor FP8 W8A16", _CT_FP8, strategy=(STRATEGY_CHANNEL,)),
    VllmFileConfig("fp8-w8a8", "DeepSeek-V3 fp8", _fp8, strategy=(STRATEGY_BLOCK,),
                   activation=(ACT_DYNAMIC_GROUP,),
                   names=(("weight_scale", "weight_scale_inv"),)),
    VllmFileConfig("fp8-w8a8", "vLLM fp8 static", _fp8, strategy=(STRATEGY_TENSOR,),
                   activation=(ACT_STATIC_TENSOR,)),
    VllmFileConfig("fp8-w8a8", "llm-compressor FP8", _CT_FP8),
    VllmFileConfig("w4a8-fp8", "llm-compressor W4AFP8 (int-quantized)", _ct_w4afp8),
    VllmFileConfig("mxfp8", "llm-compressor MXFP8A16", _ct_mx, activation=(ACT_NONE,)),
    VllmFileConfig("mxfp8", "NVIDIA ModelOpt MXFP8", _modelopt("MXFP8"), activation=(ACT_MXFP8,)),
    VllmFileConfig("nvfp4", "NVIDIA ModelOpt NVFP4", _modelopt("NVFP4", NVFP4_BLOCK),
                   formats=("modelopt",)),
    VllmFileConfig("nvfp4", "llm-compressor NVFP4", _ct_nvfp4, formats=("ct",)),
    # llm-compressor's MXFP4 preset (W4A4): vLLM's CompressedTensorsW4A4Mxfp4MoEMethod and
    # its oracle decide, and the adapter declares the activations vLLM's quant config states.
    # Its file names the codes weight_packed (tests/fixtures/checkpoints/ct-mxfp4-w4a4-*) and
    # states no MX rule for its inputs: compressed-tensors' own, OCP's floor
    VllmFileConfig("mxfp4", "llm-compressor MXFP4 (W4A4)", _ct_mx, activation=(ACT_MXFP4,),
                   mx_scale_rules=("floor",), names=(("weight", "weight_packed"),)),
    # AMD Quark's OCP MXFP4 W4A4 (tests/fixtures/checkpoints/quark-mxfp4-w4a4-*): its input
    # spec states the rule ("even" as Quark writes it), which vLLM's OCP MX emulation runs
    # (Quark's qdq_mxfp4 in its default even mode; it does not read the key)
    VllmFileConfig("mxfp4", "AMD Quark OCP MXFP4 (W4A4)", _quark_mx, activation=(ACT_MXFP4,),
                   mx_scale_rules=("even",)),
    # the gpt-oss release's format is the gpt-oss model's: vLLM's method for it
    # (GptOssMxfp4MoEMethod.get_fused_moe_quant_config) states gpt-oss's swiglu limit 7.0
    # for every layer, and on CUDA a SiLU layer runs silu(min(gate, 7)) * clamp(up, -7, 7)
    # (fused_moe/activation.py, SILU with a clamp limit; the H200, 2026-11-30: moecert's
    # K = 160 ci row and the llm-compressor MXFP4 folder's exact rows, and
    # tools/vllm_repro/gpu_reduce.py mxfp4-spread). No producer writes another model's
    # layers in it: other activations go to llm-compressor's MXFP4A16, the file
    # tests/fixtures/checkpoints/ct-mxfp4-qwen3moe is
    VllmFileConfig("mxfp4", _GPT_OSS, _mxfp4, activations=("swigluoai", "swigluoai-split")),
    VllmFileConfig("mxfp4", "llm-compressor MXFP4A16", _ct_mxfp4a16,
                   names=(("weight", "weight_packed"),)),
    # vLLM takes Quark OCP MX fp6 weights only with OCP MX inputs (W6A6): it refuses this
    # weight-only file (OCP_MX_Scheme.from_quant_dtype), its own verdict (docs/mxfp6.md)
    *(VllmFileConfig(f"mxfp6-{el}", "AMD Quark OCP MX fp6 (weight-only)", _quark_mx)
      for el in ("e2m3", "e3m2")),
)


def file_config(quant: Variant, activation: str | None = None) -> VllmFileConfig:
    """The table's row for `quant` in a layer of `activation` (None: the first row for the
    variant); ValueError naming the variant where no row matches."""
    for row in VARIANT_CONFIGS:
        if row.matches(quant, activation):
            return row
    raise ValueError(f"{quant.describe()}: no vLLM checkpoint config states this variant "
                     "(kernels/vllm_checkpoint.py VARIANT_CONFIGS)")


def quantization_config(quant: Variant, activation: str | None = None) -> dict | None:
    """The `quantization_config` a model file of this variant (in a layer of `activation`)
    carries (None: unquantized), or raises ValueError naming the variant no row covers."""
    return file_config(quant, activation).config(quant)


def expert_tensors(quant: Variant, tensors: dict[str, torch.Tensor], N: int,
                   gated: bool = True, activation: str | None = None
                   ) -> Iterator[tuple[str, torch.Tensor]]:
    """(vLLM per-expert checkpoint name, tensor) for every tensor of a moecert checkpoint;
    `N` is the intermediate size (w13 holds gate rows 0..N-1 and up rows N..2N-1). A
    non-gated activation's w13 is one projection: the model file's gate_proj alone (vLLM
    0.25 loads an up_proj of a non-gated layer past the end of its w13)."""
    pack = 32 // quant.bits
    row = file_config(quant, activation)
    rename = dict(row.names)
    flat = row.channel_scale_1d and quant.weight_strategy == STRATEGY_CHANNEL
    roles = {name: d.role for name, d in declared_tensors(quant).items()}
    for name, t in tensors.items():
        linear, _, suffix = name.partition("_")
        if linear not in ("w13", "w2") or name not in roles:
            raise ValueError(f"{name}: not a tensor of a {quant.describe()} checkpoint")
        axis, per = _split(quant, roles[name])
        vname = rename.get(suffix, suffix)
        for e in range(t.shape[0]):
            one = t[e].reshape(-1) if flat and roles[name] == "scale" else t[e]
            if linear == "w2":
                yield f"{e}.down_proj.{vname}", one
                continue
            if not gated:
                yield f"{e}.gate_proj.{vname}", one
                continue
            for proj, half in (("gate_proj", 0), ("up_proj", 1)):
                yield f"{e}.{proj}.{vname}", _half(one, half, axis, per, N, pack)


def _split(quant: Variant, role: str):
    """(axis, rows per element) of one expert's w13 tensor, by layout and role."""
    rules = _PACKED_SPLITS.get(quant.layout)
    if rules is not None:
        if role == "bias":
            return -1, 1
        return rules[role]
    if role == "scale":
        return _SCALE_SPLITS.get(quant.weight_strategy, (0, 1))
    return _DENSE_SPLITS[role]


def _half(t: torch.Tensor, half: int, axis, per, N: int, pack: int) -> torch.Tensor:
    """Gate (half 0) or up (half 1) of one expert's w13 tensor."""
    if axis is None:  # g_idx: the same for both shards
        return t
    if axis == "shape":  # compressed-tensors weight_shape [2N, K] -> [N, K]
        return torch.stack([t[0] // 2, t[1]])
    if axis == "tensor":  # per-tensor values: [] (one for both) or [2] (gate, up)
        return t if t.dim() == 0 else t[half]
    width = N // (pack if per == "pack" else per)
    return t.narrow(axis, half * width, width)


__all__ = ["ACTIVATIONS", "VARIANT_CONFIGS", "VllmFileConfig", "expert_tensors",
           "file_config", "quantization_config"]
