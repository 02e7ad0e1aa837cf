"""`moecert bench`: every available backend timed on the model layers, against the device's
floors; `moecert bench reference`: the float64 reference timed on one model-sized layer.

For each model (reference/models.py, in the schemes it ships in), scheme (its default
variant, or each `--variant` of it), M and backend that claims the layer, in two modes:

    apply   the backend's `apply()` as an engine calls it, host work included
    graph   the forward captured in a CUDA graph and replayed (a BaseBackend's `forward`:
            `apply()`'s input checks read values on the host, which a capture forbids);
            on the CPU, or where capture fails, the row says so (status skip)

Times are medians of `--repeats` calls after `--warmup` (conformance/performance/timing.py),
cycling over input sets with distinct random routings whose weights and activations together
exceed the device's cache twice. The copy bandwidth and bf16 GEMM rate are measured in the same
run; per row the floors come from the routing actually drawn: the bytes of the experts it touches
(at M=1 only topk of them) plus the activations, and 2 x routed tokens x (w13 rows x K + K x N)
flops. Checkpoints are `random_checkpoint` draws on the device (timing does not depend on the
values). A backend that raises costs its rows (status error), never the run.

Rows go to `<results>/<run id>.bench.parquet` with ids `backend/scheme-variant/model/M<m>/mode`
(`triton/gptq-int4/qwen3-30b-a3b/M16/graph`), the same in every run, so `moecert report
--baseline` flags a slower kernel. docs/speed.md has the command line for a GPU.
"""

from __future__ import annotations

import datetime
import math
import time
from dataclasses import dataclass
from functools import partial

import torch
from moecert.kernels import Variant, get_backend
from moecert.kernels.base import BaseBackend
from moecert.kernels.oracle import supports_reason
from moecert.kernels.platform import platform_of_device
from moecert.reference import (
    Checkpoint,
    MoEProblem,
    make_inputs,
    moe,
    random_checkpoint,
)
from moecert.reference.models import MODEL_TOKENS, MODELS, ModelShape, ships_in
from moecert.reference.schemes import checkpoint_shape_issue
from moecert.reports.frames import bench_metrics
from moecert.reports.schema import BENCH_CHECK, problem_id
from moecert.reports.store import Journal

from ..harness.cases import Case
from ..harness.execute import new_run_id, triton_for
from ..harness.provenance import environment, problem_columns
from ..harness.suites import model_problem
from .timing import (
    Clock,
    cache_bytes,
    copy_bandwidth,
    graph_replays,
    matmul_rate,
)

MODES = ("apply", "graph")
SUITE = "bench"  # the suite column of bench rows, and the results file's label
# Input sets: enough that together they hold ROTATE x the cache, at least 2, at most MAX_SETS.
ROTATE = 2
MAX_SETS = 16
# (repeats, warmup) by device type: the CPU is for checking the command, not for numbers.
DEFAULT_REPS = {"cuda": (100, 10), "cpu": (10, 2)}
# Wall seconds of timed calls per row: a reference-speed backend (the torch backend takes tens of
# ms a call at model sizes) stops after MIN_REPS calls instead of 100.
DEFAULT_BUDGET_S = 1.0


@dataclass(frozen=True)
class Plan:
    """What one `moecert bench` run times."""

    device: str
    backends: tuple[str, ...]
    schemes: tuple[str, ...]
    layers: dict[str, ModelShape]  # model (or --layer name) -> shape
    Ms: tuple[int, ...] = MODEL_TOKENS
    modes: tuple[str, ...] = MODES
    repeats: int = 100
    warmup: int = 10
    budget_s: float | None = None  # wall seconds of timed calls per row (>= MIN_REPS calls)
    seed: int = 0
    # checkpoint attributes applied to every scheme, one variant each ({}: the default)
    variants: tuple[dict, ...] = ({},)


@dataclass
class InputSet:
    """One routing and its buffers, with what a call on it must move and compute."""

    x: torch.Tensor
    weights: torch.Tensor
    ids: torch.Tensor
    out: torch.Tensor
    min_bytes: float
    flops: float


def layer_problem(name: str, shape: ModelShape, scheme: str, M: int) -> MoEProblem | None:
    """The layer `name` at M tokens in `scheme` (None: the model does not ship in it); a
    --layer shape is a plain SiLU layer."""
    if name in MODELS:
        return model_problem(name, scheme, M)
    E, K, N, topk = shape
    return MoEProblem(M=M, K=K, N=N, E=E, topk=topk)


