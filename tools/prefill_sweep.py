"""Prefill tiles of the Triton MoE GEMM, side by side on one GPU: for each model layer, scheme
and M, both GEMMs run with the decode tile (`heuristics.pick_config` without the expert count:
BLOCK_M 16, what main ran at every M) and with each candidate of CANDIDATES; every candidate's
output is checked against the decode tile's (`tune.candidate_bound`: what another fp32 summation
order may change, and the rounding of int4 weights a one-dot tile does) before it is timed, as
`moecert tune` does. Prints per GEMM and candidate: us
(CUDA-graph replay, triton's do_bench median), TFLOP/s and % of the bf16 GEMM rate measured in
the same process; then per layer and M the best pair (one BLOCK_M for both GEMMs).

    python tools/prefill_sweep.py --model mixtral-8x7b --scheme bf16 --M 1024,4096
    python tools/prefill_sweep.py --model mixtral-8x7b --scheme gptq-int4 --set swapped

(`--set swapped`: the weight tile as the MMA's first operand, SWAPPED; `--set all` both.)

A measuring tool for choosing `heuristics.pick_config`'s prefill tile (docs/speed.md, issue 34),
not a tuner: `moecert tune` writes the device's file. `--device cpu --shape E,K,N,topk` with
TRITON_INTERPRET=1 runs it through the interpreter on a small layer, with wall-clock times
(meaningless as speeds: a dry run of the tool itself).
"""

from __future__ import annotations

import argparse
import time

import torch

# (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages, GROUP_M); weights in nibble planes run
# at their span's BLOCK_K whatever is asked
CANDIDATES = [
    (64, 128, 64, 4, 4, 1),
    (128, 128, 64, 8, 4, 1),
    (128, 128, 64, 8, 4, 8),
    (128, 256, 64, 8, 3, 1),
    (128, 256, 64, 8, 3, 8),
    (128, 128, 128, 8, 3, 1),
]
# The same fields, the weight tile as the MMA's first operand (SWAP_AB): the one operand a
# Hopper wgmma may take from registers, where the nibble weights are decoded; the tuner tries
# swapped tiles only up to 16 rows per expert (tune.SWAP_MAX_ROWS), so no prefill tile with
# it had been timed (2026-12-01: the FP4 prefill dispatch decodes into a workspace instead).
# `--set swapped` runs these.
SWAPPED = [
    (64, 128, 128, 4, 4, 1),
    (128, 64, 128, 4, 4, 1),
    (128, 128, 64, 8, 3, 1),
    (128, 128, 128, 8, 3, 1),
    (128, 128, 128, 8, 4, 8),
    (256, 128, 64, 8, 3, 1),
]


def config(bm, bn, bk, warps, stages, group_m, swap=False) -> dict:
    return {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "num_warps": warps,
            "num_stages": stages, "FAST_I4": True, "GROUP_M": group_m, "SWAP_AB": swap}


def label(c: dict) -> str:
    group = c.get("GROUP_M", 1)
    return (f"m{c['BLOCK_M']}n{c['BLOCK_N']}k{c['BLOCK_K']}w{c['num_warps']}"
            f"s{c['num_stages']}{f'g{group}' if group > 1 else ''}"
            f"{'-swap' if c.get('SWAP_AB') else ''}")


def wall_timer(run, config) -> float:
    """Microseconds of one call on the CPU (the dry run's timer)."""
    run()
    t0 = time.perf_counter()
    run()
    return 1e6 * (time.perf_counter() - t0)


