"""compressed-tensors asymmetric pack-quantized MoE experts (W4A16_ASYM) fail to load: the zero points never reach the decompressor (transformers 5.24.0).

llm-compressor's asymmetric W4A16 stores per expert projection `weight_packed`,
`weight_scale`, `weight_zero_point` (packed int32) and `weight_shape`. transformers 5.24
collects `weight_zero_point` among the serialized names (quantizers/quantizer_compressed_
tensors.py line 163) but `CompressedTensorsDequantize.convert`'s `DummyModule`
(integrations/compressed_tensors.py lines 128-134) holds only weight_packed, weight_scale and
weight_shape, so compressed-tensors' decompressor asserts.

Expected: the experts decompressed with their zero points. Found (transformers 5.24.0,
compressed-tensors 0.20.0, torch 2.13.0+cpu): from_pretrained raises; load report:
AssertionError "Asymmetric quant requires zero-point values". The same with the
llm-compressor fixtures ct-w4a16-asym-qwen3moe and ct-w4a16-asym-deepseekv3-sharded.
Upstream: huggingface/transformers PR #47430 (open, "fix(compressed_tensors): collect
zero_point for asymmetric MoE expert decompression").

    python tools/transformers_repro/ct_experts_asym.py     # torch and transformers only
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
    G = 32
    tensors = {}
    for e in range(E):
        for proj, (o, i) in (("gate_proj", (N, K)), ("up_proj", (N, K)), ("down_proj", (K, N))):
            name = f"model.layers.0.mlp.experts.{e}.{proj}"
            tensors[f"{name}.weight_packed"] = torch.randint(-2**31, 2**31 - 1, (o, i // 8),
                                                             generator=g, dtype=torch.int32)
            tensors[f"{name}.weight_scale"] = ((torch.rand(o, i // G, generator=g) + 0.5)
                                               / 100).bfloat16()
            tensors[f"{name}.weight_zero_point"] = torch.randint(
                -2**31, 2**31 - 1, (o // 8, i // G), generator=g, dtype=torch.int32)
            tensors[f"{name}.weight_shape"] = torch.tensor([o, i])
    weights = {"num_bits": 4, "type": "int", "symmetric": False, "strategy": "group",
               "group_size": G, "dynamic": False}
    try:
        load(folder(ct_config("pack-quantized", weights), tensors))
        print("loaded")
    except (RuntimeError, AssertionError) as e:
        print(f"BUG: from_pretrained raised: {str(e)[:110]}")


if __name__ == "__main__":
    main()
