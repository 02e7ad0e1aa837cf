"""Model folders written in the producers' documented layouts (../shared/research/
real_checkpoints.md), for the loader's tests before (and beside) the real-tool fixtures.

`write_folder` splits a moecert Checkpoint into the per-expert tensors a producer writes
(`model.layers.L.mlp.experts.e.gate_proj.<suffix>` ...), or gpt-oss's fused ones, adds the
layer's other tensors (router, attention, norms, embeddings) and writes config.json plus one
safetensors file or several shards with an index. The split is written here from the
producers' descriptions, not from the loader's code.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

# per-expert projection names per convention
QWEN = ("gate_proj", "up_proj", "down_proj")
MIXTRAL = ("w1", "w3", "w2")
# suffixes whose per-expert tensor has the output dimension last (GPTQ / AWQ: [in, out])
OUT_LAST = {"qweight", "scales", "qzeros"}
SHARED = {"g_idx", "weight_g_idx"}  # one per expert: the same in gate and up


def split_expert_tensors(ckpt, prefix: str, names=QWEN, rename=None, scalar_shape=(),
                         experts_offset=0) -> dict[str, torch.Tensor]:
    """{file name: tensor} of every expert's gate, up and down projections."""
    rename = rename or {}
    out = {}
    for full, t in ckpt.tensors.items():
        linear, suffix = full.split("_", 1)
        file_suffix = rename.get(suffix, suffix)
        for e in range(t.shape[0]):
            base = f"{prefix}.{e + experts_offset}"
            if linear == "w2":
                piece = _scalar(t[e], scalar_shape) if t.dim() == 1 else t[e]
                out[f"{base}.{names[2]}.{file_suffix}"] = piece.clone()
                continue
            for i, proj in enumerate(names[:2]):
                out[f"{base}.{proj}.{file_suffix}"] = _half(suffix, t[e], i, scalar_shape)
    return out


def _half(suffix, t, i, scalar_shape):
    if suffix in SHARED:
        return t.clone()
    if suffix == "weight_shape":
        return torch.tensor([int(t[0]) // 2, int(t[1])], dtype=t.dtype)
    if t.dim() == 0:  # one scale for both shards (fp8 input scale [E])
        return _scalar(t, scalar_shape)
    if t.dim() == 1 and t.shape[0] == 2:  # [E, 2] shard scales
        return _scalar(t[i], scalar_shape)
    if suffix in OUT_LAST:
        n = t.shape[-1] // 2
        return t[..., i * n:(i + 1) * n].clone()
    n = t.shape[0] // 2
    return t[i * n:(i + 1) * n].clone()


def _scalar(t, shape):
    return t.reshape(shape).clone()


def layer_extras(L: int, K: int, E: int, router=True, gen=None) -> dict[str, torch.Tensor]:
    """A decoder layer's attention, norms and router (random, bf16)."""
    gen = gen or torch.Generator().manual_seed(L)
    out = {f"model.layers.{L}.self_attn.q_proj.weight": torch.randn(K, K, generator=gen),
           f"model.layers.{L}.input_layernorm.weight": torch.rand(K, generator=gen) + 0.5}
    if router:
        out[f"model.layers.{L}.mlp.gate.weight"] = torch.randn(E, K, generator=gen)
    return {k: v.to(torch.bfloat16) for k, v in out.items()}


def model_extras(K: int, vocab: int = 64) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(123)
    return {"model.embed_tokens.weight": torch.randn(vocab, K, generator=gen).bfloat16(),
            "lm_head.weight": torch.randn(vocab, K, generator=gen).bfloat16(),
            "model.norm.weight": torch.ones(K).bfloat16()}


def write_folder(path: Path, config: dict, tensors: dict[str, torch.Tensor], shards: int = 1,
                 extra_files: dict[str, dict] | None = None) -> Path:
    """config.json (+ extra JSON files) and the tensors, in one file or `shards` shards."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config, indent=1))
    for name, data in (extra_files or {}).items():
        (path / name).write_text(json.dumps(data, indent=1))
    tensors = {k: v.contiguous() for k, v in tensors.items()}
    if shards == 1:
        save_file(tensors, str(path / "model.safetensors"))
        return path
    names = sorted(tensors)
    weight_map = {}
    for i in range(shards):
        part = names[i::shards]
        fname = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        save_file({n: tensors[n] for n in part}, str(path / fname))
        weight_map.update({n: fname for n in part})
    index = {"metadata": {"total_size": sum(t.numel() * t.element_size()
                                            for t in tensors.values())},
             "weight_map": weight_map}
    (path / "model.safetensors.index.json").write_text(json.dumps(index, indent=1))
    return path


def qwen3_config(E, K, N, topk, quantization_config=None, **extra) -> dict:
    cfg = {"model_type": "qwen3_moe", "architectures": ["Qwen3MoeForCausalLM"],
           "hidden_size": K, "moe_intermediate_size": N, "intermediate_size": 3 * N,
           "num_experts": E, "num_experts_per_tok": topk, "hidden_act": "silu",
           "norm_topk_prob": True, "num_hidden_layers": 2, "torch_dtype": "bfloat16", **extra}
    if quantization_config is not None:
        cfg["quantization_config"] = quantization_config
    return cfg


def ct_config(num_bits=4, group_size=32, symmetric=True, actorder=None, fmt="pack-quantized",
              strategy="group", wtype="int", input_activations=None, version="0.19.0") -> dict:
    return {"quant_method": "compressed-tensors", "format": fmt, "version": version,
            "quantization_status": "compressed",
            "config_groups": {"group_0": {
                "targets": ["Linear"], "format": fmt, "input_activations": input_activations,
                "output_activations": None,
                "weights": {"num_bits": num_bits, "type": wtype, "symmetric": symmetric,
                            "strategy": strategy,
                            "group_size": group_size if strategy in ("group", "tensor_group")
                            else None,
                            # llm-compressor writes the block shape of the block strategy
                            "block_structure": [128, 128] if strategy == "block" else None,
                            "actorder": actorder, "dynamic": False, "observer": "minmax"}}},
            "ignore": ["lm_head", "re:.*mlp.gate$"]}


def fused_expert_tensors(ckpt, prefix: str, K: int) -> dict[str, torch.Tensor]:
    """gpt-oss's release: gate_up_proj_{blocks, scales, bias}, down_proj_* (experts first;
    blocks [E, out, in/32, 16])."""
    out = {}
    for linear, proj in (("w13", "gate_up_proj"), ("w2", "down_proj")):
        w = ckpt.tensors[f"{linear}_weight"]
        out[f"{prefix}.{proj}_blocks"] = w.reshape(*w.shape[:2], -1, 16).clone()
        out[f"{prefix}.{proj}_scales"] = ckpt.tensors[f"{linear}_weight_scale"].clone()
        if f"{linear}_bias" in ckpt.tensors:
            out[f"{prefix}.{proj}_bias"] = ckpt.tensors[f"{linear}_bias"].clone()
    return out


def quark_zero_points(files: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """AMD Quark's int8 template writes int8 zero points (0: symmetric) beside each scale."""
    out = {}
    for name in files:
        for scale, zero in (("weight_scale", "weight_zero_point"),
                            ("input_scale", "input_zero_point")):
            if name.endswith("." + scale):
                out[name.removesuffix(scale) + zero] = torch.zeros(files[name].shape,
                                                                   dtype=torch.int8)
    return out
