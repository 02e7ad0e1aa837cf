"""compressed-tensors FP8_BLOCK (and MXFP8) MoE experts fail to load: the experts' fp8 path multiplies each weight by its scale tensor as is (transformers 5.24.0).

llm-compressor's FP8_BLOCK scheme stores each expert projection as e4m3 `weight` [out, in]
and `weight_scale` [out/128, in/128] (strategy "block", block_structure [128, 128]); its
MXFP8 scheme stores `weight_scale` [out, in/32] as E8M0 bytes. transformers'
`CompressedTensorsDequantize.convert` (integrations/compressed_tensors.py lines 99-120)
takes every 8-bit float expert as a (weight, scale) pair and computes
`quant.float() * scale.float()` with plain broadcasting: right for per-tensor and
per-channel scales, a shape error for block and group scales (and, for MXFP8, the E8M0 bytes
would be read as integers).

Expected: the experts dequantized block by block (group by group, 2^(e-127) for E8M0).
Found (transformers 5.24.0, compressed-tensors 0.20.0, torch 2.13.0+cpu): from_pretrained
raises "We encountered some issues during automatic conversion of the weights", the load
report: RuntimeError "The size of tensor a (256) must match the size of tensor b (2) at
non-singleton dimension 1" (FP8_BLOCK) / "(128) must match ... (4)" (MXFP8). The same with
the llm-compressor fixtures tests/fixtures/checkpoints/ct-fp8-block-qwen3moe and
ct-mxfp8-qwen3moe.

    python tools/transformers_repro/ct_experts_fp8_block.py     # torch and transformers only
                                              # (+ compressed-tensors, which transformers'
                                              #  compressed-tensors quantizer needs)
"""

import torch
from _folder import E, K, N, ct_config, folder, header, load


def main():
    header()
    g = torch.Generator().manual_seed(0)
    for label, fmt, weights, scale_shape, scale_dtype in (
            ("FP8_BLOCK", "float-quantized",
             {"num_bits": 8, "type": "float", "symmetric": True, "strategy": "block",
              "block_structure": [128, 128], "dynamic": False}, (128, 128), torch.float32),
            ("MXFP8", "mxfp8-quantized",
             {"num_bits": 8, "type": "float", "symmetric": True, "strategy": "group",
              "group_size": 32, "scale_dtype": "torch.uint8", "dynamic": False}, (1, 32),
             torch.uint8)):
        tensors = {}
        for e in range(E):
            for proj, (o, i) in (("gate_proj", (N, K)), ("up_proj", (N, K)),
                                 ("down_proj", (K, N))):
                name = f"model.layers.0.mlp.experts.{e}.{proj}"
                tensors[f"{name}.weight"] = torch.randn(o, i, generator=g).to(torch.float8_e4m3fn)
                shape = (-(-o // scale_shape[0]), i // scale_shape[1])
                s = (torch.rand(*shape, generator=g) + 0.5) / 100
                tensors[f"{name}.weight_scale"] = s if scale_dtype == torch.float32 else \
                    torch.randint(120, 130, shape, generator=g, dtype=torch.uint8)
        try:
            load(folder(ct_config(fmt, weights), tensors))
            print(f"{label}: loaded")
        except RuntimeError as e:
            print(f"BUG: {label}: from_pretrained raised: {str(e)[:110]}")


if __name__ == "__main__":
    main()
