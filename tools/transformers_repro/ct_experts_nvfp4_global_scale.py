"""compressed-tensors NVFP4 MoE experts are decompressed without their weight_global_scale, silently (transformers 5.24.0).

llm-compressor's NVFP4 stores per expert projection `weight_packed` (two e2m1 codes per
byte), `weight_scale` (e4m3, one per 16 inputs) and `weight_global_scale` (a float32 divisor:
W = code * weight_scale / weight_global_scale). transformers 5.24 collects the global scale
among the serialized names but `CompressedTensorsDequantize.convert`'s `DummyModule`
(integrations/compressed_tensors.py lines 128-134) does not carry it, so the decompressor
runs without it: every expert comes back multiplied by its global scale. No error; the fused
parameters are filled, so nothing is missing in the load report.

Expected: gate_up_proj = code * scale / global_scale. Found (transformers 5.24.0,
compressed-tensors 0.20.0, torch 2.13.0+cpu): gate_up_proj / expected = the global scale
(printed below); moecert: rel_fro ~1e11..1e12 on synthesized cases and on the llm-compressor
fixture ct-nvfp4-qwen3moe. Upstream: huggingface/transformers issue #48371 and PR #48372
(both open, "NVFP4 MoE experts are dequantized without weight_global_scale, silently").

    python tools/transformers_repro/ct_experts_nvfp4_global_scale.py     # torch and transformers only
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

E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)


def main():
    header()
    g = torch.Generator().manual_seed(0)
    G, GLOBAL = 16, 2000.0
    tensors, expected = {}, None
    for e in range(E):
        for proj, (o, i) in (("gate_proj", (N, K)), ("up_proj", (N, K)), ("down_proj", (K, N))):
            name = f"model.layers.0.mlp.experts.{e}.{proj}"
            codes = torch.randint(0, 16, (o, i), generator=g, dtype=torch.uint8)
            scale = (torch.rand(o, i // G, generator=g) * 4 + 1).to(torch.float8_e4m3fn)
            tensors[f"{name}.weight_packed"] = codes[:, 0::2] | (codes[:, 1::2] << 4)
            tensors[f"{name}.weight_scale"] = scale
            tensors[f"{name}.weight_global_scale"] = torch.tensor([GLOBAL])
            if (e, proj) == (0, "gate_proj"):
                values = torch.tensor(E2M1, dtype=torch.float64)[codes.long()]
                expected = values * scale.double().repeat_interleave(G, 1) / GLOBAL
    args = {"num_bits": 4, "type": "float", "symmetric": True, "strategy": "tensor_group",
            "group_size": G, "dynamic": False}
    model = load(folder(ct_config("nvfp4-pack-quantized", args), tensors))
    got = model.model.layers[0].mlp.experts.gate_up_proj[0, :N].double()
    nz = expected != 0
    ratio = (got[nz] / expected[nz]).median().item()
    print(f"loaded gate_up_proj / expected: median {ratio:.4g} (weight_global_scale {GLOBAL})")
    print("BUG: experts not divided by weight_global_scale" if abs(ratio - 1) > 0.05
          else "ok")


if __name__ == "__main__":
    main()
