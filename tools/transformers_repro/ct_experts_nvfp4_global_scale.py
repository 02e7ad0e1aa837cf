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

import torch
from _folder import E, K, N, ct_config, folder, header, load

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
