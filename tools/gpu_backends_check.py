"""Every built-in backend against the float64 reference on a GPU, at model layer sizes.

Run on the GPU machine (see README "GPU checks"): for each model shape, scheme variant and
backend that claims it, the max abs error and the relative Frobenius error of the backend's
output against `moecert.reference.moe` computed on the same GPU in float64. Checkpoints are
drawn with `random_checkpoint` on the GPU at the full layer size (synthesizing from floats
takes seconds per expert at these sizes); the expert-parallel case holds every 8th expert.

    python tools/gpu_backends_check.py [--quick] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback

import torch
from moecert.kernels import get_backend
from moecert.kernels.oracle import scheme_variants
from moecert.reference import SCHEMES, MoEProblem, make_inputs, moe, random_checkpoint
from moecert.reference.models import MODELS

BACKENDS = ("triton", "torch", "xpu")


def problem_for(model: str, M: int, dtype: str = "bf16", ep: bool = False, **kw
                ) -> MoEProblem:
    E, K, N, topk = MODELS[model]
    if not ep:
        return MoEProblem(M=M, K=K, N=N, E=E, topk=topk, dtype=dtype, **kw)
    stride = 8 if E >= 16 else 2  # this rank holds every stride-th expert: holes everywhere
    expert_map = tuple(g // stride if g % stride == 0 else -1 for g in range(E))
    return MoEProblem(M=M, K=K, N=N, E=E // stride, topk=topk, dtype=dtype,
                      expert_map=expert_map, **kw)


def errors(y: torch.Tensor, ref: torch.Tensor) -> dict:
    d = y.to(torch.float64) - ref
    return {"max_abs": float(d.abs().max()) if d.numel() else 0.0,
            "rel_fro": float(d.norm() / ref.norm()) if ref.norm() > 0 else float(d.norm()),
            "ref_max": float(ref.abs().max()) if ref.numel() else 0.0,
            "nonfinite": int((~torch.isfinite(y)).sum())}


def run_case(model, quant, M, dtype, rows, **problem_kw):
    E, K, N, _ = MODELS[model]
    if not quant.info.quantized and E * 3 * N * K * 2 > 8 << 30:
        problem_kw["ep"] = True  # 22 GB of 16-bit weights per copy: one rank's share
    P = problem_for(model, M, dtype, **problem_kw)
    attrs = {k: v for k, v in quant.__dict__.items() if k != "scheme"}
    t0 = time.perf_counter()
    ckpt = random_checkpoint(quant.scheme, P, seed=0, device="cuda", **attrs)
    x, w, ids = make_inputs(P, seed=1)
    x, w, ids = x.cuda(), w.cuda(), ids.cuda()
    ref = moe(ckpt, x, w, ids, P)
    torch.cuda.synchronize()
    ref_s = time.perf_counter() - t0
    for name in BACKENDS:
        backend = get_backend(name)
        row = {"model": model, "config": quant.describe(), "M": M, "dtype": dtype,
               "options": ",".join(f"{k}={v}" for k, v in problem_kw.items()), "backend": name}
        why = backend.supports(quant, P)
        if why:
            continue
        try:
            layer = backend.create_layer(ckpt, P)
            backend.process_weights_after_loading(layer)
            y = backend.apply(layer, x, w, ids)
            torch.cuda.synchronize()
            row.update(errors(y, ref))
            del layer
        except Exception as e:
            row["error"] = f"{type(e).__name__}: {e}"
            traceback.print_exc()
        row["ref_s"] = round(ref_s, 2)
        row["E_local"] = P.E
        rows.append(row)
        torch.cuda.empty_cache()
        print(json.dumps(row), flush=True)
    torch.cuda.empty_cache()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true",
                    help="default variants only (always so for the models after the first)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--models", nargs="*", default=list(MODELS))
    args = ap.parse_args()
    print(f"device {torch.cuda.get_device_name()} torch {torch.__version__}", flush=True)
    rows: list[dict] = []
    for i, model in enumerate(args.models):
        for scheme in SCHEMES:
            variants = scheme_variants(scheme)
            for quant in variants[:1] if args.quick or i else variants:
                run_case(model, quant, 64, "bf16", rows)
        # the options, on one packed int4 scheme and one fp8 scheme
        for scheme in ("gptq-int4", "fp8-w8a16"):
            quant = scheme_variants(scheme)[0]
            run_case(model, quant, 1, "bf16", rows)
            run_case(model, quant, 256, "fp16", rows, bias=True)
            run_case(model, quant, 64, "bf16", rows, activation="swigluoai", bias=True)
            run_case(model, quant, 64, "bf16", rows, activation="relu2")
            run_case(model, quant, 64, "bf16", rows, ep=True)
    bad = [r for r in rows if "error" in r or r.get("nonfinite")]
    worst = sorted(rows, key=lambda r: -r.get("rel_fro", 0))[:10]
    print("\nworst rel_fro:")
    for r in worst:
        print(f"  {r['backend']:<7} {r['model']:<14} {r['config']:<40} M={r['M']} "
              f"{r['dtype']} {r['options']:<30} rel_fro={r.get('rel_fro', float('nan')):.3e}")
    print(f"\n{len(rows)} rows, {len(bad)} with errors or non-finite outputs")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
