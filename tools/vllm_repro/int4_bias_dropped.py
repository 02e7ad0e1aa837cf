"""vLLM 0.32 CPUExpertsInt4.apply passes None for w1_bias and w2_bias: loaded expert biases
are silently dropped. vLLM and torch only."""
from _layer import GPTQ4, gptq_int4, layer, process, reference, rel, routing, run

w, dense = gptq_int4(bias=True)
r = layer(GPTQ4, w, bias=True)
process(r)
x, wt, ids = routing(17)
y = run(r, x, wt, ids)
print(f"rel_fro vs reference with biases:    {rel(y, reference(dense, x, wt, ids, bias=True)):.2e}")
print(f"rel_fro vs reference without biases: {rel(y, reference(dense, x, wt, ids)):.2e}")
