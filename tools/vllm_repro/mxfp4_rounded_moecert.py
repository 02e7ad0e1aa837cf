"""The rounded-up Marlin MXFP4 rows (issue 41, docs/gpu-ci.md): moecert's own data through a
plain vLLM layer, without the adapter. gpu_reduce.py mxfp4-rounded found vLLM 0.25.1's
gpt-oss-format method right where it rounds a layer up (hidden 128 / 160 to 256: rel_fro
4.2e-3), on weights it makes itself; moecert's ci row at hidden 160 reads 3.0e-2 through the
adapter. Here moecert synthesizes each layer (`reference.synthesize`, as the suites do), the
tensors go to vLLM under the adapter's per-expert names (`kernels.vllm_checkpoint`), and the
layer is built, loaded, processed and called as gpu_reduce.py does (the input padded with
zeros to the layer's hidden size, as vLLM's runner pads it). The output is compared with
moecert's float64 reference and with gpu_reduce.py's own reference of the dequantized
weights: a row far from both where gpu_reduce.py's own weights pass points at the data; near
both, at the adapter's flow.

    python tools/vllm_repro/mxfp4_rounded_moecert.py      # CUDA; vLLM and moecert importable
"""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
import gpu_reduce as g
from moecert.kernels.vllm_checkpoint import expert_tensors
from moecert.reference.dequantize import dequantize
from moecert.reference.moe import moe
from moecert.reference.problem import MoEProblem
from moecert.reference.synthesize import synthesize


def one(K, N, E, seed=0, M=33, topk=2):
    P = MoEProblem(M=M, K=K, N=N, E=E, topk=topk)
    ckpt = synthesize("mxfp4", P, seed=seed)
    weights = dict(expert_tensors(ckpt.variant, ckpt.tensors, N))
    g.E = E
    experts = g.build(g.MXFP4_FILE, "mxfp4", K, N, weights)
    x, w, ids = g.routing(M, K)
    held = experts.moe_config.hidden_dim
    out, kernel = g.forward(experts, torch.nn.functional.pad(x, (0, held - K)), w, ids)
    out = out[:, :K]
    ours = moe(ckpt, x.double(), w.double(), ids, P)
    deq = dequantize(ckpt, P)
    w13, w2 = deq["w13"].double().cpu(), deq["w2"].double().cpu()
    dense = {}
    for e in range(E):
        dense[(e, "gate_proj")], dense[(e, "up_proj")] = w13[e, :N], w13[e, N:]
        dense[(e, "down_proj")] = w2[e]
    own = g.reference(dense, x, w, ids, K, gate_rounded=True)
    print(f"  K={K:4d} N={N:3d} E={E} seed {seed}: layer hidden {held} {kernel:14s} vs moecert's "
          f"reference {g.rel(out, ours.cpu()):.3e}, vs gpu_reduce's of the same weights "
          f"{g.rel(out, own):.3e} (the two references {g.rel(ours.cpu(), own):.3e})", flush=True)


if __name__ == "__main__":
    import vllm
    print(f"vLLM {vllm.__version__}, torch {torch.__version__}, {torch.cuda.get_device_name()}")
    with g.served_model_config():
        for K, N, E in ((160, 256, 8), (512, 256, 8), (128, 64, 8), (160, 256, 4),
                        (128, 128, 4)):
            try:
                one(K, N, E)
            except Exception as e:  # one shape's failure said, the others still run
                print(f"  K={K} N={N} E={E}: {type(e).__name__}: {str(e)[:300]}", flush=True)
