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

import torch
from _folder import E, K, N, ct_config, folder, header, load


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
