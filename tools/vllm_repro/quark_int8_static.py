"""vLLM 0.32: an AMD Quark int8 W8A8 MoE layer with static per-tensor activation scales (Quark's
default int8 export) builds, loads and processes, and its first forward raises AttributeError:
QuarkW8A8Int8MoEMethod keeps static activations on its legacy fused_experts path with
experts_cls = None, and FusedMoEMethodBase.is_monolithic, asked by the MoE runner on every
forward, calls experts_cls.is_monolithic(). vLLM and torch only; no AMX gate needed (the
method never reaches a kernel)."""
import torch
from _layer import E, K, N, layer, process, routing, run

QUARK_INT8_STATIC = {
    "quant_method": "quark", "export": {"kv_cache_group": [], "pack_method": "reorder"},
    "layer_quant_config": {}, "layer_type_quant_config": {}, "exclude": [],
    "global_quant_config": {
        "weight": {"dtype": "int8", "qscheme": "per_channel", "ch_axis": 0,
                   "is_dynamic": False, "symmetric": True},
        "input_tensors": {"dtype": "int8", "qscheme": "per_tensor", "ch_axis": None,
                          "is_dynamic": False, "symmetric": True},
        "output_tensors": None, "bias": None}}

g = torch.Generator().manual_seed(0)
weights = {}
for e in range(E):
    for proj, (n_out, n_in) in (("gate_proj", (N, K)), ("up_proj", (N, K)),
                                ("down_proj", (K, N))):
        weights[f"{e}.{proj}.weight"] = torch.randint(-127, 128, (n_out, n_in), generator=g,
                                                      dtype=torch.int8)
        weights[f"{e}.{proj}.weight_scale"] = torch.rand(n_out, generator=g) * 1e-3 + 1e-4
        weights[f"{e}.{proj}.input_scale"] = torch.tensor(0.02 + 0.01 * e)
r = layer(QUARK_INT8_STATIC, weights)
qm = r.routed_experts.quant_method
print("quant method", type(qm).__name__, "experts_cls", qm.experts_cls,
      "moe_kernel", qm.moe_kernel)
process(r)
x, w, ids = routing(5)
try:
    run(r, x, w, ids)
    print("forward ran")
except AttributeError as e:
    print(f"forward raised AttributeError: {e}")
