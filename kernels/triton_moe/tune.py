"""The search behind `moecert tune`: for one layer and one row count, over one routing or
several, the fastest correct tile configuration of each GEMM, with one BLOCK_M for both.

    stage = LayerStage(layer, x, topk_weights, topk_ids)   # the GEMMs' real inputs
    stage = RoutingStages([stage, other, ...])             # or: timed over several routings
                                                           # (both in tune_stages.py)
    choice = tune_layer(stage, timer)                        # -> LayerChoice

Search: hill climbing on a grid (GRID), from the heuristic default (`heuristics.pick_config`)
and from it with each other SPLIT_K the grid allows (`climb_starts`): each round tries every
configuration one grid step away in one field and moves to the fastest if it beats the
current one; a climb stops when none does (at most MAX_ROUNDS); the fastest climb wins. A
full grid is ~150 configurations per GEMM, each a JIT compile of about a second; a climb tries
~10-25.
Prior knowledge (pick_config's docstring, H100) prunes the grid: the default's BLOCK_M, and
32, 64 or 128 too when an expert gets half that many rows on average, SWAP_AB only with
<= 16 rows per expert, GROUP_M > 1 only at prefill sizes (issue 34's sweep on an H200:
GROUP_M 8 ran Mixtral-8x7B's prefill tiles 0.92-1.24x as fast, a per-layer choice),
TAIL_M (an expert's last row block on BLOCK_M / 2 or / 4 rows) only at prefill sizes, the
tails the start's BLOCK_M has,
FAST_I4 always on (the kernel uses it only where it applies), ONE_DOT both ways only on nibble
planes (tune_stages.weight_choices), ZERO_SUMS both ways only where a
GEMM's weights carry their zero points in their scale words (AWQ in planes),
SPLIT_K > 1 only for a GEMM whose default grid has fewer programs than SMALL_GRID_WAVES x
the device's SMs (too few to keep the GPU's memory system busy; more split the work and add
a workspace round trip for nothing), or fewer than SHORT_GRID_WAVES waves with the last at
most LAST_WAVE_FILL full (the split may fill that wave's idle SMs).

A deadline (`Deadline`, `moecert tune --max-seconds`) bounds one layer's search at one row
count: once it has passed, no further candidate is tried and the fastest correct one timed so
far stands. Both defaults are timed first whatever the deadline, so a search cut at any point
still gives a config no slower than the default; the choice says it was cut (`cut`). Every
climb's start (each BLOCK_M and nibble order, and the tiles the layer runs now) is timed
before any climb, and the climbs run from the fastest start on: a deadline cuts the least
promising ones.
(Mixtral-8x7B at M = 64 outran 130-260 s of a device call more than once, and a cut process
wrote nothing.)

Correctness: every candidate's output is compared with the default configuration's on the same
inputs and rejected unless each element is within what a different fp32 summation order can
change (`reorder_bound`), and on int4 layers with 16-bit activations what rounding the weights
to the compute dtype adds (ONE_DOT's decode: `candidate_bound`); a launch that fails
(resources, compile) is rejected too. Split-K
is such another order (each split's fp32 sum, then the splits added in order), so the same
test admits it. The timer is passed in, so the search runs on the CPU (interpreter, fake
timer) in the tests.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from . import configs, heuristics
from .tune_stages import LayerStage

# a timing function: (run, config) -> microseconds; `run` launches the GEMM once
Timer = Callable[[Callable[[], object], dict], float]

GRID = {"BLOCK_N": (32, 64, 128, 256), "BLOCK_K": (64, 128, 256), "num_warps": (4, 8),
        "num_stages": (2, 3, 4), "SWAP_AB": (False, True), "SPLIT_K": (1, 2, 4, 8),
        "K_UNROLL": (1, 2, 4), "GROUP_M": (1, 4, 8, 16), "TAIL_M": (0, 16, 32, 64)}
SMALL_GRID_WAVES = 2  # SPLIT_K is tried when a GEMM has fewer programs than this x SMs
# ... or fewer waves than this with its last wave at most LAST_WAVE_FILL full: Mixtral-8x7B's
# GEMM2 at M = 1024 has 2.3-2.4 waves on its tuned tile, its last 30-42% full (tools/
# i44_waves.py; docs/speed.md, round twenty), so a split may fill the waves' gaps
SHORT_GRID_WAVES = 6
LAST_WAVE_FILL = 0.5
MAX_ROUNDS = 4
WIDER_BLOCK_MS = (32, 64, 128)  # tried beside the default's (block_ms)
SWAP_MAX_ROWS = 16  # SWAP_AB is tried up to this many rows per expert
# fp32 unit roundoff for round-to-nearest is 2^-24; tensor cores may truncate partial sums
# inside an MMA (chopping: 2^-23)
FP32_UNIT = 2.0**-23
MANTISSA_BITS = {torch.bfloat16: 8, torch.float16: 11, torch.float32: 24}


# --- correctness -----------------------------------------------------------------------------

def ulp(v: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """float64 spacing of `dtype`'s values at |v| (subnormal spacing near zero)."""
    p = MANTISSA_BITS[dtype]
    info = torch.finfo(dtype)
    _, exp = torch.frexp(v.to(torch.float64).abs())
    return torch.ldexp(torch.ones_like(v, dtype=torch.float64), exp - p).clamp(
        min=info.smallest_normal * 2.0 ** (1 - p))


