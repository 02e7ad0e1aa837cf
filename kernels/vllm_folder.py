"""A real model folder handed to vLLM as vLLM's model loader reads it (the `vllm` backends'
path for a case whose checkpoint was read from a model folder, `moecert run --checkpoint`).

Nothing here slices or renames a tensor the moecert way (kernels/vllm_checkpoint.py is for
synthesized checkpoints). What vLLM does, in its order:
  - the config: vLLM's `get_config` on the folder (config.json, and a ModelOpt export's
    hf_quant_config.json where config.json has no quantization_config), the quantization
    method vLLM's ModelConfig resolves from it (`_verify_quantization`), and vLLM's
    `get_quant_config`, the model loader's own path to the QuantizationConfig;
  - the names: the file's own tensor names, through the mappers vLLM's AutoWeightsLoader
    composes (the model class's `hf_to_vllm_mapper`, e.g. Mixtral's gate_proj/up_proj/
    down_proj -> w1/w3/w2; the quant config's checkpoint mappers, e.g. dropping `.g_idx`;
    the rotary-embedding one), then vLLM's `make_expert_params_mapping` with the projection
    names the model passes its FusedMoE, matched and replaced as vLLM's model loaders do;
  - the values: the file's tensors as safetensors reads them, each through its parameter's
    own `weight_loader` (expert id and shard id from vLLM's mapping).

vLLM is imported lazily; the caller (kernels/vllm_backend.py) holds vLLM's config context.
"""

from __future__ import annotations

import json
import re
import types
from collections.abc import Iterator
from pathlib import Path

import torch

# The checkpoint projection names each vLLM model class passes its FusedMoE (`ckpt_names`,
# gate, down, up), as vLLM 0.32's model files write them; every other MoE model of vLLM uses
# FusedMoE's default. Mixtral: vllm/model_executor/models/mixtral.py (MixtralMoE).
CKPT_NAMES = {"MixtralForCausalLM": ("w1", "w2", "w3")}
DEFAULT_CKPT_NAMES = ("gate_proj", "down_proj", "up_proj")


class FolderRefusal(Exception):
    """vLLM's loader does not take the folder's layer (the message says what vLLM did)."""


def architecture(folder: str) -> str:
    config = json.loads((Path(folder) / "config.json").read_text())
    archs = config.get("architectures") or []
    if not archs:
        raise FolderRefusal(f"{folder}/config.json: no 'architectures' (vLLM picks the model "
                            "class, and so its weight names, from it)")
    return archs[0]


def ckpt_names(folder: str) -> tuple[str, str, str]:
    return CKPT_NAMES.get(architecture(folder), DEFAULT_CKPT_NAMES)


def quant_config(folder: str, verify_quantization):
    """vLLM's QuantizationConfig of the folder (None: unquantized), as its model loader makes
    it: `get_config`, the method ModelConfig resolves, `get_quant_config`."""
    from vllm.config import LoadConfig
    from vllm.model_executor.model_loader.weight_utils import get_quant_config
    from vllm.transformers_utils.config import get_config

    hf = get_config(folder, trust_remote_code=False)
    text = getattr(hf, "text_config", None) or hf
    qcfg = getattr(hf, "quantization_config", None)
    if qcfg is None:
        qcfg = getattr(text, "quantization_config", None)
    if qcfg is None:
        return None
    if not isinstance(qcfg, dict):
        qcfg = qcfg.to_dict()
    heads = getattr(text, "num_attention_heads", None)
    stub = types.SimpleNamespace(
        quantization=None, allow_deprecated_quantization=False, quantization_config=None,
        hf_config=hf, hf_overrides={}, model=folder, revision=None,
        model_arch_config=types.SimpleNamespace(
            quantization_config=qcfg, total_num_attention_heads=heads,
            total_num_kv_heads=getattr(text, "num_key_value_heads", heads)))
    verify_quantization(stub)  # ModelConfig._verify_quantization: sets stub.quantization
    return get_quant_config(stub, LoadConfig())


def _weight_files(folder: Path) -> list[Path]:
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        weight_map = json.loads(index.read_text())["weight_map"]
        return [folder / f for f in dict.fromkeys(weight_map.values())]
    return sorted(folder.glob("*.safetensors"))


def expert_tensors(folder: str, layer: int) -> Iterator[tuple[str, torch.Tensor]]:
    """(the file's name, its tensor) of every routed-expert tensor of decoder layer `layer`,
    read with safetensors from the folder's weight files (an index's shards where present)."""
    from safetensors import safe_open

    pattern = re.compile(rf"(^|\.)layers\.{layer}\.[^.]+\.experts\.")
    for path in _weight_files(Path(folder)):
        with safe_open(str(path), framework="pt") as f:
            for name in f.keys():
                if pattern.search(name):
                    yield name, f.get_tensor(name)


