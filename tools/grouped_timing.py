"""Time the grouped backend (torch._grouped_mm) against triton on model layer shapes, CUDA only.

A stop-gap until `moecert bench` times backends (issue 13): plain `apply()` after warm-up,
CUDA events, median of --reps, the two GEMMs' TFLOP/s (2 * assignments * (w13_rows * K +
K * N)). Checkpoints are random in their storage layout (`random_checkpoint`), as in
tools/gpu_backends_check.py; nothing here checks numbers (`moecert run --suite ci` does).

    python tools/grouped_timing.py [--models mixtral-8x7b ...] [--M 256 1024]
        [--schemes bf16 gptq-int4] [--backends grouped triton] [--reps 20]
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch
from moecert.kernels import get_backend
from moecert.reference import MoEProblem, make_inputs, random_checkpoint
from moecert.reference.models import MODELS


def time_apply(backend, layer, args, reps: int) -> float:
    """Median milliseconds of one apply()."""
    for _ in range(3):
        backend.apply(layer, *args)
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        backend.apply(layer, *args)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", nargs="*", default=["mixtral-8x7b", "qwen3-30b-a3b"])
    ap.add_argument("--M", nargs="*", type=int, default=[16, 256, 1024])
    ap.add_argument("--schemes", nargs="*", default=["bf16", "gptq-int4", "fp8-w8a16"])
    ap.add_argument("--backends", nargs="*", default=["grouped", "triton"])
    ap.add_argument("--reps", type=int, default=20)
    a = ap.parse_args()
    print(json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__}))
    for model in a.models:
        E, K, N, topk = MODELS[model]
        for scheme in a.schemes:
            ckpt = random_checkpoint(scheme, MoEProblem(M=1, K=K, N=N, E=E, topk=topk),
                                     device="cuda")
            for name in a.backends:
                backend = get_backend(name)
                P = MoEProblem(M=max(a.M), K=K, N=N, E=E, topk=topk)
                layer = backend.create_layer(ckpt, P)
                backend.process_weights_after_loading(layer)
                for M in a.M:
                    P = MoEProblem(M=M, K=K, N=N, E=E, topk=topk)  # apply reads M off x
                    args = tuple(t.cuda() for t in make_inputs(P, seed=1))
                    ms = time_apply(backend, layer, args, a.reps)
                    flop = 2 * M * topk * (P.w13_rows * K + K * N)
                    print(json.dumps({"model": model, "scheme": scheme, "backend": name,
                                      "M": M, "ms": round(ms, 4),
                                      "tflops": round(flop / ms / 1e9, 1)}), flush=True)
                del layer
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