def reorder_bound(reference: torch.Tensor, magnitudes: torch.Tensor, K: int) -> torch.Tensor:
    """How far another summation order may move each output: both orders are within
    gamma(K + 3) * magnitude of the exact sum (K products, the tile-scale, row-scale and
    router multiplies), and the rounding to the output dtype may then land one spacing
    apart (at the larger value: 2x the reference's, rounded up)."""
    n = K + 3
    gamma = n * FP32_UNIT / (1 - n * FP32_UNIT)
    return 2 * gamma * magnitudes + 2 * ulp(reference, reference.dtype)


def candidate_bound(stage, gemm: int, reference: torch.Tensor, *configs: dict
                    ) -> torch.Tensor:
    """How far a config may move GEMM `gemm`'s outputs from `reference` (another config's):
    `reorder_bound`, and where one of `configs` rounds the weights to the compute dtype and
    another does not (none given: where any config of the layer may) what that can add,
    `stage.weight_rounding` times each output's magnitude."""
    magnitudes = stage.magnitudes(gemm)
    bound = reorder_bound(reference, magnitudes, stage.shape(gemm)[1])
    rounding = stage.weight_rounding(gemm, *configs)
    return bound + rounding * magnitudes if rounding else bound


def disagreement(candidate: torch.Tensor, reference: torch.Tensor,
                 bound: torch.Tensor) -> str | None:
    """None when every element is within `bound` of the reference (non-finite values must
    match bit for bit), else where the first one is not."""
    c, r = candidate.to(torch.float64), reference.to(torch.float64)
    finite = torch.isfinite(r)
    if not torch.equal(finite, torch.isfinite(c)) or not torch.equal(
            c[~finite].nan_to_num(), r[~finite].nan_to_num()):
        return "non-finite values differ from the default's"
    over = (c - r).abs() > bound
    if not over.any():
        return None
    row, col = (int(i) for i in over.nonzero()[0])
    return (f"out[{row}, {col}] = {c[row, col].item():.9g}, default {r[row, col].item():.9g} "
            f"(allowed {bound[row, col].item():.3g}); {int(over.sum())} elements over")


# --- the search --------------------------------------------------------------------------------

class Deadline:
    """A search's time limit: `expired()` once `seconds` have passed on `clock` since it was
    made (never when seconds is None); `hit` records that it ended a search early (it is
    asked only where a candidate would otherwise be tried)."""

    def __init__(self, seconds: float | None, clock: Callable[[], float] = time.monotonic):
        self.seconds, self.clock = seconds, clock
        self.start = clock()
        self.hit = False

    def expired(self) -> bool:
        if self.seconds is None or self.clock() - self.start < self.seconds:
            return False
        self.hit = True
        return True


NO_DEADLINE = Deadline(None)


class StartRejected(RuntimeError):
    """A climb's start gave a wrong result or did not launch."""


@dataclass
class Tried:
    config: dict
    us: float | None = None  # None: rejected
    why: str | None = None


@dataclass
class GemmChoice:
    config: dict
    us: float
    default_us: float
    tried: list[Tried] = field(default_factory=list)


