"""Which reading of the checkpoint does a failing case's output match? For each case id (of a
suite), the backend's output once, then its rel_fro against the float64 reference of every
candidate reading: the case's declared one, that one with silu(gate) rounded before the
product toggled, each activation mode the scheme table offers for the same weights, and
weight scales rounded to bf16 / fp16. Then its rel_fro against the
output of every planted bug (conformance/mutants, the torch-based ones) whose targets hold
the case's scheme: a known bug class, computed on the same case. A failing case whose output
sits at the rounding level of one other reading is a declaration to fix (the kernel computes
that reading); one at the level of a planted bug is that bug (a finding, named); one that
matches none is a defect to reduce to a reproduction.

    python tools/reading_sweep.py --suite smoke --device cuda --backend vllm \\
        'vllm/fp8-w8a8/M17.K128.N128.E4.k2/bf16.silu/s0' ...

    python tools/reading_sweep.py --failures failures-vllm.csv --limit 40 --device cuda

(--failures: the case ids of a failures CSV, tools/engine_gpu_summary.py's, whose accuracy
check failed.) Prints one table per case (and writes them as CSV with --out). The sweep is
a triage aid: its readings are the harness's own (conformance/harness/numerics.py), so it
says nothing about a reading the harness does not hold, nor a bug it has not planted.
"""

from __future__ import annotations

import argparse
import re
import sys
import traceback

import torch

TOGGLED_KEYS = ("gate_activation_in_activation_dtype", "activation_round_half_away",
                "activation_fp8_float32")


def _readings(run) -> list[tuple[str, dict]]:
    from moecert.reference.schemes import SCHEMES, get_scheme

    info = get_scheme(run.variant.scheme)
    modes = {"none", run.variant.activation}
    for s in SCHEMES.values():  # every activation mode of a scheme storing the same weights
        if (s.element, s.weight_bits, s.packed) == (info.element, info.weight_bits, info.packed):
            modes.update(s.activation_modes)
    out = [("declared " + (", ".join(f"{k}={v}" for k, v in run.numerics.items()) or "-"),
            dict(run.numerics))]
    # the declared reading with one arithmetic key toggled: act(gate) rounded before the
    # product (a per-token or per-tensor scale re-rounds a row where that rounding moves its
    # amax: vLLM's CUDA silu_and_mul rounds it, an fp32 epilogue does not), and the
    # activation quantizers' float32 arithmetic (ties of the exact ratio land either side)
    for key in TOGGLED_KEYS:
        toggled = {**run.numerics, key: not run.numerics.get(key, False)}
        out.append((f"declared, {key}={toggled[key]}", toggled))
    for mode in sorted(modes):
        for scale_dtype in (None, "bfloat16", "float16"):
            n = {k: v for k, v in run.numerics.items()
                 if k not in ("activation", "weight_scale_dtype")}
            n["activation"] = mode
            if scale_dtype:
                n["weight_scale_dtype"] = scale_dtype
            out.append((f"activation={mode}" + (f", scales {scale_dtype}" if scale_dtype
                                                else ""), n))
    return out


def sweep(case, device: str) -> list[dict]:
    from moecert.conformance.harness.context import CaseRun
    from moecert.conformance.harness.metrics import error_metrics
    from moecert.conformance.harness.numerics import reading
    from moecert.reference import moe

    run = CaseRun(case, device)
    output = run.output.to(torch.float64)  # the backend's, as the accuracy check takes it
    x, w, ids, counts = run.inputs.tensors()
    kept = run._kept_checkpoint()  # the pristine draw, before the backend saw a copy
    raw = run.laid_out_checkpoint(kept if kept is not None
                                  else run._draw_checkpoint(run.case.seed))
    rows = []
    for name, numerics in _readings(run):
        try:
            ckpt = reading(raw, numerics)
            ref = moe(ckpt, x, w, ids, run.problem, expert_num_tokens=counts)
            rows.append(_row(case, name, error_metrics(output, ref)))
        except Exception as e:  # a reading the scheme table does not hold for this case
            rows.append({"case_id": case.case_id, "reading": name, "error":
                         f"{type(e).__name__}: {str(e)[:100]}"})
    rows += _planted_bugs(case, output, device)
    qc = getattr(getattr(getattr(run.layer, "experts", None), "quant_method", None),
                 "moe_quant_config", None)
    if qc is not None:  # an engine's own statement of what its kernel quantizes (vLLM)
        fields = {k: getattr(qc, k, "?") for k in ("quant_dtype", "block_shape",
                                                  "per_act_token_quant", "per_out_ch_quant")}
        a1 = getattr(qc, "a1_scale", None)
        fields["a1_scale"] = None if a1 is None else tuple(a1.shape)
        print(f"{case.case_id}: {run.backend_detail}; engine quant config {fields}")
    return rows