def expert_bytes(ckpt: Checkpoint, E: int) -> tuple[float, float]:
    """(bytes per expert, bytes shared by all) of a checkpoint: a tensor whose first dimension
    is the expert is read for the experts a call touches, any other whole."""
    per_expert = shared = 0.0
    for t in ckpt.tensors.values():
        if t.dim() and t.shape[0] == E:
            per_expert += t.nbytes / E
        else:
            shared += t.nbytes
    return per_expert, shared


def routed(ids: torch.Tensor, problem: MoEProblem) -> tuple[int, int]:
    """(distinct local experts, local (token, expert) pairs) of a routing; with an expert map,
    experts of other ranks are neither read nor computed."""
    flat = ids.reshape(-1).long().cpu()
    if problem.expert_map is not None:
        flat = torch.tensor(problem.expert_map)[flat]
        flat = flat[flat >= 0]
    return int(torch.unique(flat).numel()), int(flat.numel())


def input_sets(problem: MoEProblem, per_expert: float, shared: float, device: torch.device,
               cache: int, seed: int) -> list[InputSet]:
    """Input sets with distinct random routings until together they hold ROTATE x `cache`
    bytes (at least 2, at most MAX_SETS)."""
    P = problem
    flops_per_pair = 2 * (P.w13_rows * P.K + P.K * P.N)
    sets: list[InputSet] = []
    total = 0.0
    while len(sets) < MAX_SETS and (len(sets) < 2 or total < ROTATE * cache):
        x, w, ids = (t.to(device) for t in make_inputs(P, seed=seed + len(sets)))
        out = torch.empty(P.M, P.K, dtype=P.torch_dtype, device=device)
        experts, pairs = routed(ids, P)
        moved = (experts * per_expert + shared
                 + sum(t.nbytes for t in (x, w, ids, out)))
        sets.append(InputSet(x, w, ids, out, moved, pairs * flops_per_pair))
        total += moved
    return sets


def time_mode(mode: str, backend, layer, sets: list[InputSet], clock: Clock,
              plan: Plan) -> tuple[str, float, str]:
    """(status, median seconds, message) of one mode; raises what the backend raises."""
    calls = [partial(backend.apply, layer, s.x, s.weights, s.ids, out=s.out) for s in sets]
    what = "apply()"
    if mode == "graph":
        if not clock.cuda:
            return "skip", math.nan, f"not available: CUDA graphs need a CUDA device, not " \
                                     f"{clock.device}"
        if isinstance(backend, BaseBackend):
            calls = [partial(backend.forward, layer, s.x, s.weights, s.ids, s.out, None)
                     for s in sets]
            what = "forward()"
        try:
            calls = graph_replays(calls, clock.device)
        except Exception as e:
            return "skip", math.nan, f"graph capture failed: {_one_line(_first_cause(e))}"
        what = f"CUDA graph of {what}"
    seconds, n = clock.median_s(calls, plan.repeats, plan.warmup, plan.budget_s)
    return "pass", seconds, f"{what}: median of {n} calls over {len(sets)} input sets"