@dataclass
class LayerChoice:
    configs: tuple[dict, dict]
    us: float
    default_us: float
    gemms: list[GemmChoice] = field(default_factory=list)
    spans: tuple[int, int] = (0, 0)  # each GEMM's nibble order (the weights' storage)
    # every climb's result, {(BLOCK_M, gemm, span): GemmChoice}: what `settle` picks from
    options: dict = field(default_factory=dict)
    cut: bool = False  # the search's deadline ended it before every climb had finished
    shipped_us: float = math.nan  # the tiles the layer ran before (a file's), when not the
    # defaults: both GEMMs timed as they are (tune_layer)


def neighbours(config: dict, grid: dict) -> list[dict]:
    """Configs one grid step away in one field (a value off the grid steps onto it)."""
    out = []
    for name, values in grid.items():
        current = config.get(name, heuristics.default_tail_m(config) if name == "TAIL_M"
                             else configs.FIELD_DEFAULTS.get(name, False))
        line = sorted(set(values) | {current})
        i = line.index(current)
        for j in (i - 1, i + 1):
            if 0 <= j < len(line) and line[j] in values:
                out.append({**config, name: line[j]})
    return out


def grid_for(rows_per_expert: float, grid: dict) -> dict:
    """`grid` pruned for this load: SWAP_AB only for few rows per expert, GROUP_M and TAIL_M
    only at prefill sizes (`heuristics.PREFILL_ROWS`: below them a layer has a row block or
    two per expert and the launch order reads each weight tile once already; an expert's
    last block is most of its rows)."""
    grid = dict(grid)
    if rows_per_expert > SWAP_MAX_ROWS:
        grid["SWAP_AB"] = (False,)
    if rows_per_expert < min(heuristics.PREFILL_ROWS):
        grid["GROUP_M"] = (1,)
        grid.pop("TAIL_M", None)
    return grid


def split_k_grid(grid: dict, programs: int, sm_count: int | None) -> dict:
    """`grid` with SPLIT_K only where the grid is small (fewer programs than SMALL_GRID_WAVES
    x sm_count) or short with a thin last wave (fewer than SHORT_GRID_WAVES waves, the last at
    most LAST_WAVE_FILL full); without a device, sm_count None: SPLIT_K 1."""
    if len(grid.get("SPLIT_K", (1,))) == 1:
        return grid
    if sm_count is None:
        return {**grid, "SPLIT_K": (1,)}
    waves = programs / sm_count
    if waves < SMALL_GRID_WAVES or (waves < SHORT_GRID_WAVES
                                    and last_wave_fill(programs, sm_count) <= LAST_WAVE_FILL):
        return grid
    return {**grid, "SPLIT_K": (1,)}


def last_wave_fill(programs: int, sm_count: int) -> float:
    """The fraction of the SMs that the last wave of `programs` one-SM programs keeps busy
    (1.0: a full wave)."""
    waves = programs / sm_count
    return waves - math.ceil(waves) + 1


def device_sm_count() -> int | None:
    """Streaming multiprocessors (CUs on ROCm) of device 0, None without a GPU."""
    if not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_properties(0).multi_processor_count


def block_ms(rows_per_expert: float, default: int) -> list[int]:
    """The BLOCK_M candidates: the default, and each wider one that an expert's rows on
    average fill at least half of (a row block decodes its weight tiles once for all its
    rows; experts' counts spread around the average)."""
    return [default] + [bm for bm in WIDER_BLOCK_MS
                        if rows_per_expert >= bm / 2 and bm != default]


def climb(evaluate: Callable[[dict], float | None], start: dict, grid: dict,
          rounds: int = MAX_ROUNDS, deadline: Deadline = NO_DEADLINE
          ) -> tuple[dict, float | None]:
    """Hill climbing from `start`: (best config, its time), time None when even the start
    was rejected. `evaluate` returns microseconds or None (rejected); it caches. The start
    is evaluated whatever the deadline; past it, no neighbour is (the round's timed ones
    still count)."""
    best, best_us = start, evaluate(start)
    if best_us is None:
        return best, None
    for _ in range(rounds):
        timed = []
        for c in neighbours(best, grid):
            if deadline.expired():
                break
            if (us := evaluate(c)) is not None:
                timed.append((us, c))
        if not timed:
            break
        us, c = min(timed, key=lambda t: t[0])
        if us >= best_us:
            break
        best, best_us = c, us
    return best, best_us


