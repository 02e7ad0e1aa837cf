"""vLLM 0.32 CPU: process_weights_after_loading twice. int4 raises; fp8 block-128 silently
corrupts the layer (no idempotency guard). vLLM and torch only."""
from _layer import FP8_BLOCK, GPTQ4, fp8_block, gptq_int4, layer, process, rel, routing, run

w, _ = gptq_int4()
r = layer(GPTQ4, w)
process(r)
try:
    process(r)
    print("gptq int4: second process passed")
except Exception as e:
    print(f"gptq int4: second process raised {type(e).__name__}: {e}")

r = layer(FP8_BLOCK, fp8_block())
process(r)
x, wt, ids = routing(17)
first = run(r, x, wt, ids).clone()
process(r)
second = run(r, x, wt, ids)
print(f"fp8 block-128: output after a second process, rel_fro vs the first: "
      f"{rel(second, first.double()):.3f}")
