"""transformers loads checkpoint values the formats reject and computes with them (transformers 5.24.0).

A NaN or infinite bf16 expert weight, a NaN / zero / negative weight scale (compressed-tensors
W4A16, FineGrainedFP8 weight_scale_inv), an e4m3 NaN code: from_pretrained loads each without
a word (no loader or quantizer checks values; compressed-tensors' decompression and
Fp8Dequantize multiply them in), and the experts compute NaN or wrong outputs. An error
naming the tensor is what moecert's `malformed` check expects of a backend; transformers,
like vLLM (tools/vllm_repro/unvalidated_values.md), has no such check.

Expected: a refusal naming the tensor. Found (transformers 5.24.0, compressed-tensors 0.20.0,
torch 2.13.0+cpu): each row below loads; the output has NaN or its values follow the bad
value.

    python tools/transformers_repro/unvalidated_values.py     # torch and transformers only
                                              # (+ compressed-tensors, which transformers'
                                              #  compressed-tensors quantizer needs)
"""

import json
import tempfile
from pathlib import Path

import torch
import transformers

E, K, N = 2, 256, 128


def folder(quantization_config: dict, tensors: dict, architecture="Qwen3MoeForCausalLM",
           model_type="qwen3_moe") -> Path:
    """A one-layer MoE model folder holding only the layer's expert tensors (the model's
    other modules excluded from quantization, initialized by transformers)."""
    config = {"model_type": model_type, "architectures": [architecture], "hidden_size": K,
              "moe_intermediate_size": N, "intermediate_size": N, "num_experts": E,
              "num_local_experts": E, "num_experts_per_tok": 1, "num_hidden_layers": 1,
              "num_attention_heads": 1, "num_key_value_heads": 1, "head_dim": 16,
              "vocab_size": 8, "mlp_only_layers": [], "decoder_sparse_step": 1,
              "dtype": "bfloat16", "quantization_config": quantization_config}
    path = Path(tempfile.mkdtemp())
    (path / "config.json").write_text(json.dumps(config))
    torch.save(tensors, path / "pytorch_model.bin")
    return path


def ct_config(fmt: str, weights: dict, inputs: dict | None = None) -> dict:
    """llm-compressor's quantization_config (one group, Linear targets)."""
    return {"quant_method": "compressed-tensors", "format": fmt,
            "quantization_status": "compressed",
            "config_groups": {"group_0": {"targets": ["Linear"], "format": fmt,
                                          "weights": weights, "input_activations": inputs}},
            "ignore": ["lm_head", "re:.*self_attn.*", "re:.*mlp[.]gate$"]}


def load(path: Path):
    return transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16)


def header():
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")


def experts_output(qc, tensors):
    model = load(folder(qc, tensors))
    x = torch.randn(4, K, generator=torch.Generator().manual_seed(1)).bfloat16()
    y = model.model.layers[0].mlp.experts(x, torch.zeros(4, 1, dtype=torch.long), torch.ones(4, 1))
    return f"loaded; output NaN: {bool(y.isnan().any())}, amax {y.float().abs().max():.3g}"


def main():
    header()
    g = torch.Generator().manual_seed(0)
    # bf16 weights with a NaN
    t = {}
    for e in range(E):
        for proj, (o, i) in (("gate_proj", (N, K)), ("up_proj", (N, K)), ("down_proj", (K, N))):
            t[f"model.layers.0.mlp.experts.{e}.{proj}.weight"] = torch.randn(o, i, generator=g).bfloat16()
    t["model.layers.0.mlp.experts.0.gate_proj.weight"][0, 0] = float("nan")
    print("bf16 NaN weight:", experts_output(None, t))
    # FineGrainedFP8 with a NaN, a zero and a negative block scale
    for bad in (float("nan"), 0.0, -1.0):
        t = {}
        for e in range(E):
            for proj, (o, i) in (("gate_proj", (N, K)), ("up_proj", (N, K)), ("down_proj", (K, N))):
                name = f"model.layers.0.mlp.experts.{e}.{proj}"
                t[f"{name}.weight"] = torch.randn(o, i, generator=g).to(torch.float8_e4m3fn)
                t[f"{name}.weight_scale_inv"] = torch.full((-(-o // 128), -(-i // 128)), 0.01)
        t["model.layers.0.mlp.experts.0.gate_proj.weight_scale_inv"][0, 0] = bad
        qc = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
              "weight_block_size": [128, 128],
              "modules_to_not_convert": ["lm_head", "self_attn", "mlp.gate"]}
        print(f"fp8 block scale {bad}:", experts_output(qc, t))


if __name__ == "__main__":
    main()
