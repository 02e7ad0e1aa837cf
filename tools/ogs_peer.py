"""A measuring stick for MXFP4 W4A16 on Hopper: OpenAI's triton_kernels `matmul_ogs` MoE (what
vLLM runs gpt-oss with on an H100), timed on a model layer's shape beside `moecert bench` in
the same GPU call. Never a dependency of moecert: the package is the one vLLM's wheel vendors
(pure Python and Triton), taken from wherever it is importable (`import_triton_kernels`):

- a `triton_kernels` package on the path (e.g. unzipped from a wheel into .vllm/tk:
  `PYTHONPATH=.vllm/tk:$PYTHONPATH python tools/ogs_peer.py`), else
- the installed vLLM's `vllm/third_party/triton_kernels` (vLLM 0.25.1, carried to the GPU
  machine by tools/engine_carry.py: `PYTHONPATH=$(python3 tools/engine_carry.py env vllm |
  cut -d: -f1):$PYTHONPATH`), bound to the name `triton_kernels` as vLLM's own
  `import_triton_kernels` binds it, without importing vllm itself (its own imports are
  absolute, `triton_kernels.*`).

The first line printed says which (or why none). vLLM 0.25.1 bundles the v3.5.1 API (the
`routing` module, FusedActivation's third field the reduction), the one used below.

UNTESTED on a GPU: written on a CPU (triton_kernels does not run in Triton's interpreter).
The calls follow vLLM's gpt_oss_triton_kernels_moe.py and mxfp4_utils._swizzle_mxfp4 on sm90
(facts about the API; no code copied): the weights transposed to [E, K, N] with the E8M0
scales' group count padded to a multiple of 4, both in the library's default MXFP4 layouts,
split-K off; GEMM1 with the fused SwiGLU (reduction 2), GEMM2 scattering with the router
weights. Weights are random bytes (timing does not depend on values). The routings are
`moecert bench`'s own for this layer and M (`bench_routings`: its input sets' top-k ids, the
same experts touched; the mean over them), made outside the timing as the bench gives its
kernels the top-k ids (until 2026-12-01 one draw of its own: 47 experts at M 16 where the
bench's routings touch more, so the peer moved ~10% fewer bytes); a second time
puts triton_kernels' fused `routing(logits, topk)` (softmax, top-k and the sorted metadata in
one launch) in the graph, as vLLM 0.25.1's `triton_kernel_moe_forward` runs it every call
without EP. moecert's layer sorts its top-k ids (align.py) inside its time, so the first
number leaves out work the layer pays and the second adds the top-k selection it does not.
Prints per M: us (CUDA-graph replay and do_bench, the faster), the bytes the call must move
(the touched experts' codes and scales, x and out) and % of the memory floor at the copy
bandwidth measured here, as `moecert bench` defines it.
"""
from __future__ import annotations

import argparse
import functools

import torch
import triton

SHAPES = {"gpt-oss-120b": (128, 2880, 2880, 4)}  # (E, K hidden, N intermediate, topk)
MX = 32  # columns per E8M0 scale
VENDORED = ("third_party", "triton_kernels")  # where vLLM's package keeps it


def import_triton_kernels() -> str:
    """Make `import triton_kernels` work; returns where it came from. RuntimeError with
    the reason when neither a `triton_kernels` package nor vLLM's copy is on the path."""
    import importlib.util
    import sys
    from pathlib import Path

    if importlib.util.find_spec("triton_kernels") is not None:
        import triton_kernels

        return f"triton_kernels from {Path(triton_kernels.__file__).parent}"
    vllm = importlib.util.find_spec("vllm")  # finds the folder, imports nothing
    if vllm is None or not vllm.submodule_search_locations:
        raise RuntimeError("neither triton_kernels nor vllm is importable (PYTHONPATH: "
                           "`python3 tools/engine_carry.py env vllm`, or .vllm/tk)")
    folder = Path(next(iter(vllm.submodule_search_locations))).joinpath(*VENDORED)
    if not (folder / "__init__.py").is_file():
        raise RuntimeError(f"vllm at {folder.parents[1]} vendors no triton_kernels ({folder})")
    spec = importlib.util.spec_from_file_location(
        "triton_kernels", folder / "__init__.py", submodule_search_locations=[str(folder)])
    module = importlib.util.module_from_spec(spec)
    sys.modules["triton_kernels"] = module
    spec.loader.exec_module(module)
    return f"triton_kernels from vLLM's {folder}"


