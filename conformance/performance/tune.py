"""`moecert tune`: the Triton backend's tile configurations for this GPU, measured.

    moecert tune                      # every model shape x default schemes x M (H100: minutes per
                                      # layer, Mixtral-8x7B gptq-int4 over 6 routings 333 s)
    moecert tune --model qwen3-30b-a3b --scheme gptq-int4 --M 16

For each model shape (reference/models.py), scheme and token count M: a random checkpoint of
the scheme, converted by the Triton backend, random softmax-top-k routing of M tokens
(reference.make_inputs, n = M x topk assignment rows; ROUTINGS of them, each candidate timed
over all: the mean), then `kernels.triton_moe.tune`'s search on both GEMMs (correct results
only, see there). The winners go to the device's data file in
kernels/triton_moe/configs/ (merged with what it already holds), which the backend reads at
the next process start; the table printed says what each layer gained.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import torch
from moecert.reference import SCHEMES, MoEProblem, make_inputs, random_checkpoint
from moecert.reference.models import MODEL_TOKENS, MODELS, ModelShape

from ..harness.option_values import (
    UsageError,
    m_list,
    model_name,
    positive_int,
    positive_seconds,
)

DEFAULT_SCHEMES = ("gptq-int4", "int8-w8a16", "fp8-w8a16", "mxfp8")
GROUP_SIZE = 128  # of the packed integer schemes (GPTQ/AWQ g128, the common checkpoints)
# random routings per M that each candidate is timed over (tune_stages.RoutingStages says why); the
# seeds M + ROUTING_SEED_STEP * r, so the first is the one a single-routing run used. Three
# were too few on an H100: none of Mixtral-8x7B's three at M = 64 had 13 row blocks, where
# 2 of 6 routings measured did (docs/speed.md, "Change 7")
ROUTINGS = 6
ROUTING_SEED_STEP = 7919


def add_arguments(p) -> None:
    p.add_argument("--model", action="append", default=[], type=model_name, metavar="MODEL",
                   help=f"a model layer ({', '.join(MODELS)}); repeatable; default all")
    p.add_argument("--scheme", action="append", choices=list(SCHEMES), metavar="SCHEME",
                   help=f"repeatable; default {', '.join(DEFAULT_SCHEMES)} (packed integer "
                        f"schemes at group {GROUP_SIZE}, bf16 activations)")
    p.add_argument("--M", dest="Ms", type=m_list, default=MODEL_TOKENS, metavar="LIST",
                   help=f"tokens per call, comma-separated (default "
                        f"{','.join(map(str, MODEL_TOKENS))})")
    p.add_argument("--routings", type=positive_int, default=ROUTINGS, metavar="N",
                   help=f"random routings per M that each candidate is timed over, the mean "
                        f"(default {ROUTINGS}; fewer tune faster)")
    p.add_argument("--max-seconds", type=positive_seconds, default=None, metavar="S",
                   help="bound each layer's search at each M: past S seconds no further tile "
                        "is tried and the fastest correct one timed so far is written, "
                        "marked cut (default: every climb to its end)")
    p.add_argument("--out", type=Path, default=None, metavar="DIR",
                   help="where the device's file goes (default: the folder the backend "
                        "reads, MOECERT_TRITON_CONFIG_DIR or the installed package's own; "
                        "set that variable to DIR for the backend to read DIR)")


def main(args) -> int:
    if not torch.cuda.is_available():  # main prints it as every subcommand's usage error
        raise UsageError("needs a CUDA device: torch sees none here (it tunes the Triton "
                         "backend's tiles for the GPU it runs on)")
    from moecert.kernels.triton_moe import configs
    from moecert.kernels.triton_moe.tune_stages import do_bench_timer

    name = torch.cuda.get_device_name(0)
    device = configs.device_key(name)
    path = configs.path_for(device, args.out)
    shapes = {s: MODELS[s] for s in (args.model or MODELS)}
    started = time.perf_counter()
    # written after each layer and M, so that a run cut short keeps what it measured
    *_, rows = run_tuning(
        shapes, args.scheme or DEFAULT_SCHEMES, args.Ms, "cuda", do_bench_timer,
        routings=args.routings, max_seconds=args.max_seconds,
        save=lambda t, tm, sp: configs.write_table(
            path, device, name, _versions(), t, tm, sp,
            tuple(torch.cuda.get_device_capability(0))))
    print(format_rows(rows))
    print(f"{name}: {len(rows)} layers x M tuned in {time.perf_counter() - started:.0f} s; "
          f"wrote {path}")
    return 0


def run_tuning(shapes: dict[str, ModelShape], schemes, ms, device: str, timer,
               grid: dict | None = None, group_size: int = GROUP_SIZE, log=print, save=None,
               routings: int = ROUTINGS, max_seconds: float | None = None,
               clock=time.monotonic):
    """(table for configs.write_table, its timings, the layers' nibble spans, printable
    rows) for every shape x scheme x M, `save(table, timings, spans)` called after each layer
    and M. Each int4 linear gets one nibble order for all its buckets (`best_spans`). On the
    CPU it runs through the Triton interpreter (the tests). `max_seconds`: each layer and
    M's search bounded so (tune.Deadline on `clock`, from before its inputs are made); a
    cut one is recorded with its bound ("cut_at_s" beside its timings)."""
    from moecert.kernels.triton_moe.backend import TritonBackend
    from moecert.kernels.triton_moe.tune import (
        Deadline,
        best_spans,
        fused_act_choice,
        same_tile,
        settle,
        tune_layer,
    )
    from moecert.kernels.triton_moe.tune_stages import (
        LayerStage,
        RoutingStages,
        weight_variants,
    )

    backend = TritonBackend()
    table: dict = {}
    timings: dict = {}
    spans: dict = {}
    rows = []
    for shape_name, (E, K, N, topk) in shapes.items():
        for scheme in schemes:
            attrs = {"group_size": group_size} if SCHEMES[scheme].packed else {}
            P = MoEProblem(M=1, K=K, N=N, E=E, topk=topk, dtype="bf16")
            t0 = time.perf_counter()
            layer = backend.create_layer(random_checkpoint(scheme, P, seed=0, device=device,
                                                           **attrs), P)
            backend.process_weights_after_loading(layer)
            variants = weight_variants(layer)  # both nibble orders, once for every M
            tuned = {}  # this layer's {bucket: (M, LayerChoice)}
            for M in ms:
                deadline = Deadline(max_seconds, clock)
                stages = []
                for r in range(routings):
                    x, w, ids = make_inputs(MoEProblem(M=M, K=K, N=N, E=E, topk=topk),
                                            seed=M + ROUTING_SEED_STEP * r)
                    stages.append(LayerStage(layer, x.to(device), w.to(device),
                                             ids.to(device), variants))
                stage = RoutingStages(stages)
                choice = tune_layer(stage, timer, grid, deadline=deadline)
                key = stage.key()
                tuned[_bucket(stage.n)] = (M, choice, stage.defaults)
                log(format_rows([(shape_name, scheme, M, choice)]).splitlines()[-1])
                # one nibble order per linear for every bucket: each bucket re-settled in it;
                # the stored order where the layer's file holds buckets this run leaves
                # (their tiles run on the weights in that order)
                orders = best_spans([c.options for _, c, _ in tuned.values()])
                kept = held_buckets(key) - set(tuned)
                if kept and orders != (stage.stored[1], stage.stored[2]):
                    log(f"  {shape_name} {scheme}: the stored nibble order kept (its file "
                        f"holds buckets {sorted(kept)}, not tuned here)")
                    orders = (stage.stored[1], stage.stored[2])
                for bucket, (m, c, defaults) in tuned.items():
                    cut, shipped_us, before = c.cut, c.shipped_us, c.configs[0]
                    c = settle(c.options, orders, defaults, [g.default_us for g in c.gemms],
                               stage.stored)
                    c.cut, c.shipped_us = cut, shipped_us
                    # GEMM1's FUSED_ACT timed on this M's stage; an earlier bucket keeps
                    # the choice timed for its tile while the order leaves the tile alone
                    if m == M:
                        c.configs = (fused_act_choice(stage, c.configs[0], timer),
                                     c.configs[1])
                    elif "FUSED_ACT" in before and same_tile(before, c.configs[0]):
                        c.configs = ({**c.configs[0], "FUSED_ACT": before["FUSED_ACT"]},
                                     c.configs[1])
                    tuned[bucket] = (m, c, defaults)
                    table.setdefault(key, {})[bucket] = c.configs
                    timings[key, bucket] = {"default": round(c.default_us, 2),
                                            "tuned": round(c.us, 2),
                                            **({"shipped": round(shipped_us, 2)}
                                               if not math.isnan(shipped_us) else {}),
                                            **({"cut_at_s": max_seconds} if cut else {})}
                if len(stage.spans(1)) > 1 or len(stage.spans(2)) > 1:
                    spans[key] = dict(zip(("w13", "w2"), orders, strict=True))
                if save:
                    save(table, timings, spans)
                del stage, stages
            rows += [(shape_name, scheme, m, c) for m, c, _ in tuned.values()]
            log(f"  {shape_name} {scheme}: {time.perf_counter() - t0:.1f} s")
            del layer, variants
            if device != "cpu":
                torch.cuda.empty_cache()
    return table, timings, spans, rows


def _bucket(n: int) -> int:
    from moecert.kernels.triton_moe.configs import rows_bucket

    return rows_bucket(n)


def describe(config: dict, span: int = 0) -> str:
    split_k = config.get("SPLIT_K", 1)
    return (f"m{config['BLOCK_M']}n{config['BLOCK_N']}k{config['BLOCK_K']}"
            f"w{config['num_warps']}s{config['num_stages']}"
            f"{'-swap' if config.get('SWAP_AB') else ''}"
            f"{f'-split{split_k}' if split_k > 1 else ''}"
            f"{f'-unroll{unroll}' if (unroll := config.get('K_UNROLL', 1)) > 1 else ''}"
            f"{f'-group{group}' if (group := config.get('GROUP_M', 1)) > 1 else ''}"
            f"{f'-planes{span}' if span else ''}")


def format_rows(rows) -> str:
    lines = [f"{'shape':<15} {'scheme':<11} {'M':>5} {'default us':>11} {'shipped us':>11} "
             f"{'tuned us':>9} {'speedup':>7}  gemm1 / gemm2"]
    for shape, scheme, M, c in rows:
        # shipped: the tiles the layer ran before, where a file's entry (not the defaults)
        shipped = f"{'-':>11}" if math.isnan(c.shipped_us) else f"{c.shipped_us:>11.1f}"
        lines.append(f"{shape:<15} {scheme:<11} {M:>5} {c.default_us:>11.1f} {shipped} "
                     f"{c.us:>9.1f} {c.default_us / c.us:>7.2f}  "
                     f"{describe(c.configs[0], c.spans[0])} / "
                     f"{describe(c.configs[1], c.spans[1])}"
                     f"{'  (search cut by --max-seconds)' if c.cut else ''}")
    return "\n".join(lines)


def held_buckets(key) -> set[int]:
    """The row buckets of the entry the layer reads on this device (its own key's, else its
    fallback's: heuristics.tuned_key), from the file of its nibble order."""
    from moecert.kernels.triton_moe import configs, heuristics

    read = heuristics.tuned_key(key)
    name = configs.layer_file(read)
    table = None if name is None else configs.load_table(name, configs.config_dir())
    return set(table.get(read, {})) if table else set()


def _versions() -> dict:
    import triton

    return {"triton": triton.__version__, "torch": torch.__version__}