def tune_gemm(stage: LayerStage, gemm: int, start: dict, timer: Timer, grid: dict,
              reference: torch.Tensor, bound: torch.Tensor,
              deadline: Deadline = NO_DEADLINE, rounds: int = MAX_ROUNDS,
              tried: list[Tried] | None = None) -> GemmChoice:
    """The fastest correct config of one GEMM reachable from `start` (its BLOCK_M fixed);
    past the deadline, the best of what was timed (at least the start). rounds=0: the start
    alone. `tried`: this GEMM's earlier trials from the same start (an earlier call's
    `GemmChoice.tried`), reused instead of launched and timed again."""
    tried = list(tried or ())
    cache = {stage.effective(gemm, t.config): t for t in tried}

    def evaluate(config: dict) -> float | None:
        key = stage.effective(gemm, config)
        if key not in cache:
            cache[key] = _try(stage, gemm, config, timer, reference, bound)
            tried.append(cache[key])
        return cache[key].us

    first, *others = climb_starts(start, grid)
    best, us = climb(evaluate, first, grid, rounds, deadline)
    if us is None:
        raise StartRejected(f"GEMM{gemm}: the start config {start} was rejected: "
                            f"{cache[stage.effective(gemm, start)].why}")
    for other in others:
        if rounds == 0 or deadline.expired():
            break
        config, other_us = climb(evaluate, other, grid, deadline=deadline)
        if other_us is not None and other_us < us:
            best, us = config, other_us
    return GemmChoice(best, us, default_us=float("nan"), tried=tried)


def climb_starts(start: dict, grid: dict) -> list[dict]:
    """Where the climbs of one GEMM begin: `start`, then `start` with each other SPLIT_K of
    the grid. A split changes which tiles pay, so one field at a time from an unsplit start
    can miss a split that pays only with other tiles (Mixtral-8x7B's GEMM2 at M = 1 on an
    H100: SPLIT_K 4 alone or BLOCK_N 128 alone no faster, both together 1.1x faster)."""
    current = start.get("SPLIT_K", 1)
    return [start] + [{**start, "SPLIT_K": k} for k in grid.get("SPLIT_K", ())
                      if k != current]


def _try(stage: LayerStage, gemm: int, config: dict, timer: Timer, reference: torch.Tensor,
         bound: torch.Tensor) -> Tried:
    try:
        out = stage.run(gemm, config)
    except Exception as e:  # out of shared memory, registers: not a config for this device
        return Tried(config, None, f"launch failed: {type(e).__name__}: {str(e)[:200]}")
    why = disagreement(out, reference, bound)
    if why is not None:
        return Tried(config, None, why)
    return Tried(config, _time(stage, gemm, config, timer))


def _time(stage, gemm: int, config: dict, timer: Timer) -> float:
    """Microseconds of one launch of the GEMM, the mean over the stage's routings."""
    return timer(lambda: stage.launch(gemm, config), config) / stage.routings