def _row(case, reading: str, metrics) -> dict:
    return {"case_id": case.case_id, "reading": reading, "rel_fro": float(metrics["rel_fro"]),
            "cosine": float(metrics["cosine"]), "norm_ratio": float(metrics["norm_ratio"])}


def _planted_bugs(case, output, device: str) -> list[dict]:
    """The failing output against each torch-based planted bug's output on the same case
    (same seed, so the same checkpoint and inputs)."""
    from dataclasses import replace

    from moecert.conformance.harness.context import CaseRun
    from moecert.conformance.harness.metrics import error_metrics
    from moecert.conformance.mutants import MUTANTS, register_mutants

    rows = []
    for m in MUTANTS.values():
        if isinstance(m.factory, str) or case.scheme not in m.targets:
            continue
        name = f"planted bug {m.name}"
        try:
            register_mutants([m.name])
            bugged = CaseRun(replace(case, backend=m.name), device).output
            rows.append(_row(case, name, error_metrics(output, bugged.to(torch.float64))))
        except Exception as e:  # the bug's backend does not take this case
            rows.append({"case_id": case.case_id, "reading": name,
                         "error": f"{type(e).__name__}: {str(e)[:100]}"})
    return rows


def main(argv=None) -> int:
    from moecert.conformance.harness.suites import build_suite

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("case_ids", nargs="*")
    p.add_argument("--failures", help="also the accuracy failures of this CSV")
    p.add_argument("--limit", type=int, default=0, help="at most this many case ids")
    p.add_argument("--one-per-layer", action="store_true",
                   help="one case id per variant and layer shape (M and seed aside)")
    p.add_argument("--suite", default="smoke")
    p.add_argument("--device", default="cpu")
    p.add_argument("--out", help="write every row as CSV")
    a = p.parse_args(argv)
    import pandas as pd

    if a.failures:
        f = pd.read_csv(a.failures)
        f = f[(f["check"] == "accuracy") & (f["status"] == "fail")]
        a.case_ids += [c for c in dict.fromkeys(f["case_id"]) if c not in a.case_ids]
    if a.one_per_layer:  # one case per variant and layer shape: M and the seed dropped
        seen = {}
        for c in a.case_ids:
            seen.setdefault(re.sub(r"/M\d+\.", "/", c).rsplit("/s", 1)[0], c)
        a.case_ids = list(seen.values())
    if a.limit:
        a.case_ids = a.case_ids[:a.limit]
    if not a.case_ids:
        print("reading_sweep: no case ids (give some, or --failures with accuracy failures)",
              file=sys.stderr)
        return 2
    backends = sorted({c.split("/", 1)[0] for c in a.case_ids})
    by_id = {c.case_id: c for c in build_suite(a.suite, backends=backends)}
    unknown = [c for c in a.case_ids if c not in by_id]
    if unknown:
        print(f"reading_sweep: not case ids of suite {a.suite} (skipped): "
              f"{', '.join(unknown)}", file=sys.stderr)
        if len(unknown) == len(a.case_ids):
            return 2
    rows = []
    for cid in (c for c in a.case_ids if c in by_id):
        try:
            got = sweep(by_id[cid], a.device)
        except Exception as e:
            traceback.print_exc()
            got = [{"case_id": cid, "reading": "-", "error": f"{type(e).__name__}: {e}"}]
        rows += got
        print(pd.DataFrame(got).drop(columns="case_id").to_string(index=False,
                                                                    float_format="%.3g"))
        print(f"^ {cid}\n", flush=True)
    if a.out:
        pd.DataFrame(rows).to_csv(a.out, index=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