def _mapper(arch: str, quant_config):
    """The name mapper vLLM's AutoWeightsLoader applies to a model file's names: the model
    class's hf_to_vllm_mapper, the quant config's cache-scale and checkpoint-weight mappers,
    the unused-rotary-embedding one, composed in vLLM's order."""
    from vllm.model_executor.models import ModelRegistry
    from vllm.model_executor.models.utils import AutoWeightsLoader, WeightsMapper

    cls = ModelRegistry._try_load_model_cls(arch)
    if cls is None:
        raise FolderRefusal(f"vLLM has no model class for architecture {arch!r}")
    mapper = getattr(cls, "hf_to_vllm_mapper", None) or WeightsMapper()
    if quant_config is not None:
        mapper |= quant_config.get_cache_scale_mapper()
        # the checkpoint-weight mapper (g_idx dropped) and the rotary one exist since vLLM
        # 0.27; vLLM 0.25 (the GPU gate's) composes neither: its loader applies what it has
        checkpoint = getattr(quant_config, "get_checkpoint_weight_mapper", None)
        if checkpoint is not None:
            mapper |= checkpoint()
    rotary = getattr(AutoWeightsLoader, "REMOVE_UNUSED_ROTARY_EMBEDS_MAPPER", None)
    return mapper if rotary is None else mapper | rotary


def load(runner, folder: str, layer: int, num_experts: int) -> list[str]:
    """The folder's layer `layer` through vLLM's mapping into `runner` (a vLLM MoERunner);
    the names loaded. FolderRefusal where vLLM's loader would stop: a file tensor that no
    entry of vLLM's mapping matches (vLLM's model loader then looks it up among the model's
    parameters and fails), or a parameter's weight_loader that takes nothing."""
    from vllm.model_executor.layers.fused_moe.layer import (
        fused_moe_make_expert_params_mapping,
    )

    arch = architecture(folder)
    gate, down, up = CKPT_NAMES.get(arch, DEFAULT_CKPT_NAMES)
    mapping = fused_moe_make_expert_params_mapping(
        runner, ckpt_gate_proj_name=gate, ckpt_down_proj_name=down, ckpt_up_proj_name=up,
        num_experts=num_experts)
    mapper = _mapper(arch, runner.routed_experts.quant_config)
    loaded, block = [], None
    params = None
    for file_name, tensor in expert_tensors(folder, layer):
        mapped_names = list(mapper.apply([(file_name, tensor)]))
        if not mapped_names:  # a mapper drops it, as vLLM's loader does
            continue
        ((name, tensor),) = mapped_names
        if params is None:  # the runner's parameters named as the model's params_dict
            block = name[:name.index(".experts.")]
            params = {f"{block}.experts.{n}": p for n, p in runner.named_parameters()}
        for param_name, weight_name, expert_id, shard_id in mapping:
            if weight_name not in name:
                continue
            mapped = name.replace(weight_name, param_name)
            param = params.get(mapped)
            if param is None:
                if mapped.endswith(("w13_bias", "w2_bias")):
                    continue
                raise FolderRefusal(
                    f"vLLM {arch} maps file tensor {file_name!r} to {mapped!r}, which the "
                    f"layer does not have (its parameters: {_names(params)})")
            ok = param.weight_loader(param, tensor, mapped, shard_id=shard_id,
                                     expert_id=expert_id, return_success=True)
            if ok is False:
                raise FolderRefusal(f"vLLM's weight_loader of {mapped!r} took nothing from "
                                    f"file tensor {file_name!r} (shard {shard_id}, expert "
                                    f"{expert_id})")
            loaded.append(file_name)
            break
        else:
            raise FolderRefusal(
                f"vLLM {arch}'s expert mapping (make_expert_params_mapping with checkpoint "
                f"names {gate}/{down}/{up}"
                + ", after the names mappers vLLM's AutoWeightsLoader applies"
                + f") matches no parameter for file tensor {file_name!r}"
                + ("" if name == file_name else f" (mapped name {name!r})")
                + ": vLLM's model loader then looks the name up among the model's parameters "
                "and fails (KeyError)")
    if not loaded:
        raise FolderRefusal(f"{folder}: no routed-expert tensor of layer {layer} in the "
                            "weight files")
    return loaded


def _names(params: dict) -> str:
    return ", ".join(sorted(n.rsplit(".", 1)[-1] for n in params))


__all__ = ["CKPT_NAMES", "FolderRefusal", "ckpt_names", "expert_tensors", "load",
           "quant_config"]