def tune_layer(stage: LayerStage, timer: Timer, grid: dict | None = None,
               sm_count: int | None = None, deadline: Deadline = NO_DEADLINE) -> LayerChoice:
    """Both GEMMs' configs for the stage's rows: per BLOCK_M candidate, each GEMM climbed
    from its default with that BLOCK_M, and from the tiles the layer runs now
    (`_shipped_starts`); the BLOCK_M with the least total time wins. The defaults are timed
    as they are, so `default_us` is what the heuristics give. `grid`: GRID unless given (the
    tests' small grids); its SPLIT_K values only for a GEMM whose start has a small grid
    (`split_k_grid`; sm_count: the device's unless given).
    Breadth before depth: every start is timed first, then the climbs run from the fastest
    start on, so that a deadline cuts the climbs least likely to win (at M = 64 a wider
    BLOCK_M can beat every tile of the default's). Past the deadline only the required
    starts are still timed: each GEMM's default (so that `settle` has one width with both)
    and the shipped tiles."""
    sm_count = sm_count if sm_count is not None else device_sm_count()
    touched = torch.unique(stage.ids).numel()
    per_expert = stage.n / max(touched, 1)
    grid = grid_for(per_expert, grid or GRID)
    defaults = stage.defaults
    references, bounds = {}, {}
    for g in (1, 2):
        references[g] = stage.run(g, defaults[g - 1]).clone()
        bounds[g] = candidate_bound(stage, g, references[g])
    default_us = [_time(stage, g, defaults[g - 1], timer) for g in (1, 2)]
    # (option key (BLOCK_M, gemm, span), start config, required, the weights as stored,
    # the tiles the layer runs now)
    starts = [((bm, g, span), {**defaults[g - 1], "BLOCK_M": bm, "NIB_SPAN": span},
               bm == defaults[0]["BLOCK_M"] and span == stage.stored[g], span == stage.stored[g],
               False)
              for bm in block_ms(per_expert, defaults[0]["BLOCK_M"])
              for g in (1, 2) for span in stage.spans(g)]
    starts += _shipped_starts(stage)

    def run(key, start, rounds, tried=None):
        gemm_grid = _gemm_grid(stage, key[1], start, grid, sm_count)
        if "ONE_DOT" in gemm_grid and "ONE_DOT" not in start:  # its default as a grid value,
            # so that the climb steps to the other (neighbours reads an absent flag as False)
            start = {**start, "ONE_DOT": heuristics.default_one_dot(
                stage.weights(key[1], start), stage.act, start)}
        return tune_gemm(stage, key[1], start, timer, gemm_grid, references[key[1]],
                         bounds[key[1]], deadline, rounds, tried)

    timed = []  # (the start alone: a GemmChoice, key, start, required, shipped)
    for key, start, required, as_stored, shipped in starts:
        if not required and deadline.expired():
            continue
        try:
            timed.append((run(key, start, 0), key, start, required, shipped))
        except StartRejected as e:
            if shipped:
                raise StartRejected(f"the tiles the layer runs now: {e}") from None
            if as_stored:  # the weights as stored: a real failure
                raise
            # another nibble order that does not run right is no option
    # each start ranked against its own GEMM's fastest, so that both GEMMs' best starts are
    # climbed first (by plain time, all of the second GEMM's would come first: it has half
    # the first's work in a gated layer, and a deadline would cut the first's climbs)
    fastest = {g: max(min(t[0].us for t in timed if t[1][1] == g), 1e-9)
               for g in {t[1][1] for t in timed}}
    options: dict[tuple[int, int, int], GemmChoice] = {}
    for first, key, start, required, _ in sorted(
            timed, key=lambda t: (t[0].us / fastest[t[1][1]], t[1][1])):
        if not required and deadline.expired():
            choice = first
        else:
            choice = run(key, start, MAX_ROUNDS, first.tried)
        choice.default_us = default_us[key[1] - 1]
        if key not in options or choice.us < options[key].us:
            options[key] = choice
    choice = settle(options, best_spans([options]), defaults, default_us, stage.stored)
    choice.cut = deadline.hit
    shipped_us = [first.us for first, *_, shipped in timed if shipped]
    choice.shipped_us = sum(shipped_us) if shipped_us else math.nan
    return choice


def same_tile(a: dict, b: dict) -> bool:
    """Whether two GEMM configs are one tile, FUSED_ACT aside."""
    def tile(c):
        return {f: v for f, v in configs.complete(c).items() if f != "FUSED_ACT"}
    return tile(a) == tile(b)


def fused_act_choice(stage, config: dict, timer: Timer) -> dict:
    """GEMM1's config with FUSED_ACT, for the tiles the search settled on (the command's
    last step per bucket: `moecert tune`): the activation in GEMM1's epilogue when that times no
    slower than GEMM1 then the activation kernel (the fused epilogue ran fp8-w8a8
    Mixtral-8x7B's 128-row tile at M = 4096 10% slower, and bf16's 4% faster: docs/speed.md,
    round ten), and gives the same bits (gemm_kernel's EPI_ACT: the tests pin it; a
    device that differs keeps the kernel). A stage without the activation (the tests' fake
    ones) leaves the config as it is."""
    if not all(hasattr(s, "run_activated") for s in getattr(stage, "stages", (stage,))):
        return config
    fused = stage.run_activated(config, True).clone()
    if not torch.equal(fused, stage.run_activated(config, False)):
        return {**config, "FUSED_ACT": False}
    us = {f: timer(lambda f=f: stage.launch_activated(config, f), {**config, "FUSED_ACT": f})
          for f in (True, False)}
    return {**config, "FUSED_ACT": us[True] <= us[False]}


