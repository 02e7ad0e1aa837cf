"""vLLM's GPTQ int4 Marlin MoE on a GPU against a float64 reference, over layer shapes: one
file, vLLM and torch only (no moecert), for an upstream report if a shape is wrong.

moecert's GPU gate (docs/gpu-ci.md, 2026-11-29) failed every int4 / int8 Marlin variant at
hidden K = 256, intermediate N = 128 (group 128; rel_fro 0.24-0.36) while K = 128 / N = 128,
K = 256 / N = 256 and group 32 passed. This script builds the layer as vLLM's model loader
does (the quant config of a GPTQ checkpoint, the MoE layer factory, per-expert tensors through
the runner's load_weights, process_weights_after_loading, the modular forward the runner
calls after routing) at each shape and prints the error against the dequantized weights
computed in float64 (intermediates rounded to bf16, as a bf16 kernel stores them).

    python gpu_marlin_shapes.py          # on a CUDA machine with vLLM (0.25.1 measured)

A correct kernel lands near bf16 rounding (rel_fro ~2e-3 to 7e-3); a wrong one far above.
"""
import itertools
import tempfile

import torch
from vllm.config import VllmConfig, set_current_vllm_config
from vllm.distributed import init_distributed_environment, initialize_model_parallel
from vllm.model_executor.layers.fused_moe import layer as fused_moe_layer
from vllm.model_executor.layers.quantization import get_quantization_config

E, TOPK, G, M = 4, 2, 128, 9
SHAPES = ((128, 128), (256, 128), (256, 256), (512, 128), (256, 384), (384, 128))  # (K, N)
CONFIG = VllmConfig()
FACTORY = getattr(fused_moe_layer, "FusedMoEFactory", None) or fused_moe_layer.FusedMoE
LAYER_IDS = itertools.count()
GPTQ4 = {"quant_method": "gptq", "bits": 4, "group_size": G, "desc_act": False, "sym": True}

with set_current_vllm_config(CONFIG):
    init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                 distributed_init_method=f"file://{tempfile.mktemp()}")
    initialize_model_parallel(1, 1)
    from vllm.v1.worker.workspace import init_workspace_manager
    init_workspace_manager(torch.device("cuda"))


def gptq_int4(K, N, seed=0):
    """Symmetric GPTQ v1 int4 per-expert tensors (qzeros store 8 - 1) and (u - 8) * s."""
    g = torch.Generator().manual_seed(seed)
    out, dense = {}, {}
    for e in range(E):
        for proj, (n_out, n_in) in (("gate_proj", (N, K)), ("up_proj", (N, K)),
                                    ("down_proj", (K, N))):
            u = torch.randint(0, 16, (n_in, n_out), generator=g)
            s = (torch.rand(n_in // G, n_out, generator=g) * 0.01 + 0.005).to(torch.bfloat16)
            words = (u.view(n_in // 8, 8, n_out) << (4 * torch.arange(8).view(1, 8, 1))).sum(1)
            out[f"{e}.{proj}.qweight"] = words.to(torch.int64).to(torch.int32)
            out[f"{e}.{proj}.scales"] = s
            out[f"{e}.{proj}.qzeros"] = torch.full((n_in // G, n_out // 8), 0x77777777,
                                                   dtype=torch.int64).to(torch.int32)
            dense[(e, proj)] = ((u - 8).double() * s.double().repeat_interleave(G, 0)).T
    return out, dense


def reference(dense, x, w, ids, K):
    def rnd(t):
        return t.to(torch.bfloat16).double()
    y = torch.zeros(x.shape[0], K, dtype=torch.float64)
    for t in range(x.shape[0]):
        for j in range(ids.shape[1]):
            e = int(ids[t, j])
            xt = x[t:t + 1].double()
            gate, up = xt @ dense[(e, "gate_proj")].T, xt @ dense[(e, "up_proj")].T
            a = rnd(torch.nn.functional.silu(rnd(gate)) * rnd(up))
            y[t] += w[t, j].double() * (a @ dense[(e, "down_proj")].T)[0]
    return y


def run(K, N):
    weights, dense = gptq_int4(K, N)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(M, K, generator=g).to(torch.bfloat16)
    ids = torch.stack([torch.randperm(E, generator=g)[:TOPK] for _ in range(M)])
    w = torch.rand(M, TOPK, generator=g)
    with set_current_vllm_config(CONFIG), torch.device("cuda"):
        qc = get_quantization_config("gptq").from_config(GPTQ4)
        r = FACTORY(E, TOPK, K, N, params_dtype=torch.bfloat16, quant_config=qc,
                    prefix=f"model.layers.{next(LAYER_IDS)}.mlp.experts")
        list(r.load_weights({k: v.cuda() for k, v in weights.items()}.items()))
        experts = r.routed_experts
        experts.quant_method.process_weights_after_loading(experts)
        experts._ensure_moe_quant_config_init()  # as the runner does before each forward
        with torch.inference_mode():
            out = experts.forward_modular(x=x.cuda(), topk_weights=w.cuda().float(),
                                          topk_ids=ids.cuda().to(torch.int32))
        kind = type(experts.quant_method).__name__
    ref = reference(dense, x, w, ids, K)
    return kind, float((out.double().cpu() - ref).norm() / ref.norm())


if __name__ == "__main__":
    import vllm
    print(f"vLLM {vllm.__version__}, torch {torch.__version__}, "
          f"{torch.cuda.get_device_name()}; GPTQ int4 sym, group {G}, E {E}, top-{TOPK}, M {M}")
    for K, N in SHAPES:
        try:
            kind, err = run(K, N)
            print(f"K={K:4d} N={N:4d}  {kind:28s} rel_fro {err:.3e}")
        except Exception as e:  # a shape the kernel refuses: said, not a crash
            print(f"K={K:4d} N={N:4d}  refused: {type(e).__name__}: {str(e)[:120]}")
