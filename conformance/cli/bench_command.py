"""`moecert bench`: the command line of the bench (conformance/performance/bench.py: what a
row times, its floors and peers)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from moecert.reference.models import MODEL_TOKENS, MODELS
from moecert.reports.store import Journal

from ..harness.execute import new_run_id
from ..performance.bench import (
    DEFAULT_BUDGET_S,
    DEFAULT_REPS,
    MODES,
    REFERENCE_SHAPES,
    SUITE,
    Bench,
    Plan,
    bench_reference,
)
from ..performance.timing import MIN_REPS
from .arguments import (
    add_backends,
    add_device,
    add_import,
    add_models,
    add_results,
    add_run_id,
    add_schemes,
)


def add_arguments(p) -> None:
    from ..harness.option_values import (
        layer_spec,
        m_list,
        positive_int,
        positive_seconds,
        variant_spec,
    )

    p.add_argument("target", nargs="?", default="backends", choices=["backends", "reference"],
                   help="backends (default): time the backends; reference: time the float64 "
                        "reference on one layer (--shape, --repeats)")
    add_device(p)
    add_backends(p)
    add_schemes(p)  # each scheme's default variant, unless --variant
    p.add_argument("--variant", dest="variants", action="append", default=[],
                   type=variant_spec, metavar="KEY=VALUE[,KEY=VALUE...]",
                   help="time this variant of each --scheme instead of its default, e.g. "
                        "weight_strategy=channel,activation=dynamic-token (repeatable; keys: "
                        "the checkpoint attributes)")
    add_models(p, "time this model's layer (default: every model)")
    p.add_argument("--layer", action="append", default=[], type=layer_spec,
                   metavar="NAME=E,K,N,TOPK",
                   help="time this layer shape too (instead of the models when no --model)")
    p.add_argument("--M", dest="Ms", type=m_list, default=MODEL_TOKENS, metavar="LIST",
                   help=f"tokens per call, comma-separated (default "
                        f"{','.join(map(str, MODEL_TOKENS))})")
    p.add_argument("--mode", action="append", default=[], choices=MODES,
                   help="apply or graph (repeatable; default: both)")
    p.add_argument("--repeats", type=positive_int, default=None,
                   help="timed calls per row, the median reported (default 100 on CUDA, 10 on "
                        "the CPU; with reference: runs, the fastest reported, default 1)")
    p.add_argument("--warmup", type=positive_int, default=None,
                   help="untimed calls first (default 10 on CUDA, 2 on the CPU)")
    p.add_argument("--max-seconds", type=positive_seconds, default=DEFAULT_BUDGET_S,
                   help=f"wall time of a row's timed calls, fewer repeats beyond it (at least "
                        f"{MIN_REPS}; default {DEFAULT_BUDGET_S})")
    add_results(p)
    add_run_id(p)
    p.add_argument("--marlin-lib", metavar="PATH",
                   help="vLLM's _moe_C_stable_libtorch.abi3.so: time Marlin on the gptq-int4 "
                        "g128, mxfp4 and nvfp4 bf16 layers (column ratio_to_marlin; CUDA "
                        "only)")
    p.add_argument("--marlin-anchor", metavar="FILE", default=None,
                   help="with --marlin-lib: the script that loads vLLM's Marlin op (default: "
                        "$MOECERT_MARLIN_ANCHOR, else the one kept beside a development "
                        "checkout)")
    add_import(p)
    p.add_argument("--shape", default="smoke", choices=list(REFERENCE_SHAPES),
                   help="with reference: the layer")


def main(args) -> int:
    """0 every claimed row timed (or skipped with its reason), 1 a row errored or none was
    timed, 2 a usage error."""
    from ..harness.option_values import device_or_default

    args.device = device_or_default(args.device)
    if args.target == "reference":
        result = bench_reference(args.shape, args.device, args.repeats or 1)
        print(json.dumps(result))
        return 0 if result["finite"] else 1
    from ..harness.imports import import_modules
    from ..harness.option_values import UsageError, check_backends, writable_folder
    from ..harness.runner import available_backends

    import_modules(args.imports)
    plan = plan_from(args, check_backends(args.backend) if args.backend
                     else available_backends(args.device))
    marlin = None
    if args.marlin_lib:
        from ..performance.marlin_peer import default_anchor, load_marlin, named_anchor

        if not Path(args.marlin_lib).is_file():
            raise UsageError(f"--marlin-lib {args.marlin_lib}: no such file")
        named = named_anchor(args.marlin_anchor)
        if named and not Path(named[1]).is_file():
            raise UsageError(f"{named[0]}{'' if named[0].endswith('=') else ' '}{named[1]}: "
                             "no such file (the script that loads vLLM's Marlin op)")
        marlin, why = load_marlin(args.marlin_lib, args.marlin_anchor or default_anchor(),
                                  torch.device(args.device))
        if why:
            print(f"ratio_to_marlin: not available: {why}", file=sys.stderr)
    writable_folder(args.results)
    run = args.run_id or new_run_id()
    journal = Journal(args.results, results_label(Path(args.results), run), suite=SUITE)
    variants = f" x {len(plan.variants)} variant(s)" if args.variants else ""
    print(f"moecert bench {run}: {', '.join(plan.backends)} x {len(plan.schemes)} scheme(s)"
          f"{variants} x "
          f"{', '.join(plan.layers)} x M {','.join(map(str, plan.Ms))} on {plan.device} "
          f"-> {journal.path}", file=sys.stderr)
    rows = Bench(plan, journal, marlin, echo=lambda s: print(s, flush=True)).run()
    path = journal.finish()
    errors = sum(r["status"] == "error" for r in rows)
    timed = sum(r["status"] == "pass" for r in rows)
    if not rows:
        print("nothing to time: no chosen backend claims a chosen layer in a chosen scheme "
              "(a model runs in the schemes it ships in: reference/models.py)")
    print(f"{len(rows)} rows: {timed} timed, {errors} errors -> {path}")
    print(f"report: moecert report {path} [--baseline EARLIER]")
    return 1 if errors or not timed else 0


def results_label(folder: Path, run: str) -> str:
    """`<run>.bench`, or `<run>.bench-2`, ... when that run has bench results here already:
    several invocations with one --run-id (a model each) make one run for the report."""
    label, n = f"{run}.{SUITE}", 1
    while any(folder.glob(f"{label}.*")):
        n += 1
        label = f"{run}.{SUITE}-{n}"
    return label


def plan_from(args, backends: list[str]) -> Plan:
    from moecert.reference import SCHEME_NAMES

    from ..harness.option_values import VARIANT_EXAMPLE, UsageError, check_variant

    reps, warmup = DEFAULT_REPS[torch.device(args.device).type]
    layers = {m: MODELS[m] for m in args.model}
    layers.update(args.layer)
    if not args.model and not args.layer:
        layers = dict(MODELS)
    if args.variants and not args.scheme:
        raise UsageError(f"--variant needs --scheme: its keys and values are a scheme's (e.g. "
                         f"--scheme fp8-w8a8 --variant {VARIANT_EXAMPLE})")
    for variant in args.variants:
        for scheme in args.scheme:
            check_variant(scheme, variant)
    return Plan(device=args.device, backends=tuple(backends),
                schemes=tuple(args.scheme or SCHEME_NAMES), layers=layers,
                Ms=tuple(args.Ms), modes=tuple(dict.fromkeys(args.mode or MODES)),
                repeats=args.repeats or reps, warmup=args.warmup or warmup,
                budget_s=args.max_seconds, variants=tuple(args.variants) or ({},))
