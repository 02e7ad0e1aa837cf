"""vLLM 0.32 CPUExpertsInt4 ("W4A16") quantizes activations to int8 per token (INT4_W4A8);
its loader keeps fp16 scales as bf16 (params_dtype). vLLM and torch only."""
import torch
from _layer import GPTQ4, gptq_int4, layer, process, reference, rel, routing, run


def int8_per_token(t):
    s = t.abs().amax(-1, keepdim=True) / 127
    return (t / s).round().clamp(-127, 127) * s


w, dense = gptq_int4()
r = layer(GPTQ4, w)
process(r)
x, wt, ids = routing(17)
y = run(r, x, wt, ids)
print(f"rel_fro vs W4A16 reference: {rel(y, reference(dense, x, wt, ids)):.2e}")
print(f"rel_fro vs W4A8 (int8 per token) reference: "
      f"{rel(y, reference(dense, x, wt, ids, int8_per_token)):.2e}")
w16 = {k: (v.to(torch.float16) if k.endswith("scales") else v) for k, v in w.items()}
r = layer(GPTQ4, w16)
print("fp16 checkpoint scales stored as", r.routed_experts.w13_scales.dtype)
