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
from moecert.reference.problem import MoEProblem
from moecert.reference.synthesize import synthesize


def harness_inputs(P, seed=0):
    """x, topk weights and ids as moecert's harness draws them (reference.inputs.make_inputs:
    softmax top-k, renormalized)."""
    from moecert.reference.inputs import make_inputs

    x, w, ids = make_inputs(P, seed=seed)
    return x, w, ids.long()


def one(K, N, E, seed=0, Ms=(1, 17, 33, 64), topk=2):
    """The layer from moecert's synthesized weights and from gpu_reduce.py's own, each on
    gpu_reduce.py's inputs (top-k weights uniform, not renormalized) and on the harness's, at
    each of `Ms` tokens;
    each output against the float64 reference of its weights (silu(gate) rounded, as the
    declared reading), and a second call against the first (bit for bit?)."""
    P = MoEProblem(M=max(Ms), K=K, N=N, E=E, topk=topk)
    ckpt = synthesize("mxfp4", P, seed=seed)
    deq = dequantize(ckpt, P)
    w13, w2 = deq["w13"].double().cpu(), deq["w2"].double().cpu()
    g.E = E
    sources = {"moecert's weights": (dict(expert_tensors(ckpt.variant, ckpt.tensors, N)), {
        **{(e, "gate_proj"): w13[e, :N] for e in range(E)},
        **{(e, "up_proj"): w13[e, N:] for e in range(E)},
        **{(e, "down_proj"): w2[e] for e in range(E)}})}
    sources["gpu_reduce's weights"] = g.mxfp4_weights(K, N)
    # moecert's synthesized scales span E8M0 120..124 within a row; randn weights' mostly one
    sources["gpu_reduce's, spread 2"] = g.mxfp4_weights(K, N, spread=2)
    inputs = {(f"gpu_reduce's inputs M={M}", M): g.routing(M, K) for M in Ms}
    inputs |= {(f"harness inputs M={M}", M): harness_inputs(
        MoEProblem(M=M, K=K, N=N, E=E, topk=topk)) for M in Ms}
    for label, (weights, dense) in sources.items():
        experts = g.build(g.MXFP4_FILE, "mxfp4", K, N, weights)
        held = experts.moe_config.hidden_dim
        for (name, _), (x, w, ids) in inputs.items():
            xp = torch.nn.functional.pad(x, (0, held - K))
            out, kernel = g.forward(experts, xp, w, ids)
            again, _ = g.forward(experts, xp, w, ids)
            ref = g.reference(dense, x, w, ids, K, gate_rounded=True)
            print(f"  K={K:4d} N={N:3d} E={E} {label:22s} {name:26s} {kernel:14s} "
                  f"{g.rel(out[:, :K], ref):.3e}; second call bit for bit: "
                  f"{torch.equal(out, again)}", flush=True)


if __name__ == "__main__":
    import vllm
    print(f"vLLM {vllm.__version__}, torch {torch.__version__}, {torch.cuda.get_device_name()}")
    with g.served_model_config():
        for K, N, E in ((160, 256, 8), (512, 256, 8)):
            try:
                one(K, N, E)
            except Exception as e:  # one shape's failure said, the others still run
                print(f"  K={K} N={N} E={E}: {type(e).__name__}: {str(e)[:300]}", flush=True)
