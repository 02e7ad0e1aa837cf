"""vLLM 0.32 CPUExpertsInt4.apply passes None for w1_bias and w2_bias to fused_experts_cpu:
the loaded expert biases are silently dropped. vLLM and torch only; the float64 references
use the same packed tensors (and int8 per-token activations, as the kernel computes W4A8:
see int4_w4a8.py)."""
from _layer import GPTQ4, gptq_int4, int8_per_token, layer, process, reference, rel, routing, run

w, dense = gptq_int4(bias=True)
r = layer(GPTQ4, w, bias=True)
process(r)
print("biases loaded: w13_bias amax", float(r.routed_experts.w13_bias.abs().max()),
      "w2_bias amax", float(r.routed_experts.w2_bias.abs().max()))
x, wt, ids = routing(17)
y = run(r, x, wt, ids)
with_b = reference(dense, x, wt, ids, int8_per_token, bias=True)
without = reference(dense, x, wt, ids, int8_per_token)
print(f"rel_fro vLLM vs reference with the biases:    {rel(y, with_b):.2e}")
print(f"rel_fro vLLM vs reference without the biases: {rel(y, without):.2e}")
