"""`moecert bench reference`: how long the float64 reference takes on a model-sized layer.

The checkpoint is random packed GPTQ int4 (group 128, symmetric, gptq_v2) drawn directly in
its storage layout by `random_checkpoint`: timing does not depend on the weights' values, and
synthesizing 11 G weights from floats would take longer than the measurement.
"""

from __future__ import annotations

import time

import torch
from moecert.reference import Checkpoint, MoEProblem, make_inputs, moe, random_checkpoint
from moecert.reference.models import MODELS, RELEASES

SHAPES = {  # (E, K, N, topk, M): a small layer, then every model layer at M = 256 (not those
    # released in one other scheme: gpt-oss's K = 2880 holds no group-128 int4 checkpoint)
    "smoke": (8, 256, 128, 2, 16),
    **{name: (*shape, 256) for name, shape in MODELS.items() if name not in RELEASES},
}


def random_gptq_int4(problem: MoEProblem, device: str, group_size: int = 128,
                     seed: int = 0) -> Checkpoint:
    return random_checkpoint("gptq-int4", problem, seed=seed, device=device,
                             group_size=group_size, checkpoint_format="gptq_v2")


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
