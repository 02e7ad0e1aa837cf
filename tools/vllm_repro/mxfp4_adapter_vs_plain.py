"""The rounded-up Marlin MXFP4 rows (issue 41, docs/gpu-ci.md), fourth step: one moecert
checkpoint and one input draw through moecert's vLLM adapter and through the plain path of
gpu_reduce.py, in two processes, then compared on the CPU. The fourteenth session's call found
the plain path off (6.1e-2 at K 512, M 17) on the same weights and inputs the harness's ci row
passes at 3.3e-3, and off on randn weights with spread block scales: so the two paths differ
somewhere, and this names the tensor. Each process saves its output, every parameter and buffer
of the processed experts, the kernel it ran and vLLM's MoE config; `compare` prints which
tensors differ and each output against moecert's float64 reference.

    python mxfp4_adapter_vs_plain.py adapter OUT.pt   # CUDA, vLLM, moecert (run from /tmp)
    python mxfp4_adapter_vs_plain.py plain OUT.pt
    python mxfp4_adapter_vs_plain.py compare A.pt B.pt
"""
import sys
from pathlib import Path

import torch
from moecert.kernels.vllm_checkpoint import expert_tensors
from moecert.reference.inputs import make_inputs
from moecert.reference.problem import MoEProblem
from moecert.reference.synthesize import synthesize

SHAPES = ((512, 256, 8, 17), (160, 256, 8, 33))  # (K, N, E, M): a passing and the failing row


def case(K, N, E, M):
    P = MoEProblem(M=M, K=K, N=N, E=E, topk=2)
    ckpt = synthesize("mxfp4", P, seed=0)
    x, w, ids = make_inputs(P, seed=0)
    return P, ckpt, x, w, ids


def state(experts):
    out = {f"param.{n}": p.detach().cpu().clone() for n, p in experts.named_parameters()}
    out |= {f"buffer.{n}": b.detach().cpu().clone() for n, b in experts.named_buffers()}
    cfg = getattr(experts, "moe_quant_config", None)
    for field in ("w1_scale", "w2_scale", "w1_bias", "w2_bias", "a1_scale", "a2_scale"):
        t = getattr(cfg, field, None)
        if isinstance(t, torch.Tensor):
            out[f"quant_config.{field}"] = t.detach().cpu().clone()
    return out


def adapter(path):
    from moecert.kernels.vllm_backend import VllmBackend

    b, saved = VllmBackend(), {}  # the class itself: a PYTHONPATH shim has no entry points
    dev = "cuda" if torch.cuda.is_available() else "cpu"  # cpu: the script's own check
    for K, N, E, M in SHAPES:
        P, ckpt, x, w, ids = case(K, N, E, M)
        layer = b.create_layer(ckpt, P)  # loads the checkpoint as the harness does
        b.process_weights_after_loading(layer)
        out = b.apply(layer, x.to(dev), w.to(dev), ids.to(dev))
        again = b.apply(layer, x.to(dev), w.to(dev), ids.to(dev))
        saved[(K, N, E, M)] = dict(out=out.cpu(), again=again.cpu(), kernel=b.describe(layer),
                                   numerics=b.numerics(layer), state=state(layer.experts),
                                   hidden=layer.experts.moe_config.hidden_dim,
                                   method=type(layer.quant_method).__name__)
        print(K, N, E, M, saved[(K, N, E, M)]["kernel"], saved[(K, N, E, M)]["method"], flush=True)
    torch.save(saved, path)


def plain(path):
    sys.path.insert(0, str(Path(__file__).parent))
    import gpu_reduce as g

    saved = {}
    with g.served_model_config():
        for K, N, E, M in SHAPES:
            _, ckpt, x, w, ids = case(K, N, E, M)
            g.E = E
            experts = g.build(g.MXFP4_FILE, "mxfp4", K, N,
                              dict(expert_tensors(ckpt.variant, ckpt.tensors, N)))
            held = experts.moe_config.hidden_dim
            xp = torch.nn.functional.pad(x, (0, held - K))
            out, kernel = g.forward(experts, xp, w, ids.long())
            saved[(K, N, E, M)] = dict(out=out[:, :K].cpu(), kernel=kernel, hidden=held,
                                       state=state(experts),
                                       method=type(experts.quant_method).__name__)
            print(K, N, E, M, kernel, saved[(K, N, E, M)]["method"], flush=True)
    torch.save(saved, path)


def rel(out, ref):
    return float((out.double() - ref).norm() / ref.norm())


def compare(a_path, b_path):
    from moecert.reference.moe import moe

    a, b = torch.load(a_path, weights_only=False), torch.load(b_path, weights_only=False)
    for key in a:
        K, N, E, M = key
        P, ckpt, x, w, ids = case(*key)
        ref = moe(ckpt, x, w, ids, P)
        A, B = a[key], b[key]
        print(f"K={K} N={N} E={E} M={M}: adapter {A['kernel']} ({A['method']}, hidden "
              f"{A['hidden']}) rel_fro {rel(A['out'], ref):.3e} (again bit for bit "
              f"{torch.equal(A['out'], A['again'])}); plain {B['kernel']} ({B['method']}, hidden "
              f"{B['hidden']}) rel_fro {rel(B['out'], ref):.3e}; outputs equal "
              f"{torch.equal(A['out'], B['out'])}")
        for name in sorted(set(A["state"]) | set(B["state"])):
            ta, tb = A["state"].get(name), B["state"].get(name)
            if ta is None or tb is None:
                print(f"  {name}: only in {'plain' if ta is None else 'adapter'}")
            elif ta.shape != tb.shape or ta.dtype != tb.dtype:
                print(f"  {name}: adapter {tuple(ta.shape)} {ta.dtype}, plain "
                      f"{tuple(tb.shape)} {tb.dtype}")
            elif not torch.equal(ta.view(torch.uint8) if ta.element_size() == 1 else ta,
                                 tb.view(torch.uint8) if tb.element_size() == 1 else tb):
                ne = (ta.view(torch.uint8) != tb.view(torch.uint8)).sum() \
                    if ta.element_size() == 1 else (ta != tb).sum()
                print(f"  {name}: differs in {int(ne)} of {ta.numel()} elements")
            else:
                print(f"  {name}: equal {tuple(ta.shape)} {ta.dtype}")


if __name__ == "__main__":
    {"adapter": adapter, "plain": plain, "compare": compare}[sys.argv[1]](*sys.argv[2:])
