"""vLLM 0.32: the WNA16 oracle builds a CPUExpertsInt4 layer with apply_router_weight_on_input,
whose apply then raises NotImplementedError. vLLM and torch only."""
from _layer import GPTQ4, gptq_int4, layer, process, routing, run

w, _ = gptq_int4()
r = layer(GPTQ4, w, router_on_input=True, topk=1)
print("oracle chose", r.routed_experts.quant_method.experts_cls.__name__)
process(r)
x, wt, ids = routing(9, topk=1)
try:
    run(r, x, wt, ids)
    print("forward ran")
except NotImplementedError as e:
    print(f"forward raised NotImplementedError: {e}")
