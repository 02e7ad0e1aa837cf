"""vLLM 0.32: an AMD Quark int4 weight-only MoE layer (Quark's int4_wo export: int4 per group
of 128, symmetric, bf16 activations) on a CPU whose AMX gate answers True (an Intel Xeon with
AMX, or the gate forced). vLLM's WNA16 oracle selects its CPU backend, CPUExpertsInt4, for
the layer; the layer builds and loads; then process_weights_after_loading raises TypeError:
the CPU backend's weight processing (oracle/int_wna16.py, the CPU INT4 W4A16 branch) accepts
only AutoAWQConfig, AutoGPTQConfig or compressed-tensors QuantizationArgs, and the oracle
chose it without asking. A backend selected for a config it cannot run: vLLM and torch only."""
import torch
from _layer import E, PROJS, layer, process

GROUP = 128
QUARK_INT4 = {
    "quant_method": "quark", "export": {"kv_cache_group": [], "pack_method": "reorder"},
    "layer_quant_config": {}, "layer_type_quant_config": {}, "exclude": [],
    "global_quant_config": {
        "weight": {"dtype": "int4", "qscheme": "per_group", "group_size": GROUP, "ch_axis": -1,
                   "is_dynamic": False, "symmetric": True, "round_method": "half_even",
                   "scale_type": "float", "observer_cls": "PerGroupMinMaxObserver"},
        "input_tensors": None, "output_tensors": None, "bias": None}}

g = torch.Generator().manual_seed(0)
weights = {}
for e in range(E):
    for proj, (n_out, n_in) in PROJS:
        # Quark's file: int32 words of eight int4 along the input, scales and zero points
        # per (group, output)
        weights[f"{e}.{proj}.weight"] = torch.randint(-2**31, 2**31 - 1, (n_out, n_in // 8),
                                                      generator=g).to(torch.int32)
        weights[f"{e}.{proj}.weight_scale"] = (torch.rand(n_in // GROUP, n_out, generator=g)
                                               * 0.01 + 0.005).to(torch.bfloat16)
        weights[f"{e}.{proj}.weight_zero_point"] = torch.zeros(n_in // GROUP, n_out // 8,
                                                               dtype=torch.int32)
r = layer(QUARK_INT4, weights)
qm = r.routed_experts.quant_method
print("quant method", type(qm).__name__, "experts class the oracle chose",
      getattr(qm.experts_cls, "__name__", qm.experts_cls))
try:
    process(r)
    print("process_weights_after_loading ran")
except TypeError as e:
    print(f"process_weights_after_loading raised TypeError: {e}")

# The same file's tensors handed over transposed in memory (same values; a loader gets such
# views from fused or sliced tensors): the Quark int4 loader views int32 words as bytes first.
strided = {n: t.mT.contiguous().mT if t.dim() == 2 and t.shape[1] > 1 else t
           for n, t in weights.items()}
try:
    layer(QUARK_INT4, strided)
    print("a non-contiguous weight loaded")
except RuntimeError as e:
    print(f"a non-contiguous weight: load raised RuntimeError: {e}")