def _shipped_starts(stage) -> list:
    """Each GEMM's start from the tiles the layer runs now (`stage.shipped`, in its stored
    nibble order), when they are not the defaults: required starts, timed whatever the
    deadline. The heuristics' default is not what a tuned layer runs: a search that beat it
    1.09x wrote a tile slower than the entry it replaced (w4a8-int8 Mixtral-8x7B at M = 64,
    2026-12-01). A shipped tile whose output disagrees with the default's is a kernel bug:
    StartRejected, named so."""
    shipped = getattr(stage, "shipped", None)
    if shipped is None or all(configs.complete(s) == configs.complete(d)
                              for s, d in zip(shipped, stage.defaults, strict=True)):
        return []
    return [((c["BLOCK_M"], g, stage.stored[g]), {**c, "NIB_SPAN": stage.stored[g]}, True, True,
             True) for g, c in ((1, shipped[0]), (2, shipped[1]))]


def best_spans(all_options: list[dict]) -> tuple[int, int]:
    """Each GEMM's nibble order over one layer's tunings (`LayerChoice.options`, one per row
    bucket: the weights have one order for every M): the order with the least time summed
    over the buckets, each at its fastest BLOCK_M (on a tie the smaller span, 0 first)."""
    chosen = []
    for g in (1, 2):
        spans = set.intersection(*({s for _, gg, s in o if gg == g} for o in all_options))

        def total(span, g=g):
            return sum(min(c.us for (_, gg, s), c in o.items() if gg == g and s == span)
                       for o in all_options)

        chosen.append(min(sorted(spans), key=total))
    return chosen[0], chosen[1]


def settle(options: dict, spans: tuple[int, int], defaults: tuple[dict, dict],
           default_us: list[float], stored: dict[int, int]) -> LayerChoice:
    """The layer's configs with each GEMM's weights in `spans`: the BLOCK_M with the least
    total time among those both GEMMs were tuned at in these orders (the stored orders when
    there is none). The defaults (timed as they are, in the stored order) stay where the
    tuned row is no faster."""
    widths = sorted(bm for bm in {bm for bm, _, _ in options}
                    if (bm, 1, spans[0]) in options and (bm, 2, spans[1]) in options)
    if not widths:  # an order rejected at every width the other order ran at
        return settle(options, (stored[1], stored[2]), defaults, default_us, stored)
    totals = {bm: options[bm, 1, spans[0]].us + options[bm, 2, spans[1]].us for bm in widths}
    bm = min(widths, key=lambda b: totals[b])
    gemms = [options[bm, 1, spans[0]], options[bm, 2, spans[1]]]
    choice = LayerChoice((gemms[0].config, gemms[1].config), totals[bm], sum(default_us),
                         gemms, spans, options)
    if spans == (stored[1], stored[2]) and choice.us > choice.default_us:
        # the climb re-times its start: keep the default's row
        choice = LayerChoice(defaults, choice.default_us, choice.default_us, gemms, spans,
                             options)
    choice.configs = tuple(configs.complete(c) for c in choice.configs)
    return choice


def _gemm_grid(stage, gemm: int, start: dict, grid: dict, sm_count: int | None) -> dict:
    grid = {**grid, **stage.weight_choices(gemm, start)}
    if "TAIL_M" in grid:  # the tails the start's BLOCK_M has (heuristics.fit_tail)
        grid["TAIL_M"] = tuple(t for t in grid["TAIL_M"]
                               if t == heuristics.fit_tail(t, start["BLOCK_M"]))
    if len(grid.get("SPLIT_K", (1,))) == 1:  # nothing to prune (and no grid to count)
        return grid
    return split_k_grid(grid, stage.programs(gemm, start), sm_count)


def speedup(choice: LayerChoice) -> float:
    return choice.default_us / choice.us if choice.us > 0 else math.nan
