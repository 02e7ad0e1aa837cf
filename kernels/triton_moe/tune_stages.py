"""The GEMMs' real inputs for `moecert tune`'s search (tune.py): a layer's two grouped GEMMs
at one row count, launched alone with any tile configuration, over one random routing
(LayerStage) or several seen as one (RoutingStages), and the timer the command times them
with on a GPU (`do_bench_timer`). Split from tune.py on 2026-12-01 (it had grown past 600
lines); the search, its correctness test and its deadline stay there."""

from __future__ import annotations

from collections.abc import Callable

import torch

from . import configs


def do_bench_timer(run: Callable[[], object], config: dict) -> float:
    """Median microseconds of `run` replayed from a CUDA graph, by triton.testing.do_bench
    (warm-up, then repetitions filling ~50 ms; it flushes L2 between repetitions). The
    graph takes the host out: launched from Python a small GEMM's time is the host's
    (Qwen3-30B-A3B at M = 1 on an H100: both GEMMs timed 56-301 us where the whole layer
    replays in 35 us), which charged every config of more launches (split-K's second one)
    host time that the layer's graph never pays."""
    import triton

    run()  # compiled before the capture
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        run()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run()
    return 1e3 * triton.testing.do_bench(graph.replay, warmup=10, rep=50,
                                         return_mode="median")


# --- the GEMMs' inputs -------------------------------------------------------------------------

class RoutingStages:
    """Several LayerStages of one layer and row count, each its own random routing, seen
    as one stage: a candidate runs on every routing, must agree with the default's output
    on each (`run` returns the outputs stacked) and is timed over all of them (`launch`,
    `routings`). A config timed on one routing can lose on the next: Mixtral-8x7B's GEMM2
    at M = 64 on an H100 took 396-416 us on routings of 11-12 row blocks with 3 programs
    per SM, and 503-513 us on routings of 13 (416 programs, more than 396 slots), where a
    4-per-SM tile took 455-458 (docs/speed.md, "Change 7"). What the others do not change
    (weights, shapes, defaults, the row count) is the first stage's."""

    def __init__(self, stages: list):
        if not stages:
            raise ValueError("RoutingStages needs at least one stage")
        self.stages = stages
        self.routings = len(stages)

    def __getattr__(self, name):
        return getattr(self.stages[0], name)

    def launch(self, gemm: int, config: dict) -> None:
        for stage in self.stages:
            stage.run(gemm, config)

    def run(self, gemm: int, config: dict) -> torch.Tensor:
        return torch.cat([stage.run(gemm, config) for stage in self.stages])

    def launch_activated(self, config: dict, fused: bool) -> None:
        for stage in self.stages:
            stage.run_activated(config, fused)

    def run_activated(self, config: dict, fused: bool) -> torch.Tensor:
        return torch.cat([stage.run_activated(config, fused) for stage in self.stages])

    def magnitudes(self, gemm: int) -> torch.Tensor:
        return torch.cat([stage.magnitudes(gemm) for stage in self.stages])


def weight_variants(layer) -> dict[int, dict[int, dict]]:
    """{gemm: {nibble span: kernel description}} of a converted layer's two linears."""
    from . import backend

    return {1: backend.int4_variants(layer, "w13"), 2: backend.int4_variants(layer, "w2")}


