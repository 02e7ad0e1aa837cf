"""compressed-tensors int-quantized MoE experts (W8A8 int8, W4AFP8, int8 W8A16) fail to load (transformers 5.24.0).

llm-compressor's `int-quantized` format stores each expert projection's integer codes one per
int8 byte under `weight` (with `weight_scale`). transformers' `CompressedTensorsDequantize.
convert` (integrations/compressed_tensors.py) handles MoE experts only as 8-bit float
(weight, scale) pairs (line 99) or as packed `weight_packed` tensors (line 144: `if
"weight_packed" not in key: continue`): an int8 `weight` matches neither, nothing is
returned, and the merge of the experts concatenates an empty list.

Expected: the experts dequantized (codes times scales). Found (transformers 5.24.0,
compressed-tensors 0.20.0, torch 2.13.0+cpu): from_pretrained raises "We encountered some
issues during automatic conversion of the weights"; the load report: "Error: Concatenate on
tensors destined for model.layers.0.mlp.experts.gate_up_proj. Ckpt contains: 0" (ValueError
torch.cat(): expected a non-empty list of Tensors). The same with the llm-compressor
fixtures tests/fixtures/checkpoints/ct-w8a8-int8-qwen3moe and ct-w4afp8-qwen3moe.

    python tools/transformers_repro/ct_experts_int_quantized.py     # torch and transformers only
                                              # (+ compressed-tensors, which transformers'
                                              #  compressed-tensors quantizer needs)
"""

import torch
from _folder import E, K, N, ct_config, folder, header, load


def main():
    header()
    g = torch.Generator().manual_seed(0)
    tensors = {}
    for e in range(E):
        for proj, (o, i) in (("gate_proj", (N, K)), ("up_proj", (N, K)), ("down_proj", (K, N))):
            name = f"model.layers.0.mlp.experts.{e}.{proj}"
            tensors[f"{name}.weight"] = torch.randint(-127, 128, (o, i), generator=g,
                                                      dtype=torch.int8)
            tensors[f"{name}.weight_scale"] = (torch.rand(o, 1, generator=g) + 0.5) / 100
    weights = {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "channel",
               "dynamic": False}
    inputs = {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "token",
              "dynamic": True}
    try:
        load(folder(ct_config("int-quantized", weights, inputs), tensors))
        print("loaded")
    except RuntimeError as e:
        print(f"BUG: from_pretrained raised: {str(e)[:110]}")


if __name__ == "__main__":
    main()
