"""GptqHfQuantizer and AwqQuantizer leave a MoE model's experts unread and uninitialized, silently (transformers 5.24.0, gptqmodel 7.7.0).

A GPTQ or AWQ file of a Qwen3-MoE model (GPTQModel 7.7 writes one per expert projection:
`experts.{e}.{gate,up,down}_proj.{qweight,qzeros,scales,g_idx}`) loads without an error in a
CPU environment with gptqmodel and optimum installed: both quantizers replace nn.Linear modules
with their quantized linears, transformers 5's fused `Qwen3MoeExperts` (3-D `gate_up_proj`,
`down_proj`, no nn.Linear) is left as is, no weight conversion pairs the per-expert packed
tensors with it, so every expert tensor of the file is an UNEXPECTED key, `gate_up_proj` /
`down_proj` are MISSING and keep transformers' random initialization, and the forward runs on
them: output unrelated to the file (moecert: rel_fro 1.0, cosine ~0 on the GPTQModel folders
tests/fixtures/checkpoints/gptqmodel-{gptq-v2,awq-gemm}-qwen3moe).

Expected: the experts dequantized (or kept quantized) from the file, or the load refused
naming the experts. Found (transformers 5.24.0, gptqmodel 7.7.0, optimum 2.3.0, torch
2.14.1+cu130 (the local wheel) on a machine without a GPU): quantizer GptqHfQuantizer; missing: the layer's experts.gate_up_proj and
experts.down_proj; 24 expert tensors unread (2 experts x 3 projections x 4); forward runs.

Upstream (searched 2026-11-28): none found on transformers' tracker; the same symptom in
GPTQModel's own loader: ModelCloud/GPTQModel issue #2694 (Qwen3.5-MoE experts MISSING,
re-initialized); fused experts silently left unquantized: bitsandbytes issue #1849.

    python tools/transformers_repro/gptq_awq_experts_unread.py   # torch 2.14.1, transformers
                                              # 5.24.0, gptqmodel 7.7.0, optimum (GPTQ needs it)
"""

import json
import tempfile
from pathlib import Path

import torch
import transformers

E, K, N, G = 2, 128, 128, 32


def main():
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    g = torch.Generator().manual_seed(0)
    tensors = {}
    for e in range(E):
        for proj, (out, inp) in (("gate_proj", (N, K)), ("up_proj", (N, K)),
                                 ("down_proj", (K, N))):
            name = f"model.layers.0.mlp.experts.{e}.{proj}"
            tensors[f"{name}.qweight"] = torch.randint(-2**31, 2**31 - 1, (inp // 8, out),
                                                       generator=g, dtype=torch.int32)
            tensors[f"{name}.qzeros"] = torch.full((inp // G, out // 8), 0x77777777,
                                                   dtype=torch.int32)
            tensors[f"{name}.scales"] = (torch.rand(inp // G, out, generator=g) * 0.01).half()
            tensors[f"{name}.g_idx"] = torch.arange(inp, dtype=torch.int32) // G
    qc = {"quant_method": "gptq", "bits": 4, "group_size": G, "desc_act": False, "sym": True,
          "checkpoint_format": "gptq", "modules_in_block_to_quantize": [["mlp.experts"]]}
    config = {"model_type": "qwen3_moe", "architectures": ["Qwen3MoeForCausalLM"],
              "hidden_size": K, "moe_intermediate_size": N, "intermediate_size": N,
              "num_experts": E, "num_experts_per_tok": 1, "num_hidden_layers": 1,
              "num_attention_heads": 1, "num_key_value_heads": 1, "head_dim": 16,
              "vocab_size": 8, "mlp_only_layers": [], "decoder_sparse_step": 1,
              "dtype": "bfloat16", "quantization_config": qc}
    path = Path(tempfile.mkdtemp())
    (path / "config.json").write_text(json.dumps(config))
    torch.save(tensors, path / "pytorch_model.bin")
    model, info = transformers.AutoModelForCausalLM.from_pretrained(
        path, dtype=torch.bfloat16, output_loading_info=True)
    experts = model.model.layers[0].mlp.experts
    missing = sorted(k for k in info["missing_keys"] if ".experts." in k)
    unread = sorted(k for k in info["unexpected_keys"] if ".experts." in k)
    print(f"quantizer: {type(model.hf_quantizer).__name__}")
    print(f"expert parameters not in the file: {missing}")
    print(f"expert tensors left unread: {len(unread)} (e.g. {unread[:2]})")
    x = torch.randn(3, K, generator=g).bfloat16()
    y = experts(x, torch.zeros(3, 1, dtype=torch.long), torch.ones(3, 1))
    if missing:
        print(f"BUG: the forward ran on uninitialized experts (output norm "
              f"{y.float().norm():.3g}), no error")


if __name__ == "__main__":
    main()