def copy_bandwidth(gib: int = 2) -> float:
    """Device-to-device copy, bytes read plus written per second."""
    x = torch.empty(gib << 30, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    ms = triton.testing.do_bench(lambda: y.copy_(x), warmup=50, rep=200, return_mode="median")
    return 2 * x.numel() / (ms * 1e-3)


def mxfp4_weight(E: int, rows: int, K: int):
    """Random e2m1 bytes [E, rows, K / 2] and E8M0 scales [E, rows, K / 32] (near 2^-4),
    converted to the library's Hopper layouts; returns (weight, scale, bytes in HBM)."""
    import triton_kernels.matmul_ogs_details.opt_flags as opt_flags
    from triton_kernels.tensor import FP4, convert_layout, wrap_torch_tensor
    from triton_kernels.tensor_details import layout

    opt_flags.update_opt_flags_constraints({"split_k": 1})
    q = torch.randint(0, 256, (E, rows, K // 2), dtype=torch.uint8, device="cuda")
    s = torch.randint(119, 127, (E, rows, K // MX), dtype=torch.uint8, device="cuda")
    s = torch.nn.functional.pad(s, (0, -s.shape[-1] % 4))
    value_layout, value_opts = layout.make_default_matmul_mxfp4_w_layout(mx_axis=1)
    scale_layout, scale_opts = layout.make_default_matmul_mxfp4_w_scale_layout(
        mx_axis=1, num_warps=8)
    w = convert_layout(wrap_torch_tensor(q.transpose(-2, -1), dtype=FP4), value_layout,
                       **value_opts)
    ws = convert_layout(wrap_torch_tensor(s.transpose(-2, -1)), scale_layout, **scale_opts)
    return w, ws, (q.numel() + s.numel()) // E


@functools.cache
def layer_weights(E: int, K: int, N: int) -> tuple:
    """Both linears' weights, scales, bytes per expert and biases, made once for every M
    (gpt-oss-120b's are 2 GB to fill and convert)."""
    torch.manual_seed(0)
    w13, s13, bytes13 = mxfp4_weight(E, 2 * N, K)
    w2, s2, bytes2 = mxfp4_weight(E, K, N)
    b13 = torch.randn(E, 2 * N, device="cuda")
    b2 = torch.randn(E, K, device="cuda")
    return w13, s13, bytes13, w2, s2, bytes2, b13, b2


def bench_routings(M: int, model: str, device: str = "cuda") -> list[torch.Tensor]:
    """The top-k ids `moecert bench` times this layer on at M (its input sets: the same
    seeds, so the same routings and the same experts touched), int64 [M, topk] each. The
    bench rotates over them; a peer timed on another draw moves other bytes (at M = 16 the
    experts touched by 64 assignments over 128 vary by ~10% between draws)."""
    from moecert.conformance.performance import bench
    from moecert.reference.models import MODELS

    problem = bench.layer_problem(model, MODELS[model], "mxfp4", M)
    # cache 0: the two sets the bench takes when each moves more than the L2 (gpt-oss does)
    sets = bench.input_sets(problem, 0.0, 0.0, torch.device(device), 0, bench.Plan(
        device, (), (), {}).seed + 1)
    return [s.ids.long() for s in sets]


def forced_logits(ids: torch.Tensor, E: int) -> torch.Tensor:
    """Router logits whose top-k is exactly `ids` (each row's chosen experts 10 above every
    other logit), so that routing() selects them itself."""
    logits = 0.1 * torch.randn(ids.shape[0], E, device=ids.device)
    return logits.scatter_add_(1, ids, torch.full(ids.shape, 10.0, device=ids.device))


def time_layer(E: int, K: int, N: int, topk: int, M: int, bandwidth: float,
               model: str) -> dict:
    import triton_kernels.swiglu
    from triton_kernels.matmul_ogs import (
        FlexCtx,
        FnSpecs,
        FusedActivation,
        PrecisionConfig,
        matmul_ogs,
    )
    from triton_kernels.numerics import InFlexData
    from triton_kernels.routing import routing

    w13, s13, bytes13, w2, s2, bytes2, b13, b2 = layer_weights(E, K, N)
    torch.manual_seed(M)
    pc13 = PrecisionConfig(weight_scale=s13, flex_ctx=FlexCtx(rhs_data=InFlexData()))
    pc2 = PrecisionConfig(weight_scale=s2, flex_ctx=FlexCtx(rhs_data=InFlexData()))
    act = FusedActivation(FnSpecs("swiglu", triton_kernels.swiglu.swiglu_fn,
                                  ("alpha", "limit")), (1.702, 7.0), 2)
    x = torch.randn(M, K, dtype=torch.bfloat16, device="cuda")
    inter = torch.empty(1, M * topk, N, dtype=torch.bfloat16, device="cuda")
    out = torch.empty(1, M, K, dtype=torch.bfloat16, device="cuda")

    def gemms(rdata, gather, scatter):
        matmul_ogs(x, w13, b13, rdata, gather_indx=gather, precision_config=pc13,
                   fused_activation=act, y=inter)
        matmul_ogs(inter.view(M * topk, N), w2, b2, rdata, scatter_indx=scatter,
                   precision_config=pc2, gammas=rdata.gate_scal, y=out)

    rows = []
    for ids in bench_routings(M, model):
        logits = forced_logits(ids, E)
        made = routing(logits, topk)
        chosen = made[0].expt_hist.nonzero().numel()  # experts with tokens: ids' own
        touched = ids.unique().numel()
        assert chosen == touched, f"routing() chose {chosen} experts, the ids {touched}"

        def forward(made=made):
            gemms(*made)

        def routed(logits=logits):  # vLLM's gpt-oss forward without EP: routing() each call
            gemms(*routing(logits, topk))

        forward()
        routed()
        torch.cuda.synchronize()
        ms_call = triton.testing.do_bench(forward, warmup=10, rep=200, return_mode="median")
        ms_graph = triton.testing.do_bench_cudagraph(forward, rep=200, return_mode="median")
        ms_routed = triton.testing.do_bench_cudagraph(routed, rep=200, return_mode="median")
        moved = touched * (bytes13 + bytes2) + 2 * x.numel() * 2
        rows.append((min(ms_call, ms_graph) * 1e-3, ms_call, ms_graph, ms_routed, touched,
                     moved))
    n = len(rows)
    seconds = sum(r[0] for r in rows) / n
    return {"M": M, "experts_touched": "/".join(str(r[4]) for r in rows),
            "us_call": sum(r[1] for r in rows) / n * 1e3,
            "us_graph": sum(r[2] for r in rows) / n * 1e3, "us": seconds * 1e6,
            "us_routed": sum(r[3] for r in rows) / n * 1e3,
            "memory_floor_pct": 100 * sum(r[5] for r in rows) / n / bandwidth / seconds}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="gpt-oss-120b", choices=list(SHAPES))
    p.add_argument("--M", default="1,16,64", help="tokens per call, comma-separated")
    args = p.parse_args()
    E, K, N, topk = SHAPES[args.model]
    try:
        origin = import_triton_kernels()
        import triton_kernels.matmul_ogs  # noqa: F401  (what time_layer needs, loaded now)
    except Exception as e:  # the reason kept in the log: the peer is then not measured
        print(f"ogs: not available: {type(e).__name__}: {e}")
        raise SystemExit(1) from None
    print(f"ogs: {origin}", flush=True)
    bandwidth = copy_bandwidth()
    print(f"{torch.cuda.get_device_name()}: copy {bandwidth / 1e12:.2f} TB/s; torch "
          f"{torch.__version__}, triton {triton.__version__}; {args.model} E={E} K={K} N={N} "
          f"topk={topk}", flush=True)
    for M in (int(m) for m in args.M.split(",")):
        try:
            r = time_layer(E, K, N, topk, M, bandwidth, args.model)
        except Exception as e:  # one M failing costs that row, not the others
            print(f"ogs/mxfp4/{args.model}/M{M}: error: {type(e).__name__}: {e}", flush=True)
            continue
        print(f"ogs/mxfp4/{args.model}/M{M}: {r['us']:.1f} us (call {r['us_call']:.1f}, "
              f"graph {r['us_graph']:.1f}), {r['experts_touched']} experts, "
              f"{r['memory_floor_pct']:.1f}% of the memory floor; with routing() in the "
              f"graph {r['us_routed']:.1f} us", flush=True)


if __name__ == "__main__":
    main()
