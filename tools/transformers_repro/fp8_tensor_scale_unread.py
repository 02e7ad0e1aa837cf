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

import torch
import transformers
from _folder import E, K, N, folder, header


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