class LayerStage:
    """One layer's two GEMMs on fixed inputs: GEMM1 on the (quantized) tokens, GEMM2 on the
    activation of GEMM1's default-config output. Standard activation format, no expert map
    (what the tuner builds). A bias is allowed (the split-K tests run it): it is added once,
    after the sum over K, in every config, so it changes no summation order, and its one
    fp32 rounding is within `reorder_bound`'s output-spacing term. Row alignments are made
    per BLOCK_M on demand."""

    def __init__(self, layer, x: torch.Tensor, topk_weights: torch.Tensor,
                 topk_ids: torch.Tensor, variants: dict | None = None):
        from . import backend, heuristics, quant

        P = self.problem = layer.problem
        if P.expert_map is not None or P.activation_format != "standard":
            raise ValueError("tuning stages take plain layers: no expert map or batched "
                             "format")
        self.layer, self.plan = layer, backend._plan(layer)
        # each linear in every nibble order it can be stored in ({span: description}); a
        # config's NIB_SPAN picks one, the layer's own order when it has none. Built once
        # per layer by the caller that tunes several M (`weight_variants`): a copy of the
        # weights per order.
        self.variants = variants or weight_variants(layer)
        self.stored = {1: layer.meta.get("w13_nib_span", 0),
                       2: layer.meta.get("w2_nib_span", 0)}
        self.ids = topk_ids.reshape(-1)
        self.router = topk_weights.reshape(-1)
        self.n = self.ids.numel()
        self.a1, self.s1, self.g1, self.act = backend._quantize(
            layer, self.plan, quant, x, "w13", None)
        # the heuristics, not a tuned file's entry: what `default_us` measures
        self.defaults = heuristics.default_configs(self.n, P.E, self.plan["w13"]["kind"],
                                                   self.act)
        # what the layer runs now (the files' entry, else the heuristics): one more climb
        # start, so that a tuning never writes a tile slower than the one it replaces
        self.shipped = heuristics.pick_configs(self.n, P.E, self.plan["w13"]["kind"],
                                               self.act, self.shape(1), self.shape(2),
                                               heuristics.weight_key(self.plan["w13"]))
        self._aligned: dict[int, tuple] = {}
        self._activated = None  # run_activated's output, made on first use
        self._out = {1: torch.empty(self.n, P.w13_rows, dtype=x.dtype, device=x.device),
                     2: torch.empty(self.n, P.K, dtype=torch.float32, device=x.device)}
        h = self.run(1, self.defaults[0]).clone()
        inter = quant.activation(h, P.activation, P.N)
        self.a2, self.s2, self.g2, act2 = backend._quantize(
            layer, self.plan, quant, inter, "w2", None)
        assert act2 == self.act

    @property
    def weight_kind(self) -> int:
        return self.plan["w13"]["kind"]

    def key(self):
        """The layer's key in a tuned-config file."""
        from . import heuristics, kinds

        return configs.LayerKey(heuristics.weight_key(self.plan["w13"]),
                                kinds.ACT_NAMES[self.act], self.problem.E, self.shape(1),
                                self.shape(2))

    def shape(self, gemm: int) -> tuple[int, int]:
        """(N, K) of GEMM 1 or 2."""
        P = self.problem
        return (P.w13_rows, P.K) if gemm == 1 else (P.K, P.N)

    def spans(self, gemm: int) -> tuple[int, ...]:
        """The nibble orders GEMM `gemm`'s weights can be timed in."""
        return tuple(sorted(self.variants[gemm]))

    def weights(self, gemm: int, config: dict) -> dict:
        return self.variants[gemm][config.get("NIB_SPAN", self.stored[gemm])]

    def weight_rounding(self, gemm: int, *configs: dict) -> float:
        """Each weight's relative error bound where one of `configs` rounds the weights to the
        compute dtype and another does not (none given: where any config may;
        `fused_moe.one_dot_rounds`: int4 planes under ONE_DOT, as Marlin's decode does; two
        that round round alike): s rounded, then (q - zero) * s rounded, 2u + u^2 (u = 2^-p,
        the compute dtype's p significant bits; normal products: one that rounds to a
        subnormal, below 2^-14 in fp16, errs by at most half its spacing instead); else 0."""
        from . import fused_moe
        from .tune import MANTISSA_BITS

        def rounds(w: dict, config: dict | None) -> bool:
            return fused_moe.one_dot_rounds(w, self.act) and (
                config is None or fused_moe.one_dot_run(w, self.act, config))

        if configs:
            differ = len({rounds(self.weights(gemm, c), c) for c in configs}) > 1
        else:
            differ = any(rounds(w, None) for w in self.variants[gemm].values())
        if not differ:
            return 0.0
        u = 2.0 ** -MANTISSA_BITS[self.variants[gemm][self.stored[gemm]]["compute"]]
        return 2 * u + u * u

    def aligned(self, block_m: int) -> tuple:
        from . import align

        if block_m not in self._aligned:
            self._aligned[block_m] = align.align_assignments(self.ids, self.problem.E,
                                                             block_m, n=self.n)
        return self._aligned[block_m]

    routings = 1  # timed per launch (RoutingStages: several)

    def launch(self, gemm: int, config: dict) -> None:
        """What the timer times: GEMM 1 or 2 with `config`, once."""
        self.run(gemm, config)

    def run(self, gemm: int, config: dict) -> torch.Tensor:
        """Launch GEMM 1 or 2 with `config` into its output buffer (returned, reused)."""
        from . import fused_moe

        sorted_ids, block_expert, num_padded = self.aligned(config["BLOCK_M"])
        out = self._out[gemm]
        weights = self.weights(gemm, config)
        if gemm == 1:
            fused_moe.moe_gemm(self.a1, self.s1, self.g1, weights, out, sorted_ids,
                               block_expert, num_padded, None, a_row_div=self.problem.topk,
                               act=self.act, config=config)
        else:
            fused_moe.moe_gemm(self.a2, self.s2, self.g2, weights, out, sorted_ids,
                               block_expert, num_padded, self.router, a_row_div=1,
                               act=self.act, config=config)
        return out

    def launch_activated(self, config: dict, fused: bool) -> None:
        """What the timer times for GEMM1's FUSED_ACT: act(GEMM1) with `config`, once."""
        self.run_activated(config, fused)

    def run_activated(self, config: dict, fused: bool) -> torch.Tensor:
        """The layer's activation of GEMM1 with `config`: in GEMM1's epilogue (`fused`), or
        GEMM1 then the activation kernel, as the backend runs either (backend.forward)."""
        from . import fused_moe, quant

        P = self.problem
        if not fused:
            return quant.activation(self.run(1, config), P.activation, P.N)
        if self._activated is None:
            self._activated = torch.empty(self.n, P.N, dtype=self._out[1].dtype,
                                          device=self._out[1].device)
        sorted_ids, block_expert, num_padded = self.aligned(config["BLOCK_M"])
        fused_moe.moe_gemm(self.a1, self.s1, self.g1, self.weights(1, config), self._activated,
                           sorted_ids, block_expert, num_padded, None,
                           a_row_div=self.problem.topk, act=self.act, config=config,
                           activation=P.activation)
        return self._activated

    def effective(self, gemm: int, config: dict) -> tuple:
        """The configuration as the kernel will run it (BLOCK_K clamped to the scale block,
        SPLIT_K to the splits K has room for, FAST_I4 and SWAP_AB as booleans, ZERO_SUMS as it
        runs: `fused_moe.zero_sums_run`, TAIL_M as `heuristics.tail_rows` fits it, ONE_DOT
        as `fused_moe.one_dot_run` runs it): two
        configs equal here run the same launches."""
        from . import fused_moe, heuristics

        K = self.shape(gemm)[1]
        w = self.weights(gemm, config)
        bk = heuristics.weights_block_k(w, config["BLOCK_K"], K, self.act)
        splits, _ = heuristics.weights_split_plan(w, config, K, self.act)
        return (config["BLOCK_M"], config["BLOCK_N"], bk, config["num_warps"],
                config["num_stages"], bool(config.get("SWAP_AB")),
                bool(config.get("FAST_I4")), splits, config.get("K_UNROLL", 1),
                w["constexprs"]["NIB_SPAN"], config.get("GROUP_M", 1),
                fused_moe.zero_sums_run(w, self.act, config), heuristics.tail_rows(config),
                fused_moe.one_dot_run(w, self.act, config))

    def weight_choices(self, gemm: int, config: dict) -> dict:
        """Grid fields of the GEMM's weights under `config` (its nibble order): ZERO_SUMS both
        ways where its scale words carry the zero points (the zero points from the activation
        sums or inside the decode: each timed faster on some layers, docs/speed.md round
        thirteen); ONE_DOT both ways where it applies (nibble planes: one dot timed faster on
        FP4 prefill tiles, slower on int4 ones, mixed at decode sizes: round seventeen);
        BLOCK_K not at all where planes fix it to their span (int4 and e2m1 nibble planes,
        fp6's six-bit planes: heuristics.weights_block_k), so that the climb spends no time
        on tiles that are one kernel."""
        from . import fused_moe

        w = self.weights(gemm, config)
        fields = ({"ZERO_SUMS": (False, True)}
                  if fused_moe.zero_sums_run(w, self.act, {"ZERO_SUMS": True}) else {})
        if fused_moe.one_dot_applies(w, self.act):
            fields["ONE_DOT"] = (False, True)
        if w["constexprs"]["NIB_SPAN"]:
            fields["BLOCK_K"] = (config["BLOCK_K"],)
        return fields

    def programs(self, gemm: int, config: dict) -> int:
        """The GEMM's grid for these rows: row blocks that hold rows x column blocks."""
        _, _, num_padded = self.aligned(config["BLOCK_M"])
        row_blocks = int(num_padded.item()) // config["BLOCK_M"]
        return row_blocks * -(-self.shape(gemm)[0] // config["BLOCK_N"])

    def magnitudes(self, gemm: int) -> torch.Tensor:
        """float64 [n, N]: sum over k of |a[row, k] * W[expert, col, k]| with the scales
        applied (and |router weight| for GEMM2): what bounds any summation order's error.
        Int4 zero points without act order add 2 |zero - SYM_ZERO| * scale to each |W|: the
        kernel may sum a (q - SYM_ZERO) s and subtract (zero - SYM_ZERO) s sum(a) instead
        (gemm_kernel's ZERO_SUMS), terms that |q - zero| s alone does not bound."""
        from ..native import dequantize_expert

        a = self._dequantized_input(gemm)
        p = "w13" if gemm == 1 else "w2"
        rows_a = torch.arange(self.n, device=a.device) // (self.problem.topk if gemm == 1
                                                           else 1)
        out = torch.zeros(self.n, self.shape(gemm)[0], dtype=torch.float64, device=a.device)
        # e2m1 codes in the Triton backend's planes and tiles, fp6 codes in six-bit planes:
        # the common format for the torch backend's dequantization, for the time of this bound
        from .backend import stored_tensors

        kept = {}
        for name, t in stored_tensors(self.layer, p).items():
            kept[name] = self.layer.get(name)
            self.layer.put(name, t)
        try:
            for e in torch.unique(self.ids).tolist():
                rows = (self.ids == e).nonzero().flatten()
                w = dequantize_expert(self.layer, p, e).to(torch.float64).abs()
                out[rows] = a[rows_a[rows]].abs() @ (w + self._zero_share(p, e, w.shape[1])).T
        finally:
            for name, t in kept.items():
                self.layer.put(name, t)
        if gemm == 2:
            out *= self.router.to(torch.float64).abs()[:, None]
        return out

    def _zero_share(self, p: str, e: int, K: int) -> torch.Tensor | float:
        """2 |zero - SYM_ZERO| * scale per weight [N, K] of expert e's linear `p` where it has
        int4 zero points and no act order (`magnitudes`), else 0."""
        layer = self.layer
        if (not (layer.quant.packed and layer.has(f"{p}_zp")) or layer.has(f"{p}_g_idx")
                or layer.meta["bits"] != 4):
            return 0.0
        sym = 8  # int4's SYM_ZERO
        z = layer.get(f"{p}_zp")[e].to(torch.float64)
        s = layer.get(f"{p}_s")[e].to(torch.float64)
        share = 2 * (z - sym).abs() * s.abs()  # [N, groups]
        return share.repeat_interleave(layer.meta[f"{p}_group_cols"], 1)[:, :K]

    def _dequantized_input(self, gemm: int) -> torch.Tensor:
        """The GEMM's activation as the kernel's epilogue sees it, float64: codes times
        their per-row scale or E8M0 column scales, and the global factor (int8, NVFP4)."""
        from ..convert import decode_e8m0
        from . import kinds

        a, s, g = (self.a1, self.s1, self.g1) if gemm == 1 else (self.a2, self.s2, self.g2)
        a = a.to(torch.float64)
        if self.act == kinds.A_INT8:
            a = a * s.to(torch.float64).reshape(-1, 1)
        elif self.act == kinds.A_MX:
            cols = kinds.MX_COLS
            a = a * decode_e8m0(s, torch.float64).repeat_interleave(cols, 1)[:, :a.shape[1]]
        if g is not None:
            a = a * g.to(torch.float64)
        return a