class Bench:
    """One run: the device's rates, then a row per (layer, scheme, backend, M, mode)."""

    def __init__(self, plan: Plan, journal: Journal | None = None, marlin=None,
                 echo=print):
        self.plan, self.journal, self.marlin, self.echo = plan, journal, marlin, echo
        self.device = torch.device(plan.device)
        self.clock = Clock(self.device)
        self.run_id = journal.path.name.split(".")[0] if journal else new_run_id()
        self.rows: list[dict] = []
        self.rates = {}

    def run(self) -> list[dict]:
        with triton_for(self.plan.device):
            self.rates = {
                "copy_bytes_s": copy_bandwidth(self.clock, self.plan.repeats, self.plan.warmup),
                "matmul_flop_s": matmul_rate(self.clock, self.plan.repeats, self.plan.warmup)}
            self.echo(self.header())
            for name, shape in self.plan.layers.items():
                for scheme in self.plan.schemes:
                    for variant in scheme_variants(scheme, self.plan.variants):
                        self.layer(name, shape, variant)
        return self.rows

    def header(self) -> str:
        r = self.rates
        env = environment(self.plan.device, "")
        return (f"device {self.plan.device} ({env['device_name'] or 'cpu'}): copy "
                f"{r['copy_bytes_s'] / 1e12:.3g} TB/s, bf16 GEMM "
                f"{r['matmul_flop_s'] / 1e12:.3g} TFLOP/s, cache "
                f"{cache_bytes(self.device) >> 20} MiB; torch {env['torch_version']}, "
                f"triton {env['triton_version'] or '-'}\n"
                f"{'id':<58} {'status':<6} {'us':>9} {'GB/s':>8} {'%mem':>6} {'%flop':>6} "
                f"{'xMarlin':>8}")

    def layer(self, name: str, shape: ModelShape, variant: Variant) -> None:
        """Every claimed (backend, M, mode) of one layer in one scheme variant: one
        checkpoint, one set of inputs per M, shared by the backends."""
        platform = platform_of_device(self.device)
        problems = {}
        for M in self.plan.Ms:
            P = layer_problem(name, shape, variant.scheme, M)
            if P is not None and checkpoint_shape_issue(variant, P) is None:
                problems[M] = P
        claims = {(b, M) for b in self.plan.backends for M, P in problems.items()
                  if supports_reason(get_backend(b), variant, P, platform) is None}
        if not claims:
            return
        first = next(iter(problems.values()))
        try:
            ckpt = random_checkpoint(variant, first, seed=self.plan.seed, device=self.device)
            per_expert, shared = expert_bytes(ckpt, first.E)
            cache = cache_bytes(self.device)
            sets = {M: input_sets(P, per_expert, shared, self.device, cache,
                                  self.plan.seed + 1) for M, P in problems.items()}
        except Exception as e:  # the checkpoint or inputs of this layer: its rows, not the run
            for backend, M in sorted(claims):
                self.error_rows(Case(backend, variant, problems[M], self.plan.seed), name, e)
            return
        for backend_name in self.plan.backends:
            Ms = [M for M in problems if (backend_name, M) in claims]
            if Ms:
                self.backend(backend_name, ckpt, name, variant,
                             {M: problems[M] for M in Ms}, sets)
        del ckpt, sets
        self.free()

    def backend(self, backend_name, ckpt, name, variant, problems, sets) -> None:
        backend = get_backend(backend_name)
        first = next(iter(problems.values()))
        try:
            layer = backend.create_layer(ckpt, first)
            backend.process_weights_after_loading(layer)
            detail = backend.describe(layer) if hasattr(backend, "describe") else ""
        except Exception as e:
            for P in problems.values():
                self.error_rows(Case(backend_name, variant, P, self.plan.seed), name, e)
            self.free()
            return
        for M, P in problems.items():
            case = Case(backend_name, variant, P, self.plan.seed)
            for mode in self.plan.modes:
                start = time.perf_counter()
                try:
                    status, seconds, message = time_mode(mode, backend, layer, sets[M],
                                                         self.clock, self.plan)
                except Exception as e:
                    status, seconds, message = "error", math.nan, _one_line(e)
                self.add(case, name, mode, status, seconds, message, sets[M], detail,
                         time.perf_counter() - start)
        del layer
        self.free()

    def error_rows(self, case: Case, name: str, error: Exception) -> None:
        for mode in self.plan.modes:
            self.add(case, name, mode, "error", math.nan, _one_line(error), [], "", 0.0)

    def add(self, case: Case, name: str, mode: str, status: str, seconds: float,
            message: str, sets: list[InputSet], detail: str, duration: float) -> None:
        P = case.problem
        min_bytes = _mean([s.min_bytes for s in sets])
        flops = _mean([s.flops for s in sets])
        marlin_s = math.nan
        if self.marlin is not None and status == "pass":
            from .marlin_peer import marlin_runs

            if marlin_runs(case.variant, P):
                try:
                    marlin_s = self.marlin.seconds(P, case.variant, graph=mode == "graph")
                except Exception as e:
                    message += f"; Marlin failed: {_one_line(e)}"
        case_id = bench_id(case, name, mode)
        row = {"run_id": self.run_id, "suite": SUITE, "case_id": case_id,
               "problem_id": problem_id(case_id), "backend": case.backend,
               "scheme": case.scheme, "config": case.variant.describe(),
               **problem_columns(case), **environment(self.plan.device, case.backend),
               "backend_detail": detail, "check": BENCH_CHECK, "status": status,
               "claimed": True, "message": message, "duration_s": duration,
               "kernel_s": seconds, "min_bytes": min_bytes, "flops": flops, **self.rates,
               "marlin_s": marlin_s, "case_json": case.to_json(),
               "finished_at": datetime.datetime.now(datetime.UTC).isoformat()}
        self.rows.append(row)
        if self.journal is not None:
            self.journal.append([row])
        self.echo(self.line(row))

    def line(self, row: dict) -> str:
        m = bench_metrics(row["kernel_s"], row["min_bytes"], row["flops"],
                          row["copy_bytes_s"], row["matmul_flop_s"], row["marlin_s"])
        if row["status"] != "pass":
            return f"{row['case_id']:<58} {row['status']:<6} {row['message']}"
        ratio = m["ratio_to_marlin"]
        # a peer that failed says so on its row, not only in the results' message column
        failed = row["message"].partition("Marlin failed: ")[2]
        return (f"{row['case_id']:<58} {row['status']:<6} {m['us']:>9.1f} "
                f"{m['achieved_GBps']:>8.1f} {m['memory_floor_pct']:>6.1f} "
                f"{m['compute_floor_pct']:>6.1f} {'-' if math.isnan(ratio) else f'{ratio:.2f}':>8}"
                + (f"  (Marlin failed: {failed})" if failed else ""))

    def free(self) -> None:
        if self.clock.cuda:
            torch.cuda.empty_cache()


