"""GPU check of the triton backend: (a) errors against the float64 reference computed on the
GPU for every scheme at small and model layer sizes, (b) W4A16 gptq-int4 g128 bf16 timing
against vLLM's Marlin MoE (the anchor in .vllm/, same run) and the memory floor.

    mkdir -p /tmp/shim/moecert && for d in reference kernels conformance reports; do
        ln -sfn $PWD/$d /tmp/shim/moecert/$d; done; export PYTHONPATH=/tmp/shim
    python tools/gpu_triton_check.py            # writes $OUT/gpu_triton.txt too

Not part of the package. Model-size correctness uses the layers' K and N with fewer experts
(the float64 checkpoint synthesis runs on the CPU); timing uses all experts with random
kernel-format bytes (timing does not depend on the values).
"""

from __future__ import annotations

import os
import sys
import time
import traceback

import torch
import triton
from moecert.kernels.layer import PROCESSED, MoELayer
from moecert.kernels.quant_config import QuantConfig
from moecert.kernels.triton_moe import fused_moe
from moecert.kernels.triton_moe.backend import TritonBackend
from moecert.reference import MoEProblem, make_batched_inputs, make_inputs, moe, synthesize
from moecert.reference.models import MODELS

OUT = os.environ.get("OUT", ".")
LOG = open(os.path.join(OUT, "gpu_triton.txt"), "w")
BACKEND = TritonBackend()
START = time.time()
BUDGET_S = float(os.environ.get("CHECK_BUDGET_S", "420"))


def log(*parts):
    line = " ".join(str(p) for p in parts)
    print(line, flush=True)
    LOG.write(line + "\n")
    LOG.flush()


def build(scheme, attrs, P):
    ckpt = synthesize(scheme, P, seed=1, **attrs).to("cuda")
    layer = BACKEND.create_layer(ckpt, P)
    BACKEND.process_weights_after_loading(layer)
    return ckpt, layer


def check(case_id, scheme, attrs, P, built=None):
    t0 = time.time()
    try:
        ckpt, layer = built or build(scheme, attrs, P)
        if P.activation_format == "batched":
            x, counts = make_batched_inputs(P, seed=2)
            x, counts = x.cuda(), counts.cuda()
            out = BACKEND.apply(layer, x, None, None, expert_num_tokens=counts)
            ref = moe(ckpt, x, None, None, P, expert_num_tokens=counts)
        else:
            x, w, ids = (t.cuda() for t in make_inputs(P, seed=2))
            out = BACKEND.apply(layer, x, w, ids)
            ref = moe(ckpt, x, w, ids, P)
        torch.cuda.synchronize()
        d = out.double() - ref
        rel = (d.norm() / ref.norm()).item() if ref.norm() > 0 else d.norm().item()
        bound = 2.0**-8 if P.dtype == "bf16" else 2.0**-11
        flag = "ok" if rel <= bound else "FAIL"
        log(f"{flag:4s} {case_id:42s} M={P.M:4d} K={P.K:5d} N={P.N:5d} E={P.E:3d} "
            f"topk={P.topk} {P.dtype} maxabs={d.abs().max().item():.3e} rel={rel:.3e} "
            f"(bound {bound:.2e}) [{time.time() - t0:.1f}s]")
        del ckpt, layer, ref, out
    except Exception as e:
        log(f"ERR  {case_id}: {type(e).__name__}: {e}")
        traceback.print_exc()
    torch.cuda.empty_cache()


