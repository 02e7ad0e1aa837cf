"""vLLM 0.32 CPU: process_weights_after_loading twice. int4 raises; fp8 block-128 silently
corrupts the layer (no idempotency guard). vLLM and torch only."""
import torch
from _layer import GPTQ4, E, K, N, gptq_int4, layer, process, rel, routing, run

w, _ = gptq_int4()
r = layer(GPTQ4, w)
process(r)
try:
    process(r)
    print("gptq int4: second process passed")
except Exception as e:
    print(f"gptq int4: second process raised {type(e).__name__}: {e}")

g = torch.Generator().manual_seed(0)
fp8 = {}
for e in range(E):
    for proj, (o, i) in (("gate_proj", (N, K)), ("up_proj", (N, K)), ("down_proj", (K, N))):
        fp8[f"{e}.{proj}.weight"] = (torch.randn(o, i, generator=g)).to(torch.float8_e4m3fn)
        fp8[f"{e}.{proj}.weight_scale_inv"] = torch.rand(o // 128, i // 128, generator=g) + 0.5
d = {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}
r = layer(d, fp8)
process(r)
x, wt, ids = routing(17)
first = run(r, x, wt, ids).clone()
process(r)
second = run(r, x, wt, ids)
print(f"fp8 block-128: output after a second process, rel_fro vs the first: "
      f"{rel(second, first.double()):.3f}")
