"""FineGrainedFP8 leaves a per-tensor fp8 file's scales unread and runs the raw e4m3 codes (transformers 5.24.0).

A `quant_method: "fp8"` file without `weight_block_size` (the per-tensor layout of vLLM's
fp8 and AutoFP8: e4m3 `weight`, a scalar `weight_scale` and, with static activations,
`input_scale` per projection) loads without an error: `FineGrainedFP8HfQuantizer` pairs
weights only with `weight_scale_inv` (its `update_weight_conversions` renames `.scale` and
`.qscale_weight`, quantizers/quantizer_finegrained_fp8.py lines 182-194; `serialized_names`
line 175), so `weight_scale` / `input_scale` are UNEXPECTED keys of the load report, the
fused experts keep the file's e4m3 codes unscaled, and the first forward raises.

Expected: the experts dequantized with their scales (as for weight_scale_inv), or the load
refused naming the tensors. Found (transformers 5.24.0, torch 2.13.0+cpu): experts
gate_up_proj dtype float8_e4m3fn; forward: RuntimeError "expected m1 and m2 to have the same
dtype, but got: c10::BFloat16 != c10::Float8_e4m3fn" (eager), "Expected mat_a to be Float32,
BFloat16 or Float16 matrix, got Float8_e4m3fn" (grouped_mm).

    python tools/transformers_repro/fp8_tensor_scale_unread.py     # torch and transformers only
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


def main():
    header()
    g = torch.Generator().manual_seed(0)
    tensors = {}
    for e in range(E):
        for proj, shape in (("gate_proj", (N, K)), ("up_proj", (N, K)), ("down_proj", (K, N))):
            name = f"model.layers.0.mlp.experts.{e}.{proj}"
            tensors[f"{name}.weight"] = torch.randn(*shape, generator=g).to(torch.float8_e4m3fn)
            tensors[f"{name}.weight_scale"] = torch.tensor(0.01 + e * 0.001)
            tensors[f"{name}.input_scale"] = torch.tensor(0.02)
    qc = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "static",
          "modules_to_not_convert": ["lm_head", "self_attn", "mlp.gate"]}
    model, info = transformers.AutoModelForCausalLM.from_pretrained(
        folder(qc, tensors), dtype=torch.bfloat16, output_loading_info=True)
    experts = model.model.layers[0].mlp.experts
    unread = sorted(k for k in info["unexpected_keys"] if ".experts." in k)
    print(f"expert tensors left unread: {len(unread)} (e.g. {unread[:2]})")
    print(f"experts' gate_up_proj dtype: {experts.gate_up_proj.dtype}")
    x = torch.randn(3, K, generator=g).bfloat16()
    try:
        experts(x, torch.zeros(3, 1, dtype=torch.long), torch.ones(3, 1))
        print("forward ran")
    except RuntimeError as e:
        print(f"BUG: forward raised RuntimeError: {e}")


if __name__ == "__main__":
    main()