SCHEMES = [
    ("bf16", "bf16", {}, {}),
    ("fp16", "fp16", {}, {"dtype": "fp16"}),
    ("fp16-weights-bf16-act", "fp16", {}, {}),  # tf32 dot: fp16 weights stay exact
    ("gptq4-g128", "gptq-int4", {"group_size": 128}, {}),
    ("gptq4-g-1", "gptq-int4", {"group_size": -1}, {}),
    ("gptq4-g128-fp16", "gptq-int4", {"group_size": 128}, {"dtype": "fp16"}),  # fp16 magic
    ("gptq4-g32-asym-v1", "gptq-int4", {"group_size": 32, "sym": False}, {}),
    ("gptq4-g64-asym-v2", "gptq-int4", {"group_size": 64, "sym": False,
                                        "checkpoint_format": "gptq_v2"}, {}),
    ("gptq4-g64-actorder", "gptq-int4", {"group_size": 64, "act_order": True}, {}),
    ("gptq8-g128", "gptq-int8", {"group_size": 128}, {}),
    ("gptq8-g64-asym-actorder-fp16", "gptq-int8", {"group_size": 64, "sym": False,
                                                  "act_order": True}, {"dtype": "fp16"}),
    ("awq4-g128-asym", "awq-int4", {"group_size": 128}, {}),
    ("ct4-g32", "ct-int4", {"group_size": 32}, {}),
    ("ct4-g-1-asym", "ct-int4", {"group_size": -1, "sym": False}, {}),
    ("ct8-g32-asym", "ct-int8", {"group_size": 32, "sym": False}, {}),
    ("int8w8a16-channel", "int8-w8a16", {"weight_strategy": "channel"}, {}),
    ("int8w8a16-tensor-fp16", "int8-w8a16", {"weight_strategy": "tensor"}, {"dtype": "fp16"}),
    ("fp8w8a16-tensor", "fp8-w8a16", {"weight_strategy": "tensor"}, {}),
    ("fp8w8a16-channel", "fp8-w8a16", {"weight_strategy": "channel"}, {}),
    ("fp8w8a16-block", "fp8-w8a16", {"weight_strategy": "block"}, {}),
    ("int8w8a8-token", "int8-w8a8", {"activation": "dynamic-token"}, {}),
    ("int8w8a8-static-tensor", "int8-w8a8", {"activation": "static-tensor",
                                             "weight_strategy": "tensor"}, {}),
    ("int8w8a8-dyn-tensor", "int8-w8a8", {"activation": "dynamic-tensor"}, {}),
    ("w4a8-gptq-g128", "w4a8-int8", {"checkpoint_format": "gptq", "group_size": 128}, {}),
    ("w4a8-awq-g64-asym", "w4a8-int8", {"checkpoint_format": "awq", "group_size": 64,
                                        "sym": False}, {}),
    ("w4a8-g32-fp16", "w4a8-int8", {"checkpoint_format": "gptq", "group_size": 32},
     {"dtype": "fp16"}),
    ("fp8w8a8-block-group", "fp8-w8a8", {}, {}),
    ("fp8w8a8-channel-group-partial", "fp8-w8a8", {"weight_strategy": "channel"},
     {"K": 320, "N": 192}),
    ("fp8w8a8-tensor-static", "fp8-w8a8", {"weight_strategy": "tensor",
                                           "activation": "static-tensor"}, {}),
    ("fp8w8a8-channel-token-fp16", "fp8-w8a8", {"weight_strategy": "channel",
                                                "activation": "dynamic-token"},
     {"dtype": "fp16"}),
    ("mxfp8-a16", "mxfp8", {"activation": "none"}, {}),
    ("mxfp8-floor", "mxfp8", {"activation": "mxfp8", "mx_scale_rule": "floor"}, {}),
    ("mxfp8-even", "mxfp8", {"activation": "mxfp8", "mx_scale_rule": "even"}, {}),
    ("mxfp8-ceil", "mxfp8", {"activation": "mxfp8", "mx_scale_rule": "ceil"}, {}),
    ("mxfp8-rceil-fp16", "mxfp8", {"activation": "mxfp8", "mx_scale_rule": "rceil"},
     {"dtype": "fp16"}),
]
EMAP = tuple(i // 2 if i % 2 else -1 for i in range(16))  # 16 global experts, 8 local
OPTIONS = [
    ("gelu", {"activation": "gelu"}), ("swigluoai", {"activation": "swigluoai"}),
    ("swigluoai-split", {"activation": "swigluoai-split"}), ("relu2", {"activation": "relu2"}),
    ("bias", {"bias": True}), ("router-on-input", {"topk": 1,
                                                   "apply_router_weight_on_input": True}),
    ("expert-map", {"expert_map": EMAP}), ("batched", {"activation_format": "batched"}),
]
OPTION_SCHEMES = [
    ("gptq4-g64-asym", "gptq-int4", {"group_size": 64, "sym": False}),
    ("int8w8a8-dyn-tensor", "int8-w8a8", {"activation": "dynamic-tensor"}),
    ("w4a8-awq", "w4a8-int8", {"checkpoint_format": "awq", "group_size": 64, "sym": False}),
    ("mxfp8-floor", "mxfp8", {"activation": "mxfp8"}),
    ("fp8-block", "fp8-w8a16", {"weight_strategy": "block"}),
    ("fp8w8a8-block-group", "fp8-w8a8", {}),
]
# (name, E used for correctness, K, N, topk): the model layers with fewer experts
_CORRECTNESS_E = {"qwen3-30b-a3b": 16, "mixtral-8x7b": 2, "deepseek-v3": 8}
MODEL_CORRECTNESS = [(name, E, *MODELS[name][1:]) for name, E in _CORRECTNESS_E.items()]
MODEL_SCHEMES = [
    ("gptq4-g128", "gptq-int4", {"group_size": 128}),
    ("awq4-g128-asym", "awq-int4", {"group_size": 128}),
    ("fp8w8a16-block", "fp8-w8a16", {"weight_strategy": "block"}),
    ("int8w8a8-token", "int8-w8a8", {"activation": "dynamic-token"}),
    ("w4a8-gptq-g128", "w4a8-int8", {"checkpoint_format": "gptq", "group_size": 128}),
    ("mxfp8-floor", "mxfp8", {"activation": "mxfp8"}),
    ("fp8w8a8-block-group", "fp8-w8a8", {}),
    ("bf16", "bf16", {}),
]
TIMING_SHAPES = MODELS


def over_budget(what):
    if time.time() - START > BUDGET_S:
        log(f"SKIP {what}: check budget spent")
        return True
    return False


def correctness_schemes():
    small = {"M": 33, "K": 256, "N": 256, "E": 8, "topk": 3}
    for case_id, scheme, attrs, over in SCHEMES:
        check(case_id, scheme, attrs, MoEProblem(**{**small, **over}))


def correctness_options():
    small = {"M": 33, "K": 256, "N": 256, "E": 8, "topk": 3}
    for opt_id, over in OPTIONS:
        for sid, scheme, attrs in OPTION_SCHEMES:
            if not over_budget(f"{sid}+{opt_id}"):
                check(f"{sid}+{opt_id}", scheme, attrs, MoEProblem(**{**small, **over}))


def correctness_models():
    for name, E, K, N, topk in MODEL_CORRECTNESS:
        for sid, scheme, attrs in MODEL_SCHEMES:
            if name != "qwen3-30b-a3b" and sid not in ("gptq4-g128", "fp8w8a16-block",
                                                        "fp8w8a8-block-group"):
                continue
            if over_budget(f"{name} {sid}"):
                continue
            try:
                built = build(scheme, attrs, MoEProblem(M=1, K=K, N=N, E=E, topk=topk))
            except Exception as e:
                log(f"ERR  {name}:{sid} build: {type(e).__name__}: {e}")
                continue
            for M in (1, 64, 256):
                # the layer's problem has M=1; apply takes any M, the reference is told M
                check(f"{name}:{sid}", scheme, attrs,
                      MoEProblem(M=M, K=K, N=N, E=E, topk=topk), built)
            del built
            torch.cuda.empty_cache()


def random_w4a16_layer(E, K, N, topk, M):
    """A processed gptq-int4 sym g128 bf16 layer in the kernel format, random bytes."""
    P = MoEProblem(M=M, K=K, N=N, E=E, topk=topk)
    q = QuantConfig.of("gptq-int4")
    q = QuantConfig(**{**q.__dict__, "group_size": 128})
    layer = MoELayer("triton", q, P, torch.device("cuda", 0))
    for p, (n_out, n_in) in {"w13": (2 * N, K), "w2": (K, N)}.items():
        layer.put(f"{p}_q", torch.randint(0, 256, (E, n_out, n_in // 2), dtype=torch.uint8,
                                          device="cuda"))
        layer.put(f"{p}_s", torch.rand(E, n_out, n_in // 128, device="cuda") * 0.01 + 1e-3)
        layer.meta[f"{p}_group_cols"] = 128
    layer.meta["bits"] = 4
    setattr(layer, PROCESSED, True)
    return layer, P


def routing(E, topk, M, seed=0):
    torch.manual_seed(seed)
    x = torch.randn(M, 1, device="cuda")  # same draws order as the anchor is not needed
    tw, ti = torch.softmax(torch.randn(M, E, device="cuda"), -1).topk(topk)
    return (tw / tw.sum(-1, keepdim=True)).float(), ti.int(), x


def load_marlin():
    sys.path.insert(0, ".vllm")
    try:
        import marlin_anchor
        marlin_anchor.load()
        bw = marlin_anchor.copy_bandwidth()
        log(f"copy bandwidth {bw / 1e12:.2f} TB/s")
        return marlin_anchor, bw
    except Exception as e:
        log(f"marlin anchor unavailable: {type(e).__name__}: {e}")
        return None, 3.0e12


def graph_us(layer, x, tw, ti, out):
    """Median us of the backend's forward replayed under a CUDA graph (no host work)."""
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        BACKEND.forward(layer, x, tw, ti, out, None)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            BACKEND.forward(layer, x, tw, ti, out, None)
    torch.cuda.synchronize()
    return 1e3 * triton.testing.do_bench(graph.replay, warmup=25, rep=100,
                                         return_mode="median")


def timing_point(marlin_anchor, bw, name, E, K, N, topk, M):
    """Routing, input, touched experts, memory floor (us) and Marlin's time for one point."""
    tw, ti, _ = routing(E, topk, M)
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    active = torch.unique(ti).numel()
    floor = active * (3 * N * K / 2 + 3 * N * K / 128 * 2) / bw * 1e6
    m_us = float("nan")
    if marlin_anchor is not None:
        try:
            m_us, _ = marlin_anchor.time_marlin(E, K, N, topk, M)
        except Exception as e:
            log(f"marlin {name} M={M} failed: {e}")
    return tw, ti, x, active, floor, m_us


def timing(marlin_anchor, bw):
    log("shape            M  active  marlin_us  floor_us | apply_us  graph_us  apply/marlin "
        "graph/marlin  %floor(apply) %floor(graph)  config")
    for name, (E, K, N, topk) in TIMING_SHAPES.items():
        layer, _ = random_w4a16_layer(E, K, N, topk, 1)
        for M in (1, 16, 64, 256):
            tw, ti, x, active, floor, m_us = timing_point(marlin_anchor, bw, name, E, K, N,
                                                          topk, M)
            out = torch.empty(M, K, device="cuda", dtype=torch.bfloat16)
            cfg = fused_moe.pick_config(M * topk, E, 2 * N, K)
            try:
                BACKEND.apply(layer, x, tw, ti, out=out)
                torch.cuda.synchronize()

                def call(layer=layer, x=x, tw=tw, ti=ti, out=out):
                    return BACKEND.apply(layer, x, tw, ti, out=out)

                us = 1e3 * triton.testing.do_bench(call, warmup=25, rep=100,
                                                   return_mode="median")
                g_us = graph_us(layer, x, tw, ti, out)
                log(f"{name:15s} {M:4d} {active:6d} {m_us:10.1f} {floor:9.1f} | {us:8.1f} "
                    f"{g_us:9.1f} {us / m_us:12.2f} {g_us / m_us:12.2f} {100 * floor / us:13.1f} "
                    f"{100 * floor / g_us:13.1f}  m{cfg['BLOCK_M']}n{cfg['BLOCK_N']}"
                    f"k{cfg['BLOCK_K']}w{cfg['num_warps']}s{cfg['num_stages']}"
                    f"{'-swap' if cfg.get('SWAP_AB') else ''}"
                    f"{'-fast' if cfg.get('FAST_I4') else ''}")
            except Exception as e:
                log(f"{name} M={M} failed: {type(e).__name__}: {e}")
                traceback.print_exc()
        del layer
        torch.cuda.empty_cache()


def host_breakdown():
    """Host time per call of apply's pieces (Qwen3 M=1: the GPU work is small, so a loop
    without synchronization measures the host)."""
    from moecert.kernels import base
    from moecert.kernels.triton_moe import align, backend, quant

    E, K, N, topk = TIMING_SHAPES["qwen3-30b-a3b"]
    layer, _ = random_w4a16_layer(E, K, N, topk, 1)
    tw, ti, _ = routing(E, topk, 1)
    x = torch.randn(1, K, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(1, K, device="cuda", dtype=torch.bfloat16)
    plan = backend._plan(layer)
    cfg = fused_moe.pick_config(topk, E, 2 * N, K)
    sid, be, npad = align.align_assignments(ti.reshape(-1), E, cfg["BLOCK_M"], n=topk)
    h = torch.empty(topk, 2 * N, device="cuda", dtype=torch.bfloat16)
    pieces = {
        "apply": lambda: BACKEND.apply(layer, x, tw, ti, out=out),
        "forward": lambda: BACKEND.forward(layer, x, tw, ti, out, None),
        "check_int(topk_ids)": lambda: base._check_int("topk_ids", ti, tuple(ti.shape),
                                                       ti.device, 0, E - 1),
        "align": lambda: align.align_assignments(ti.reshape(-1), E, cfg["BLOCK_M"], n=topk),
        "moe_gemm(w13)": lambda: fused_moe.moe_gemm(x, None, None, plan["w13"], h, sid, be,
                                                    npad, None, a_row_div=topk,
                                                    act=fused_moe.A16, config=cfg),
        "activation": lambda: quant.activation(h, "silu", N),
        "torch.empty": lambda: torch.empty(topk, K, device="cuda"),
    }
    for what, fn in pieces.items():
        for _ in range(20):
            fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(200):
            fn()
        host = (time.perf_counter() - t0) / 200 * 1e6
        torch.cuda.synchronize()
        total = (time.perf_counter() - t0) / 200 * 1e6
        log(f"host {what:22s} {host:8.1f} us/call (incl. GPU drain {total:8.1f})")
    torch.cuda.empty_cache()


SWEEP = {  # name: (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages)
    "m16n64k128w4s4": (16, 64, 128, 4, 4), "m16n128k64w4s4": (16, 128, 64, 4, 4),
    "m32n64k128w4s4": (32, 64, 128, 4, 4), "m32n128k64w4s3": (32, 128, 64, 4, 3),
    "m64n64k64w4s3": (64, 64, 64, 4, 3), "m64n128k64w4s3": (64, 128, 64, 4, 3),
    "m64n128k64w8s3": (64, 128, 64, 8, 3), "m128n128k64w8s3": (128, 128, 64, 8, 3),
    "m64n256k64w8s3": (64, 256, 64, 8, 3),
}


def sweep():
    """Graph time of the forward per tile (both GEMMs on one tile), M = 16, 64, 256."""
    default_pick = fused_moe.pick_config
    for name, (E, K, N, topk) in TIMING_SHAPES.items():
        layer, _ = random_w4a16_layer(E, K, N, topk, 1)
        for M in (16, 64, 256):
            if over_budget(f"sweep {name} M={M}"):
                continue
            tw, ti, _ = routing(E, topk, M)
            x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
            out = torch.empty(M, K, device="cuda", dtype=torch.bfloat16)
            row = []
            for cname, (bm, bn, bk, w, st) in SWEEP.items():
                cfg = {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "num_warps": w,
                       "num_stages": st}
                fused_moe.pick_config = lambda *a, c=cfg: dict(c)
                try:
                    row.append(f"{cname}={graph_us(layer, x, tw, ti, out):.0f}")
                except Exception as e:
                    row.append(f"{cname}=ERR({type(e).__name__})")
                finally:
                    fused_moe.pick_config = default_pick
            log(f"sweep {name} M={M}: " + " ".join(row))
        del layer
        torch.cuda.empty_cache()


# kernel variants on top of pick_config's tile: name -> config overrides
VARIANTS = {
    "base": {},
    "fast": {"FAST_I4": True},
    "swap": {"SWAP_AB": True},
    "sf": {"SWAP_AB": True, "FAST_I4": True},
    "sf_n128k128": {"SWAP_AB": True, "FAST_I4": True, "BLOCK_N": 128, "BLOCK_K": 128},
    "sf_n128k128w8": {"SWAP_AB": True, "FAST_I4": True, "BLOCK_N": 128, "BLOCK_K": 128,
                      "num_warps": 8},
    "sf_n64k128s3": {"SWAP_AB": True, "FAST_I4": True, "BLOCK_N": 64, "BLOCK_K": 128,
                     "num_stages": 3},
    "sf_n64k64s6": {"SWAP_AB": True, "FAST_I4": True, "BLOCK_N": 64, "BLOCK_K": 64,
                    "num_stages": 6},
    "f_n128k128": {"FAST_I4": True, "BLOCK_N": 128, "BLOCK_K": 128},
}


def use_variant(name):
    """Route every pick_config through VARIANTS[name] (CHECK_VARIANT for whole sections)."""
    pick = DEFAULT_PICK
    extra = VARIANTS[name]
    fused_moe.pick_config = lambda *a: {**pick(*a), **extra}


DEFAULT_PICK = fused_moe.pick_config


def w4a16_reference(layer, x, tw, ti, N):
    """float64 forward of the random kernel-format layer, the reference's rounding order."""
    out = torch.zeros(x.shape[0], x.shape[1], dtype=torch.float64, device=x.device)

    def weight(p, e):
        q = layer.get(f"{p}_q")[e]
        u = torch.stack([q & 0xF, q >> 4], -1).reshape(q.shape[0], -1).double() - 8
        s = layer.get(f"{p}_s")[e].double().repeat_interleave(128, 1)
        return u * s

    for e in torch.unique(ti).tolist():
        t, j = (ti == e).nonzero(as_tuple=True)
        h = (x[t].double() @ weight("w13", e).T).to(x.dtype).double()
        a = (h[:, :N] * torch.sigmoid(h[:, :N]) * h[:, N:]).to(x.dtype).double()
        out.index_add_(0, t, tw[t, j].double()[:, None] * (a @ weight("w2", e).T))
    return out


def variants(marlin_anchor, bw):
    """Per shape and M: graph us of each variant, Marlin, floor, and each variant's relative
    error against a float64 forward plus a bitwise repeat check."""
    for name, (E, K, N, topk) in TIMING_SHAPES.items():
        layer, _ = random_w4a16_layer(E, K, N, topk, 1)
        for M in (1, 16, 64, 256):
            if over_budget(f"variants {name} M={M}"):
                continue
            tw, ti, x, _, floor, m_us = timing_point(marlin_anchor, bw, name, E, K, N,
                                                     topk, M)
            ref = w4a16_reference(layer, x, tw, ti, N)
            out = torch.empty(M, K, device="cuda", dtype=torch.bfloat16)
            row = []
            for vname in VARIANTS:
                use_variant(vname)
                try:
                    BACKEND.forward(layer, x, tw, ti, out, None)
                    first = out.clone()
                    g_us = graph_us(layer, x, tw, ti, out)
                    BACKEND.forward(layer, x, tw, ti, out, None)
                    same = torch.equal(first, out)
                    err = ((first.double() - ref).norm() / ref.norm()).item()
                    row.append(f"{vname}={g_us:.0f}us/{m_us / g_us:.2f}xM/"
                               f"{100 * floor / g_us:.0f}%/e{err:.2e}{'' if same else '/NONDET'}")
                except Exception as e:
                    row.append(f"{vname}=ERR({type(e).__name__}: {str(e)[:80]})")
                finally:
                    fused_moe.pick_config = DEFAULT_PICK
            log(f"var {name} M={M} marlin={m_us:.0f} floor={floor:.0f}: " + " ".join(row))
        del layer
        torch.cuda.empty_cache()


if __name__ == "__main__":
    log(f"device {torch.cuda.get_device_name(0)}; torch {torch.__version__}; "
        f"triton {triton.__version__}")
    which = sys.argv[1:] or ["schemes", "timing", "host", "sweep", "options", "models"]
    if "variants" in which:
        variants(*load_marlin())
    if os.environ.get("CHECK_VARIANT"):
        log(f"variant {os.environ['CHECK_VARIANT']} for the other sections")
        use_variant(os.environ["CHECK_VARIANT"])
    if "schemes" in which:
        correctness_schemes()
    if "timing" in which:
        timing(*load_marlin())
    if "host" in which:
        host_breakdown()
    if "sweep" in which:
        sweep()
    if "options" in which:
        correctness_options()
    if "models" in which:
        correctness_models()
    log(f"total {time.time() - START:.0f}s")
