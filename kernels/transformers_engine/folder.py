"""A synthesized case's checkpoint as a model folder in its producer's layout: what
transformers' `from_pretrained` reads (a Qwen3-MoE model of one decoder layer whose experts are
the case's).

The quantization_config and the per-expert tensor names are the producers' table that the vLLM
adapter reads too (kernels/vllm_checkpoint.py VARIANT_CONFIGS): one table of what each
producer's file holds, whichever engine reads the file. Only the layer's experts are written;
transformers initializes the model's other weights (attention, norms, embeddings, router) as
for any missing weight, and the adapter never runs them. Slicing and naming only: every
number reaches transformers as the checkpoint stores it. No transformers import.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from ..quant_config import QuantConfig
from ..vllm_checkpoint import expert_tensors, quantization_config

# the experts' prefix in a Qwen3-MoE checkpoint (transformers' per-expert names, which its
# conversion mapping fuses into `gate_up_proj` / `down_proj` at load)
PREFIX = "model.layers.0.mlp.experts"
DTYPES = {torch.bfloat16: "bfloat16", torch.float16: "float16"}
# moecert activation -> Qwen3-MoE's `hidden_act` (transformers' ACT2FN: "gelu" is exact erf)
HIDDEN_ACT = {"silu": "silu", "gelu": "gelu"}


def model_config(quant: QuantConfig, problem) -> dict:
    """config.json of a one-layer Qwen3-MoE model of the case's shape with the producer's
    quantization_config (absent for unquantized checkpoints)."""
    cfg = {"model_type": "qwen3_moe", "architectures": ["Qwen3MoeForCausalLM"],
           "hidden_size": problem.K, "moe_intermediate_size": problem.N,
           "intermediate_size": problem.N, "num_experts": problem.E,
           "num_experts_per_tok": problem.topk, "hidden_act": HIDDEN_ACT[problem.activation],
           "norm_topk_prob": True, "num_hidden_layers": 1, "decoder_sparse_step": 1,
           "mlp_only_layers": [], "num_attention_heads": 1, "num_key_value_heads": 1,
           "head_dim": 16, "vocab_size": 8, "max_position_embeddings": 64,
           "tie_word_embeddings": False, "dtype": DTYPES[problem.torch_dtype]}
    qc = quantization_config(quant)
    if qc is not None:
        cfg["quantization_config"] = _experts_only(qc)
    return cfg


# The model's other modules (attention, router, lm_head) are left unquantized, as the
# producers' own exclusion lists leave modules out (llm-compressor `ignore`, FineGrainedFP8
# `modules_to_not_convert`, Quark `exclude`): the folder holds no tensors for them, and
# transformers initializes them in the model's dtype instead of as quantized parameters it
# would have to draw random codes for.
NOT_EXPERTS = ("lm_head", "self_attn", "mlp.gate")
_EXCLUSION_KEYS = {"compressed-tensors": ("ignore", lambda m: f"re:.*{m.replace('.', '[.]')}.*"
                                          if m != "mlp.gate" else "re:.*mlp[.]gate$"),
                   "fp8": ("modules_to_not_convert", lambda m: m),
                   "quark": ("exclude", lambda m: f"*{m}*")}


def _experts_only(qc: dict) -> dict:
    qc = dict(qc)
    key = _EXCLUSION_KEYS.get(qc.get("quant_method"))
    if key is not None:
        name, pattern = key
        qc[name] = [*qc.get(name, []), *(pattern(m) for m in NOT_EXPERTS)]
    return qc


def write(path: Path, quant: QuantConfig, tensors: dict[str, torch.Tensor], problem) -> Path:
    """config.json and model.safetensors of the case's checkpoint under `path`."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(model_config(quant, problem), indent=1))
    files = {f"{PREFIX}.{name}": _file_tensor(t)
             for name, t in expert_tensors(quant, tensors, problem.N)}
    save_file(files, str(path / "model.safetensors"))
    return path


def _file_tensor(t: torch.Tensor) -> torch.Tensor:
    # safetensors writes a tensor of its own storage: a slice of a stacked checkpoint tensor
    # is copied, never aliased (the checkpoint is not modified)
    return t.detach().to("cpu").contiguous().clone()


__all__ = ["HIDDEN_ACT", "PREFIX", "model_config", "write"]
