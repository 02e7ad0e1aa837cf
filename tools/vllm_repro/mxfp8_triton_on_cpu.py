"""vLLM 0.32 on the CPU platform: the MXFP8 oracle picks EMULATION
(Mxfp8EmulationTritonExperts) for a compressed-tensors MXFP8 MoE layer although vLLM itself
reports Triton unusable here ("Triton is installed, but doesn't include CPU backend.
Disabling Triton."); the first forward fails inside the Triton kernel's definition. vLLM and
torch only; no AMX gate involved."""
import torch
from _layer import E, K, N, layer, process, routing, run


def args(dynamic=False):
    return {"num_bits": 8, "type": "float", "symmetric": True, "strategy": "group",
            "group_size": 32, "dynamic": dynamic, "scale_dtype": "torch.uint8"}

CT_MXFP8 = {"quant_method": "compressed-tensors", "format": "mxfp8-quantized",
            "ignore": [], "quantization_status": "compressed",
            "config_groups": {"group_0": {"targets": ["Linear"], "weights": args(),
                                          "input_activations": None,
                                          "format": "mxfp8-quantized"}}}
g = torch.Generator().manual_seed(0)
weights = {}
for e in range(E):
    for proj, (n_out, n_in) in (("gate_proj", (N, K)), ("up_proj", (N, K)),
                                ("down_proj", (K, N))):
        weights[f"{e}.{proj}.weight"] = (torch.randn(n_out, n_in, generator=g) * 50).to(
            torch.float8_e4m3fn)
        weights[f"{e}.{proj}.weight_scale"] = torch.randint(118, 122, (n_out, n_in // 32),
                                                            generator=g, dtype=torch.uint8)
r = layer(CT_MXFP8, weights)
qm = r.routed_experts.quant_method
print("oracle chose", [v for k, v in vars(qm).items() if k.endswith("_backend")],
      getattr(qm.experts_cls, "__name__", qm.experts_cls))
process(r)
x, w, ids = routing(5)
try:
    run(r, x, w, ids)
    print("forward ran")
except Exception as e:
    print(f"forward raised {type(e).__name__}: {e}")
