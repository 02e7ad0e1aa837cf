"""vLLM 0.32 ignores a GPTQ checkpoint's `checkpoint_format`: a symmetric "gptq_v2"
checkpoint (stored zero 8, not 8 - 1) runs through CPUExpertsInt4, whose unpacking adds the
v1 offset +1 to the stored zero, so every weight is read as u - 9 instead of u - 8.
vLLM and torch only; the float64 references use the same packed tensors."""
from _layer import (
    GPTQ4,
    gptq_int4,
    int8_per_token,
    layer,
    process,
    reference,
    rel,
    routing,
    run,
)

V2 = {**GPTQ4, "checkpoint_format": "gptq_v2"}
w, dense = gptq_int4(qzeros=0x88888888)  # v2: the zero 8 as it is
_, dense_v1_offset = gptq_int4(qzeros=0x88888888, zero=9)  # the same codes read as u - 9
r = layer(V2, w)  # vLLM's quantization code never reads "checkpoint_format"
process(r)
print("vLLM chose", r.routed_experts.quant_method.experts_cls.__name__)
x, wt, ids = routing(17)
y = run(r, x, wt, ids)
print(f"rel_fro vLLM vs the gptq_v2 reference (u - 8):      "
      f"{rel(y, reference(dense, x, wt, ids, int8_per_token)):.2e}")
print(f"rel_fro vLLM vs the v1-offset reading (u - 9):      "
      f"{rel(y, reference(dense_v1_offset, x, wt, ids, int8_per_token)):.2e}")