def scheme_variants(scheme: str, variants: tuple[dict, ...]) -> list[Variant]:
    """Each variant of `scheme` the `--variant` attributes give, once (a variant that is the
    default, or another's twin, would time the same rows under the same ids)."""
    return list(dict.fromkeys(Variant(scheme, **attrs) for attrs in variants))


def bench_id(case: Case, name: str, mode: str) -> str:
    """The row's stable id: backend/scheme-variant/model/M<m>/mode."""
    return f"{case.backend}/{case.scheme_label}/{name}/M{case.problem.M}/{mode}"


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def _first_cause(e: BaseException) -> BaseException:
    """The exception a chain started from: a failed capture's own error, not the
    "operation failed due to a previous error during capture" that ending it raises."""
    while e.__context__ is not None:
        e = e.__context__
    return e


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text[:300]}"


# --- the reference ---------------------------------------------------------------------------

REFERENCE_SHAPES = {  # (E, K, N, topk, M): a small layer, then the model layers at M = 256
    "smoke": (8, 256, 128, 2, 16),
    **{name: (*shape, 256) for name, shape in MODELS.items() if ships_in(name, "gptq-int4")},
}


def random_gptq_int4(problem: MoEProblem, device: str, group_size: int = 128,
                     seed: int = 0) -> Checkpoint:
    """Random packed GPTQ int4 (group 128, symmetric, gptq_v2) drawn directly in its storage
    layout: timing does not depend on the weights' values, and synthesizing 11 G weights from
    floats would take longer than the measurement."""
    return random_checkpoint("gptq-int4", problem, seed=seed, device=device,
                             group_size=group_size, checkpoint_format="gptq_v2")


def bench_reference(shape: str, device: str, repeats: int = 1) -> dict:
    """The float64 reference's time on layer `shape` (the fastest of `repeats` runs)."""
    E, K, N, topk, M = REFERENCE_SHAPES[shape]
    P = MoEProblem(M=M, K=K, N=N, E=E, topk=topk)
    ckpt = random_gptq_int4(P, device)
    x, w, ids = make_inputs(P, seed=1)
    clock = Clock(device)
    times = []
    for _ in range(repeats):
        clock.sync()
        t0 = time.perf_counter()
        y = moe(ckpt, x.to(device), w.to(device), ids.to(device), P)
        clock.sync()
        times.append(time.perf_counter() - t0)
    return {"shape": shape, "device": device, "E": E, "K": K, "N": N, "topk": topk, "M": M,
            "seconds": min(times), "all_seconds": times, "finite": bool(torch.isfinite(y).all()),
            "torch": torch.__version__, "threads": torch.get_num_threads()}

