"""vLLM 0.32 CPUExpertsInt4 ("CPU INT4 W4A16") quantizes activations to int8 per token: its
apply calls fused_experts_cpu with CPUQuantMethod.INT4_W4A8. A symmetric GPTQ int4 (W4A16)
checkpoint then comes out as W4A8. Its loader also keeps fp16 checkpoint scales as bf16
(params_dtype). vLLM and torch only; the float64 references use the same packed tensors."""
import torch
from _layer import GPTQ4, gptq_int4, int8_per_token, layer, process, reference, rel, routing, run

w, dense = gptq_int4()
r = layer(GPTQ4, w)
process(r)
print("vLLM chose", r.routed_experts.quant_method.experts_cls.__name__)
x, wt, ids = routing(17)
y = run(r, x, wt, ids)
w4a16 = reference(dense, x, wt, ids)
w4a8 = reference(dense, x, wt, ids, int8_per_token)
print(f"rel_fro vLLM vs W4A16 reference (the checkpoint's scheme): {rel(y, w4a16):.2e}")
print(f"rel_fro vLLM vs W4A8 reference (int8 per token):          {rel(y, w4a8):.2e}")
print(f"rel_fro W4A8 vs W4A16 reference (what int8 costs):        {rel(w4a8, w4a16):.2e}")
print(f"rel_fro bf16(W4A16) vs W4A16 (bf16 output rounding):      "
      f"{rel(w4a16.to(torch.bfloat16), w4a16):.2e}")
w16 = {k: (v.to(torch.float16) if k.endswith("scales") else v) for k, v in w.items()}
r = layer(GPTQ4, w16)
print("fp16 checkpoint scales stored as", r.routed_experts.w13_scales.dtype)