def gemm_rate(device: str) -> float:
    import triton

    if device == "cpu":
        a = torch.randn(256, 256)
        t0 = time.perf_counter()
        a @ a
        return 2 * 256**3 / (time.perf_counter() - t0)
    n = 8192
    a, b = (torch.randn(n, n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    out = torch.empty_like(a)
    ms = triton.testing.do_bench(lambda: torch.matmul(a, b, out=out), warmup=20, rep=200,
                                 return_mode="median")
    return 2 * n**3 / (ms * 1e-3)


def main() -> None:
    from moecert.kernels.triton_moe import heuristics
    from moecert.kernels.triton_moe.backend import TritonBackend
    from moecert.kernels.triton_moe.tune import _try, candidate_bound
    from moecert.kernels.triton_moe.tune_stages import (
        LayerStage,
        do_bench_timer,
        weight_variants,
    )
    from moecert.reference import SCHEMES, MoEProblem, make_inputs, random_checkpoint
    from moecert.reference.models import MODELS

    p = argparse.ArgumentParser()
    p.add_argument("--model", action="append", default=[])
    p.add_argument("--shape", action="append", default=[], metavar="E,K,N,TOPK",
                   help="a layer shape of your own (repeatable)")
    p.add_argument("--device", default="cuda")
    p.add_argument("--scheme", action="append", required=True)
    p.add_argument("--M", default="1024,4096")
    p.add_argument("--set", choices=("plain", "swapped", "all"), default="plain",
                   help="CANDIDATES (plain), SWAPPED, or both")
    p.add_argument("--candidates", default="", help="indices into the set (default all)")
    args = p.parse_args()
    ms = [int(m) for m in args.M.split(",")]
    pool = {"plain": [(*t, False) for t in CANDIDATES],
            "swapped": [(*t, True) for t in SWAPPED]}
    pool["all"] = pool["plain"] + pool["swapped"]
    pool = pool[args.set]
    cands = [pool[int(i)] for i in args.candidates.split(",")] if args.candidates else pool
    device = args.device
    timer = do_bench_timer if device == "cuda" else wall_timer
    rate = gemm_rate(device)
    name = torch.cuda.get_device_name(0) if device == "cuda" else "cpu"
    print(f"{name}: bf16 GEMM {rate / 1e12:.3g} TFLOP/s")
    backend = TritonBackend()
    layers = {m: MODELS[m] for m in args.model}
    layers.update({s: tuple(int(v) for v in s.split(",")) for s in args.shape})
    for model, (E, K, N, topk) in layers.items():
        for scheme in args.scheme:
            t0 = time.perf_counter()
            attrs = {"group_size": 128} if SCHEMES[scheme].packed else {}
            P = MoEProblem(M=1, K=K, N=N, E=E, topk=topk, dtype="bf16")
            layer = backend.create_layer(random_checkpoint(scheme, P, seed=0, device=device,
                                                           **attrs), P)
            backend.process_weights_after_loading(layer)
            variants = weight_variants(layer)
            for M in ms:
                x, w, ids = make_inputs(MoEProblem(M=M, K=K, N=N, E=E, topk=topk), seed=M)
                stage = LayerStage(layer, x.to(device), w.to(device), ids.to(device), variants)
                n = stage.n
                base = heuristics.pick_config(n)  # the decode tile: main's at every M
                best = {}
                for g in (1, 2):
                    Ng, Kg = stage.shape(g)
                    flops = 2 * n * Ng * Kg
                    ref = stage.run(g, base).clone()
                    bound = candidate_bound(stage, g, ref)  # (int4 one dot rounds)
                    for c in [base] + [config(*t) for t in cands]:
                        tried = _try(stage, g, c, timer, ref, bound)
                        if tried.us is None:
                            print(f"  {model} {scheme} M={M} gemm{g} {label(c)}: REJECTED "
                                  f"{tried.why}")
                            continue
                        tf = flops / (tried.us * 1e-6)
                        per_bm = best.setdefault(c["BLOCK_M"], {})
                        per_bm[g] = min(per_bm.get(g, (float("inf"), "")), (tried.us, label(c)))
                        print(f"  {model} {scheme} M={M} gemm{g} {label(c)}"
                              f"{' (base)' if c is base else ''}: {tried.us:.1f} us "
                              f"{tf / 1e12:.0f} TFLOP/s {100 * tf / rate:.1f}%", flush=True)
                for bm, gs in sorted(best.items()):
                    if len(gs) == 2:
                        us = gs[1][0] + gs[2][0]
                        flops = 2 * n * (stage.shape(1)[0] * K + stage.shape(2)[0] * N)
                        print(f"BEST {model} {scheme} M={M} BLOCK_M={bm}: {us:.1f} us "
                              f"({100 * flops / (us * 1e-6) / rate:.1f}% of GEMM rate) "
                              f"{gs[1][1]} / {gs[2][1]}", flush=True)
                del stage
            print(f"  {model} {scheme}: {time.perf_counter() - t0:.0f} s", flush=True)
            del layer, variants
            if device == "cuda":
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
