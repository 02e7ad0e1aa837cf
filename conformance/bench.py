"""`moecert bench reference`: how long the float64 reference takes on a model-sized layer.

The checkpoint is random packed GPTQ int4 (group 128, symmetric, gptq_v2) built directly in
its storage layout: timing does not depend on the weights' values, and synthesizing 11 G
weights from floats would take longer than the measurement.
"""

from __future__ import annotations

import time

import torch
from moecert.reference import Checkpoint, MoEProblem, make_inputs, moe

SHAPES = {  # (E, K, N, topk, M)
    "smoke": (8, 256, 128, 2, 16),
    "qwen3-30b-a3b": (128, 2048, 768, 8, 256),
    "mixtral-8x7b": (8, 4096, 14336, 2, 256),
    "deepseek-v3": (256, 7168, 2048, 8, 256),
}


def random_gptq_int4(problem: MoEProblem, device: str, group_size: int = 128,
                     seed: int = 0) -> Checkpoint:
    gen = torch.Generator(device=device).manual_seed(seed)
    P, tensors = problem, {}
    for p, (n_out, n_in) in {"w13": (2 * P.N, P.K), "w2": (P.K, P.N)}.items():
        groups = n_in // group_size
        tensors[f"{p}_qweight"] = torch.randint(-2**31, 2**31 - 1, (P.E, n_in // 8, n_out),
                                                generator=gen, device=device, dtype=torch.int32)
        tensors[f"{p}_scales"] = (0.01 + 0.01 * torch.rand(P.E, groups, n_out, generator=gen,
                                                           device=device)).half()
    return Checkpoint("gptq-int4", tensors, group_size=group_size, checkpoint_format="gptq_v2")


def bench_reference(shape: str, device: str, repeats: int = 1) -> dict:
    E, K, N, topk, M = SHAPES[shape]
    P = MoEProblem(M=M, K=K, N=N, E=E, topk=topk)
    ckpt = random_gptq_int4(P, device)
    x, w, ids = make_inputs(P, seed=1)
    if device != "cpu":
        torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        y = moe(ckpt, x.to(device), w.to(device), ids.to(device), P)
        if device != "cpu":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return {"shape": shape, "device": device, "E": E, "K": K, "N": N, "topk": topk, "M": M,
            "seconds": min(times), "all_seconds": times, "finite": bool(torch.isfinite(y).all()),
            "torch": torch.__version__, "threads": torch.get_num_threads()}
