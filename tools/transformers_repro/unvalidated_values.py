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

import torch
from _folder import E, K, N, folder, header, load


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
