"""What vLLM reads from a model file, made from a moecert checkpoint: the `quantization_config`
dict of the model's config.json, and the layer's tensors under vLLM's per-expert checkpoint
names (`{e}.gate_proj.qweight`, `{e}.up_proj.qweight`, `{e}.down_proj.qweight`, ...).

moecert stores each linear stacked over experts with gate and up concatenated in w13 (SPEC
section 2); a model file holds one tensor per expert and projection. The mapping is slicing
and naming only: every number reaches vLLM as the checkpoint stores it, and vLLM's own weight
loaders, quant configs and weight processing do the rest. Data only, no vLLM import.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from moecert.reference.schemes import FP8_BLOCK, STRATEGY_BLOCK, STRATEGY_TENSOR

from .quant_config import QuantConfig

# moecert activation -> (vLLM MoEActivation value, FusedMoEFactory keyword arguments).
# swigluoai (gpt-oss, gate/up interleaved row by row) is absent: vLLM reads that interleave
# only from a fused gate_up tensor, and the per-expert gate/up loaders place the shards as
# two halves.
ACTIVATIONS = {
    "silu": ("silu", {}),
    "gelu": ("gelu", {}),
    "swigluoai-split": ("swigluoai_uninterleave", {"swiglu_alpha": 1.702, "swiglu_limit": 7.0}),
    "relu2": ("relu2_no_mul", {}),
}

# The tensor suffixes of each layout: moecert name after "w13_" / "w2_" -> vLLM's suffix,
# and how a w13 tensor splits into gate and up (the axis that holds output channels and how
# many output channels one element along it covers).
_INT_LAYOUTS = {
    # GPTQ: [E, K/pack, 2N] packed along the input; zeros [E, G, 2N/pack] packed along N
    "gptq": {"qweight": ("qweight", -1, 1), "scales": ("scales", -1, 1),
             "qzeros": ("qzeros", -1, "pack"), "g_idx": ("g_idx", None, None)},
    # AWQ: [E, K, 2N/pack] packed along N
    "awq": {"qweight": ("qweight", -1, "pack"), "scales": ("scales", -1, 1),
            "qzeros": ("qzeros", -1, "pack")},
    # compressed-tensors: [E, 2N, K/pack], scales [E, 2N, G], zeros [E, 2N/pack, G]
    # (axes here are of one expert's tensor)
    "ct": {"weight_packed": ("weight_packed", 0, 1), "weight_scale": ("weight_scale", 0, 1),
           "weight_zero_point": ("weight_zero_point", 0, "pack"),
           "weight_g_idx": ("weight_g_idx", None, None),
           "weight_shape": ("weight_shape", "shape", None)},
}


def quantization_config(quant: QuantConfig) -> dict | None:
    """The `quantization_config` a model file of this variant carries (None: unquantized), or
    raises ValueError naming what no vLLM checkpoint config expresses."""
    scheme, info = quant.scheme, quant.info
    if info.family == "dense":
        return None
    if info.family == "gptq":
        return {"quant_method": "gptq", "bits": quant.bits, "group_size": quant.group_size,
                "desc_act": quant.act_order, "sym": quant.sym,
                "checkpoint_format": quant.checkpoint_format, "lm_head": False}
    if info.family == "awq":
        return {"quant_method": "awq", "bits": 4, "group_size": quant.group_size,
                "zero_point": not quant.sym, "version": "gemm"}
    if info.family == "ct":
        weights = {"num_bits": quant.bits, "type": "int", "symmetric": quant.sym,
                   "strategy": "group" if quant.group_size > 0 else "channel",
                   "group_size": quant.group_size if quant.group_size > 0 else None,
                   "actorder": "group" if quant.act_order else None, "dynamic": False}
        return {"quant_method": "compressed-tensors", "format": "pack-quantized",
                "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights,
                                              "input_activations": None}},
                "ignore": [], "quantization_status": "compressed"}
    if scheme == "fp8-w8a16" and quant.weight_strategy in (STRATEGY_BLOCK, STRATEGY_TENSOR):
        # vLLM's fp8 config: weights fp8, activations chosen by vLLM's kernel (dynamic)
        d = {"quant_method": "fp8", "activation_scheme": "dynamic"}
        if quant.weight_strategy == STRATEGY_BLOCK:
            d["weight_block_size"] = [FP8_BLOCK, FP8_BLOCK]
        return d
    raise ValueError(f"{quant.describe()}: no vLLM checkpoint config states this scheme "
                     "(the adapter maps gptq, awq, compressed-tensors int and fp8 tensor/block "
                     "checkpoints)")


def expert_tensors(quant: QuantConfig, tensors: dict[str, torch.Tensor], N: int
                   ) -> Iterator[tuple[str, torch.Tensor]]:
    """(vLLM per-expert checkpoint name, tensor) for every tensor of a moecert checkpoint;
    `N` is the intermediate size (w13 holds gate rows 0..N-1 and up rows N..2N-1)."""
    pack = 32 // quant.bits
    for name, t in tensors.items():
        linear, _, suffix = name.partition("_")
        if linear not in ("w13", "w2"):
            raise ValueError(f"{name}: expected a w13_* or w2_* checkpoint tensor")
        vname, axis, per = _suffix_rule(quant, suffix)
        for e in range(t.shape[0]):
            one = t[e]
            if linear == "w2":
                yield f"{e}.down_proj.{vname}", one
                continue
            for proj, half in (("gate_proj", 0), ("up_proj", 1)):
                yield f"{e}.{proj}.{vname}", _half(one, half, axis, per, N, pack)


def _suffix_rule(quant: QuantConfig, suffix: str):
    if suffix == "bias":
        return "bias", -1, 1
    if suffix == "input_scale":
        return "input_scale", None, None  # one per expert: gate and up get the same value
    rules = _INT_LAYOUTS.get(quant.layout)
    if rules is not None:
        if suffix not in rules:
            raise ValueError(f"w13_{suffix}: not a tensor of a {quant.layout} checkpoint")
        return rules[suffix]
    if suffix == "weight":
        return "weight", 0, 1
    if suffix == "weight_scale":
        if quant.weight_strategy == STRATEGY_TENSOR:
            return "weight_scale", "tensor", None
        if quant.weight_strategy == STRATEGY_BLOCK:
            return "weight_scale_inv", 0, FP8_BLOCK
        return "weight_scale", 0, 1
    raise ValueError(f"w13_{suffix}: not a tensor of a {quant.scheme} checkpoint")


def _half(t: torch.Tensor, half: int, axis, per, N: int, pack: int) -> torch.Tensor:
    """Gate (half 0) or up (half 1) of one expert's w13 tensor."""
    if axis is None:  # g_idx, input scale: the same for both shards
        return t
    if axis == "shape":  # compressed-tensors weight_shape [2N, K] -> [N, K]
        return torch.stack([t[0] // 2, t[1]])
    if axis == "tensor":  # per-tensor scales: [] (one) or [2] (gate, up)
        return t if t.dim() == 0 else t[half]
    width = N // (pack if per == "pack" else per)
    return t.narrow(axis, half * width, width)


__all__ = ["ACTIVATIONS", "expert_tensors", "quantization_config"]
