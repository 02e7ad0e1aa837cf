"""A synthesized case's checkpoint as a model folder in its producer's layout: what
transformers' `from_pretrained` reads (a model of one decoder layer whose experts are the
case's): a Qwen3-MoE model (per-expert tensors) for silu / gelu, a gpt-oss model (the
release's fused expert tensors with their biases) for swigluoai.

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

from ..quant_config import Variant
from ..vllm_checkpoint import expert_tensors, quantization_config

# the experts' prefix in a Qwen3-MoE checkpoint (transformers' per-expert names, which its
# conversion mapping fuses into `gate_up_proj` / `down_proj` at load)
PREFIX = "model.layers.0.mlp.experts"
DTYPES = {torch.bfloat16: "bfloat16", torch.float16: "float16"}
# moecert activation -> Qwen3-MoE's `hidden_act` (transformers' ACT2FN: "gelu" is exact erf)
HIDDEN_ACT = {"silu": "silu", "gelu": "gelu"}


# gpt-oss: the model whose experts compute swigluoai (gate/up rows interleaved, biases on both
# linears); the formats its release and transformers' conversion write (MXFP4 blocks, bf16)
GPT_OSS_ACTIVATION = "swigluoai"
GPT_OSS_METHODS = ("mxfp4",)  # the quant_method of the release's file
# the release's exclusion list (openai/gpt-oss-*: attention, router, embeddings, lm_head)
GPT_OSS_NOT_CONVERTED = ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                         "model.embed_tokens", "lm_head"]


def is_gpt_oss(problem) -> bool:
    return problem.activation == GPT_OSS_ACTIVATION


def gpt_oss_format(qc: dict | None) -> bool:
    """Whether a file of this quantization_config (None: unquantized) has a gpt-oss layout:
    the release's MXFP4 or transformers' 16-bit fused experts (a producer's table row says
    which file a variant is, kernels/vllm_checkpoint.py)."""
    return qc is None or qc.get("quant_method") in GPT_OSS_METHODS


def model_config(quant: Variant, problem) -> dict:
    """config.json of a one-layer model of the case's shape (gpt-oss for swigluoai, else
    Qwen3-MoE) with the producer's quantization_config (absent for unquantized checkpoints)."""
    if is_gpt_oss(problem):
        return _gpt_oss_config(quant, problem)
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
                   # transformers >= 5 matches a name from the start of the module path, as
                   # a regex, or as its suffix (`should_convert_module`): "self_attn" alone
                   # no longer covers model.layers.0.self_attn.q_proj
                   "fp8": ("modules_to_not_convert",
                           lambda m: m if m == "lm_head" else f"model.layers.*.{m}"),
                   "quark": ("exclude", lambda m: f"*{m}*")}


def _gpt_oss_config(quant: Variant, problem) -> dict:
    cfg = {"model_type": "gpt_oss", "architectures": ["GptOssForCausalLM"],
           "hidden_size": problem.K, "intermediate_size": problem.N,
           "num_local_experts": problem.E, "num_experts_per_tok": problem.topk,
           "num_hidden_layers": 1, "layer_types": ["full_attention"],
           "num_attention_heads": 1, "num_key_value_heads": 1, "head_dim": 16,
           "vocab_size": 8, "max_position_embeddings": 64, "tie_word_embeddings": False,
           "dtype": DTYPES[problem.torch_dtype]}
    qc = quantization_config(quant)
    if qc is not None:
        cfg["quantization_config"] = {**qc, "modules_to_not_convert": GPT_OSS_NOT_CONVERTED}
    return cfg


def _experts_only(qc: dict) -> dict:
    qc = dict(qc)
    key = _EXCLUSION_KEYS.get(qc.get("quant_method"))
    if key is not None:
        name, pattern = key
        qc[name] = [*qc.get(name, []), *(pattern(m) for m in NOT_EXPERTS)]
    return qc


def write(path: Path, quant: Variant, tensors: dict[str, torch.Tensor], problem) -> Path:
    """config.json and model.safetensors of the case's checkpoint under `path`."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(model_config(quant, problem), indent=1))
    named = gpt_oss_tensors(quant, tensors, problem) if is_gpt_oss(problem) else \
        expert_tensors(quant, tensors, problem.N)
    files = {f"{PREFIX}.{name}": _file_tensor(t) for name, t in named}
    save_file(files, str(path / "model.safetensors"))
    return path


def gpt_oss_tensors(quant: Variant, tensors: dict[str, torch.Tensor], problem):
    """(name, tensor) of the experts as a gpt-oss folder holds them: the release's MXFP4
    `{gate_up,down}_proj_blocks` [E, out, in/32, 16] (two E2M1 codes a byte, as moecert's
    packed rows) and `_scales` [E, out, in/32] (E8M0), or transformers' bf16 layout
    `{gate_up,down}_proj` [E, in, out]; `_bias` [E, out]. Rows keep moecert's w13 order, which
    for swigluoai is gpt-oss's (gate row 2j, up row 2j+1)."""
    for linear, proj in (("w13", "gate_up_proj"), ("w2", "down_proj")):
        w = tensors[f"{linear}_weight"]
        scales = tensors.get(f"{linear}_weight_scale")
        if scales is not None:  # the release's MXFP4 blocks
            yield f"{proj}_blocks", w.reshape(*scales.shape, -1)
            yield f"{proj}_scales", scales
        else:
            yield proj, w.transpose(1, 2)
        yield f"{proj}_bias", tensors[f"{linear}_bias"]


def _file_tensor(t: torch.Tensor) -> torch.Tensor:
    # safetensors writes a tensor of its own storage: a slice of a stacked checkpoint tensor
    # is copied, never aliased (the checkpoint is not modified)
    return t.detach().to("cpu").contiguous().clone()


__all__ = ["GPT_OSS_METHODS", "HIDDEN_ACT", "PREFIX", "gpt_oss_format", "gpt_oss_tensors",
           "is_gpt_oss", "model_config", "write"]
