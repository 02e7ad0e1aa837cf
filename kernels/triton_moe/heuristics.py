"""Host-side choices for one grouped-GEMM launch: the tile config (the device's tuned file,
else `pick_config`'s heuristics), the BLOCK_K a scale block allows, and the split-K plan."""

from __future__ import annotations

import dataclasses
import math

import triton
from moecert.reference.schemes import ACT_GROUP as SCHEME_ACT_GROUP

from . import configs
from .kinds import (
    A16,
    A_FP8,
    A_FP8_G,
    A_INT8,
    A_MX,
    ACT_NAMES,
    DOT_NATIVE,
    INTERPRET,
    MX_COLS,
    S_E4M3,
    W16,
    W_FP4,
    W_FP8,
    W_INT4,
    W_INT8,
    W_MXFP8,
    W_UINT8,
    WEIGHT_NAMES,
)

# Rows per expert (assignment rows / the layer's experts, on average) from which a launch
# takes a prefill tile: there the GEMM is bound by the tensor cores, not by reading the weights
# once, and a 16-row block, which reads each weight tile once per 16 rows, falls to a fifth of
# the GEMM rate (issue 34: 17.6% on Mixtral-8x7B bf16 at M = 1024).
PREFILL_ROWS = {64: 64, 128: 128}  # {rows per expert at least: BLOCK_M}
PREFILL_TILE = {64: {"BLOCK_N": 128, "BLOCK_K": 64, "num_warps": 4, "num_stages": 4},
                128: {"BLOCK_N": 128, "BLOCK_K": 64, "num_warps": 8, "num_stages": 4}}
# The 128-row tile by operand width (prefill_sweep on an H200, 2026-12-01, both GEMMs at M 4096,
# % of the bf16 GEMM rate; docs/speed.md, round nine): 16-bit weights and activations
# 128 x 256 x 64, 3 stages (DeepSeek-V3 46.6%, Qwen3-30B-A3B 51.4% against 38-44% with
# PREFILL_TILE's; the tuner chose it on Mixtral-8x7B at M 1024 and 4096); 8-bit weights and
# activations BLOCK_K 128, 3 stages (DeepSeek-V3 52.8%, Qwen3 52.6% against 36-37% at BLOCK_K
# 64; 128 x 256 x 64 ran at 15-19%).
PREFILL_TILE_WIDE = {16: {"BLOCK_N": 256, "BLOCK_K": 64, "num_warps": 8, "num_stages": 3},
                     8: {"BLOCK_N": 128, "BLOCK_K": 128, "num_warps": 8, "num_stages": 3}}
EIGHT_BIT_WEIGHTS = frozenset({W_FP8, W_INT8, W_UINT8, W_MXFP8})
EIGHT_BIT_ACTS = frozenset({A_INT8, A_FP8, A_FP8_G})
# Nibble weights (int4, e2m1) with 16-bit activations at prefill sizes: the weight tile as the
# MMA's first operand (SWAP_AB), 64 rows, at every prefill size (prefill_sweep --set swapped,
# H200, Mixtral-8x7B, both GEMMs at M 1024 / 4096, % of the bf16 GEMM rate: gptq-int4 48.3 /
# 51.2, mxfp4 39.7 / 41.3, nvfp4 38.7 / 40.4; the 128-row swapped tiles 36-45 at M 1024 and
# equal at 4096; the unswapped 128 x 64 tile 22-31% in issue 34's sweep). The weight tile is
# then the operand a Hopper wgmma may read from registers, where the nibbles are decoded.
PREFILL_NIBBLE_TILE = {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 128, "num_warps": 4,
                       "num_stages": 4, "SWAP_AB": True}
# The activations that take it: 16-bit ones, and W4A8's int8 codes, which reach the planes'
# PTX decode in the compute dtype and multiply there as W4A16's do (fused_moe.int8_codes_dtype,
# round twelve; before, W4A8's prefill read its 32-row decode bucket).
NIBBLE_PREFILL_ACTS = frozenset({A16, A_INT8})
# Nibble weights (int4, e2m1) decode their tile into registers beside the accumulator(s). sm90
# builds of the 128-row, 8-warp tile (tools/sm90_compile.py: triton 3.9 and its ptxas on the
# CPU, registers / stack bytes per thread): BLOCK_N 128: gptq-int4 255 / 0, mxfp4 183 / 0
# (255 / 256, spilling, with its scales on the pairs' sums instead of folded), nvfp4 186;
# BLOCK_N 64: gptq-int4 166, mxfp4 102, nvfp4 110 (two programs' registers fit an SM). Not
# timed on a GPU.
PREFILL_NIBBLE_N = 64
# The FP4 prefill dispatch (dequant.py): from DEQUANT_ROWS rows per expert an e2m1 layer whose
# decode is exact in its compute dtype (dequant.exact_in), with 16-bit activations, decodes
# each linear per call into a workspace and runs the W16 prefill tile on it. Predicted from
# the H200 of issue 44 (bf16 GEMM 683 TFLOP/s, copy 4.21 TB/s; not yet timed): the decode
# costs 0.5 B read + 2 B written per weight and the W16 GEMM reads 1.5 B more than the FP4
# one, ~4 B / 4.21 TB/s = 0.95 ps per weight; the FP4 tile at ~22% and the W16 tile at ~60%
# of the GEMM rate cost 2r / 683 TFLOP/s x (1/0.22 - 1/0.6) = 8.4 fs per weight and row: even
# at r = 113 rows per expert. Against the swapped nibble tile (PREFILL_NIBBLE_TILE, ~40%
# of the rate where the FP4 tile above ran ~22%) the same sum gives r = 377: on the H200
# (2026-12-01, round nine) Mixtral-8x7B at M 1024 (256 rows per expert) ran both fused GEMMs
# in 2279 us (mxfp4) / 2341 (nvfp4) where the dispatch's layer took 2629 / 2672, at M 4096
# (1024 rows) 8650 / 8777 against 6175 / 6298. Mixtral-8x7B takes it from M = 2048,
# gpt-oss-120b (E 128, topk 4) from M = 16384. MOECERT_TRITON_DEQUANT_ROWS moves it (configs).
DEQUANT_ROWS = 512
# Int4 in nibble planes takes the same dispatch (dequant.int4_planes_in: the one-dot tile's
# rounded decode) from these rows per expert, by whether the codes have zero points. One H200
# (2026-12-02, round nineteen), Mixtral-8x7B, the dispatch at every size against none, us:
# gptq-int4 at 256 / 512 / 1024 rows per expert 2517.5 / 3550.2 / 6261.0 against 1695.8 /
# 3294.8 / 6926.2 (wins from 1024), awq-int4 2539.2 / 3688.7 / 6126.0 against 2180.9 /
# 4041.7 / 8264.6 (wins from 512: its fused tile decodes the zero points too). The decode
# costs 0.8-1.0 ms a call there.
DEQUANT_ROWS_INT4 = {False: 1024, True: 512}
# ... and only where each expert's smaller linear has at least this many weights: on
# Qwen3-30B-A3B (768 x 2048) the fused int4 tile runs at bf16's speed (gptq-int4 976.5 us at
# M 4096, bf16 1002.0 in round nine), so the decode buys nothing: at 256 / 512 rows per expert
# gptq-int4 took 1401.9 / 2325.9 us dispatched against 976.5 / 1967.5 fused, awq-int4
# 1401.7 / 2323.4 against 1147.6 / 2221.1. Mixtral-8x7B's is 4096 x 14336.
DEQUANT_INT4_WEIGHTS = 1 << 24
# The workspace (the larger linear, w13, in the compute dtype) may take at most this much:
# gpt-oss-120b's w13 is 4.0 GiB in bf16, Mixtral-8x7B's 1.75 GiB; DeepSeek-V3's 14 GiB is
# not taken (its prefill stays on the fused tile).
DEQUANT_WORKSPACE_BYTES = 5 << 30


def prefill_block_m(num_rows: int, num_experts: int | None) -> int | None:
    """The prefill tile's BLOCK_M for this many rows over `num_experts` experts, None below
    PREFILL_ROWS (or without the expert count: the decode tile)."""
    if not num_experts:
        return None
    per_expert = num_rows / num_experts
    fits = [bm for least, bm in PREFILL_ROWS.items() if per_expert >= least]
    return max(fits) if fits else None


def dequant_rows(weights: dict) -> float:
    """The rows per expert from which a layer eligible for the prefill dispatch takes it:
    MOECERT_TRITON_DEQUANT_ROWS, else DEQUANT_ROWS_INT4 for int4 (`weights`: the layer's
    w13, describe_weights), DEQUANT_ROWS for e2m1."""
    forced = configs.forced_dequant_rows()
    if forced is not None:
        return forced
    if weights["kind"] == W_INT4:
        return DEQUANT_ROWS_INT4[weights["constexprs"]["HAS_ZERO"]]
    return DEQUANT_ROWS


def dequantizes(num_rows: int, num_experts: int, weights: dict) -> bool:
    """Whether a layer eligible for the prefill dispatch takes it at this many assignment
    rows (`dequant_rows` per expert)."""
    return (num_experts > 0 and num_rows > 0
            and num_rows >= dequant_rows(weights) * num_experts)


# gemm_kernel's TAIL_M where a tile's entry has none, on a swapped tile of 64 rows or more (the
# nibble prefill tile, PREFILL_NIBBLE_TILE): one H200, against 0 in alternating processes,
# Mixtral-8x7B gptq-int4 1.11x at M 1024 and 1.04x at M 4096, Qwen3-30B-A3B's nibble schemes
# 1.05-1.12x at M 1024; Mixtral's MXFP4 / NVFP4 at M 1024 0.99 / 0.98x (within the 3% spread,
# but in every pair), the rest within the spread. The unswapped 64- and 128-row tiles (bf16,
# fp8) gained nothing beyond that spread: none (docs/speed.md, round sixteen)
SWAPPED_TAIL_M = 16


def default_tail_m(config: dict) -> int:
    """TAIL_M where a tile's entry has none: SWAPPED_TAIL_M on a swapped tile of 64 rows or
    more, else 0."""
    return SWAPPED_TAIL_M if config.get("SWAP_AB") and config["BLOCK_M"] >= 64 else 0


# gemm_kernel's ONE_DOT where a tile's entry has none: on FP4 weights' swapped tile of 64 rows
# or more (the nibble prefill tile), whose planes are scaled inside the decode, so the tile
# accumulates in the dot and one dot keeps the MMAs asynchronous. One H200, against four dots
# in alternating processes (docs/speed.md, round seventeen): FP4 prefill 1.21-1.37x on
# Mixtral-8x7B (M 1024), Qwen3-30B-A3B, gpt-oss-120b and DeepSeek-V3 (M 4096); int4 (scaled
# after the dot) 0.84-0.93x; the decode tiles mixed (0.83-1.13x on their tuned entries: a
# tuned entry's choice, `tune_stages.weight_choices`). Int4 planes with 16-bit activations and
# zero points (AWQ's; round eighteen: under ONE_DOT the scale and zero point join the decode,
# each weight rounded once to the compute dtype as Marlin's are, and the tile accumulates in
# its dot): against four dots, alternating processes, 1.04-1.07x on Mixtral-8x7B (M 1024 /
# 4096, two pairs), 1.03 / 1.09x on Qwen3-30B-A3B, 1.09x on DeepSeek-V3 at M 4096: the zero
# points' share after the dot (ZERO_SUMS) is gone. Symmetric int4 (GPTQ) ran 0.80-0.92x:
# its extra multiply per weight costs more than the waits it saves, so it keeps four dots.
def default_one_dot(weights: dict, act: int, config: dict) -> bool:
    """ONE_DOT where a tile's entry has none, on a swapped tile of 64 rows or more: FP4
    weights, and int4 weights with zero points and 16-bit activations."""
    kind = weights["kind"]
    zero_int4 = kind == W_INT4 and act == A16 and bool(weights["constexprs"]["HAS_ZERO"])
    return ((kind == W_FP4 or zero_int4) and bool(config.get("SWAP_AB"))
            and config["BLOCK_M"] >= 64)


def fit_tail(want: int, block_m: int) -> int:
    """`want` rows fitted to the kernel's tail levels (BLOCK_M / 2 or / 4, at least
    configs.MIN_TAIL_M rows; 0, the whole tile, at or above BLOCK_M)."""
    tail = max(want, block_m // 4, configs.MIN_TAIL_M) if want else 0
    return tail if tail < block_m else 0


def tail_rows(config: dict) -> int:
    """gemm_kernel's TAIL_M for a launch of `config`: the smallest tile an expert's last row
    block runs on, 0 for the whole tile. MOECERT_TRITON_TAIL_M (configs.forced_tail_m), else
    the entry's TAIL_M, else `default_tail_m`; `fit_tail`."""
    forced = configs.forced_tail_m()
    want = forced if forced is not None else config.get("TAIL_M", default_tail_m(config))
    return fit_tail(want, config["BLOCK_M"])


def pick_config(num_rows: int, num_experts: int | None = None,
                weight: int | None = None, act: int | None = None) -> dict:
    """Tile sizes from the GEMM's assignment rows alone (and, for the prefill tile, the
    layer's expert count, and its weight kind). BLOCK_M must not depend on (N, K): both
    GEMMs share one row alignment.
    Decode, measured on H100 (W4A16 g128, Qwen3-30B-A3B, Mixtral-8x7B, DeepSeek-V3 at 16 to
    2048 assignments): 16-row blocks win at every size in this kernel (the dequantized weight
    tile sits in registers; row blocks of one expert run side by side and share it through
    L2, so a bigger BLOCK_M saves little DRAM traffic and costs occupancy: 32/64/128 rows
    were 1.2x to 4x slower).
    FAST_I4 (symmetric int4 with 16-bit activations: nibbles to the compute dtype by the
    mantissa trick, no int-to-float conversion) was 1.1x to 1.5x faster everywhere. With it,
    a 128 x 128 weight tile beat 64 x 128 and 128 x 64 from 16 rows on (Mixtral M=64: 1.5x).
    SWAP_AB (weight tile as the MMA's M side) paid only for a single token (2 to 8 rows:
    ~5%, 64 x 128 tile) and lost 5-15% from 128 rows on.
    Prefill (`prefill_block_m`: PREFILL_ROWS rows per expert and more): PREFILL_TILE, the
    MMA-bound tile (docs/speed.md, "Prefill tiles"), its 128-row form by operand width
    (PREFILL_TILE_WIDE); nibble weights with NIBBLE_PREFILL_ACTS PREFILL_NIBBLE_TILE, swapped
    (the H100 decode measurement above predates the prefill tiles: at 256-1024 rows per expert
    on an H200 the swapped nibble tile ran at 39-51% of the GEMM rate, round nine, where the
    unswapped one had run at 22-31% in issue 34's sweep, on an older kernel)."""
    if INTERPRET:  # numpy per op: fewer, bigger tiles (the GPU's default N x K tile: 128 x 128
        # made the CPU smoke suite 95 -> 61 s against 64 x 64; masks and K loops still run on
        # every shape off the tile and every K above 128)
        return {"BLOCK_M": 16, "BLOCK_N": 128, "BLOCK_K": 128, "num_warps": 4, "num_stages": 1}
    block_m = prefill_block_m(num_rows, num_experts)
    if block_m is not None:
        if weight in (W_INT4, W_FP4) and act in NIBBLE_PREFILL_ACTS:
            return {**PREFILL_NIBBLE_TILE, "FAST_I4": True}
        tile = {"BLOCK_M": block_m, **PREFILL_TILE[block_m], "FAST_I4": True}
        if weight in (W_INT4, W_FP4):
            tile["BLOCK_N"] = min(tile["BLOCK_N"], PREFILL_NIBBLE_N)
        elif block_m == 128 and weight == W16 and act == A16:
            tile.update(PREFILL_TILE_WIDE[16])
        elif block_m == 128 and weight in EIGHT_BIT_WEIGHTS and act in EIGHT_BIT_ACTS:
            tile.update(PREFILL_TILE_WIDE[8])
        return tile
    if num_rows < 16:
        return {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 128, "num_warps": 4, "num_stages": 4,
                "SWAP_AB": True, "FAST_I4": True}
    return {"BLOCK_M": 16, "BLOCK_N": 128, "BLOCK_K": 128, "num_warps": 4, "num_stages": 4,
            "FAST_I4": True}


def default_configs(num_rows: int, num_experts: int | None = None,
                    weight: int | None = None, act: int | None = None) -> tuple[dict, dict]:
    """Both GEMMs' heuristic configs (`pick_config`), one tile per K step. (Two tiles per
    step gained int4 g128 up to 1.2x on the plain layout; on the tiled int4 layout one tile
    per step was faster for 9 of 10 GEMMs measured, up to 1.1x: docs/speed.md, "Change 5".)"""
    return (pick_config(num_rows, num_experts, weight, act),
            pick_config(num_rows, num_experts, weight, act))


# Bytes one element takes in a shared-memory stage of the K loop, per weight and activation
# kind (nibble codes are staged packed; MXFP8 activations are e4m3 values held in 16 bits;
# int8 codes travel in the compute dtype to int4 planes decoded by the PTX:
# fused_moe.int8_codes_dtype, so 2 bytes, the larger of their two forms).
WEIGHT_STAGE_BYTES = {W16: 2, W_INT4: 0.5, W_UINT8: 1, W_INT8: 1, W_FP8: 1, W_MXFP8: 1,
                      W_FP4: 0.5}
ACT_STAGE_BYTES = {A16: 2, A_INT8: 2, A_MX: 2, A_FP8: 1, A_FP8_G: 1}


def shared_memory_bytes(config: dict, weight: int, act: int) -> int:
    """An upper estimate of what a config's K loop holds in shared memory: num_stages copies
    (Triton's software pipeline keeps that many loads in flight, each in its own buffer) of
    one step's activation tile [BLOCK_M, BLOCK_K x K_UNROLL] and weight tile [BLOCK_N, the
    same K], at the config's BLOCK_K (the launch may narrow it to a scale block, never widen
    it)."""
    k = config["BLOCK_K"] * config.get("K_UNROLL", 1)
    step = (config["BLOCK_M"] * k * ACT_STAGE_BYTES[act]
            + config["BLOCK_N"] * k * WEIGHT_STAGE_BYTES[weight])
    return int(config["num_stages"] * step)


def fit_shared_memory(config: dict, weight: int, act: int, smem: int) -> dict:
    """The heuristic tile (`pick_config`, sized on an H100, 227 KiB a program) for a device
    with `smem` bytes a program: first fewer stages (not below 2), then narrower weight tiles
    (not below 32 rows), until `shared_memory_bytes` fits. On the H100 and H200 every default
    fits (the largest, 16-bit weights at 4 stages, is 144 KiB) and comes back unchanged; on
    an L40S (99 KiB) 16-bit weights take 2 stages, on an MI300 (64 KiB LDS) 64-row tiles
    too, where the H100's tile is estimated above what the device has (Triton refuses such
    a launch: OutOfResources). Not measured on those GPUs (none is lent here): a fit, not a
    tuning. A tuned file's configs are never changed: they ran on their device."""
    fitted = dict(config)
    while shared_memory_bytes(fitted, weight, act) > smem and fitted["num_stages"] > 2:
        fitted["num_stages"] -= 1
    while shared_memory_bytes(fitted, weight, act) > smem and fitted["BLOCK_N"] > 32:
        fitted["BLOCK_N"] //= 2
    return fitted


def weight_key(weights: dict) -> str:
    """The weight kind's name in a tuned-config file (`describe_weights`' kind): e2m1 codes
    with NVFP4's e4m3 block scales are keyed apart from MXFP4's (other scale loads per
    tile, other best tiles: an H100 ran MXFP4 DeepSeek-V3 at M = 16 in 1738 us with the
    NVFP4 entry against 1509 us with the heuristics), int4 codes with zero points from
    those without (`int4_weight_name`)."""
    if weights["kind"] == W_INT4:
        return int4_weight_name(weights["constexprs"]["HAS_ZERO"])
    name = WEIGHT_NAMES[weights["kind"]]
    if weights["kind"] == W_FP4 and weights["constexprs"]["WSCALE"] == S_E4M3:
        name += "_E4M3"
    if weights["constexprs"]["FP6_EXP"]:  # six-bit planes: 3/4 of the bytes, another decode
        name += "_FP6"
    return name


def int4_weight_name(has_zero: bool) -> str:
    """int4 codes' name in a tuned-config file: with zero points (AWQ, asymmetric GPTQ: one
    more tensor read per group) W_INT4_ZERO, else W_INT4."""
    return WEIGHT_NAMES[W_INT4] + ("_ZERO" if has_zero else "")


# The key a layer reads while no file has entries of its own (`tuned_key`): int4 with zero
# points read gptq-int4's entries until 2026-12-01, under one key, so that tuning awq-int4
# wrote over them; keyed apart, it reads them still until it is tuned. (Only kinds whose
# entries come from the file of their nibble order, TUNED_AT_EVERY_SIZE: `configs.layer_file`
# says whether a file has the layer.)
# MXFP6 in six-bit planes reads MXFP8's tiles until it is tuned (the same kernel but for the
# decode; its BLOCK_K is the planes' span whatever the entry says).
KEY_FALLBACK = {"W_INT4_ZERO": "W_INT4", "W_MXFP8_FP6": "W_MXFP8"}


def every_size_configs(key: configs.LayerKey, num_rows: int, max_steps: int | None = None,
                       keep=None) -> tuple[dict, dict] | None:
    """A TUNED_AT_EVERY_SIZE kind's configs: the nearest bucket of its own key's file; but
    where its KEY_FALLBACK key has a nearer bucket (or one as near and smaller, the lookups'
    tie rule) stored in the same nibble orders (so the layer's weights, stored in its own
    key's orders, run either tile), that one. A
    key tuned at some sizes only then keeps the fallback's tiles at the others: awq-int4's
    Mixtral-8x7B entry tuned at M = 16 alone read its 32-row tile at M = 64 in 456.6 us, where
    W_INT4's 128-row bucket runs 359.1; w4a8-int8's, tuned at M = 64 alone, made M = 16 414.1
    us against 347.4 (2026-12-01, docs/speed.md round eight). On a tie the smaller: the same
    two kinds' 128-row buckets (tuned at M = 64) ran M = 32 (64 rows) in 437.9 / 346.6 us,
    W_INT4's 32-row bucket in 355.1 / 291.3 (docs/speed.md, round ten). `max_steps`: a
    bucket more powers of two from the rows counts as none, and one `keep` rejects
    (pick_configs)."""
    own = configs.nearest_in_layer_file(key, num_rows, max_steps=max_steps, keep=keep)
    fallback = KEY_FALLBACK.get(key.weight)
    if fallback is None or (own is not None and own[0][0] == 0):  # none nearer than its own
        return None if own is None else own[1]
    other = dataclasses.replace(key, weight=fallback)
    near = configs.nearest_in_layer_file(other, num_rows, max_steps=max_steps, keep=keep)
    if own is None:
        return None if near is None else near[1]
    if (near is not None and near[0] < own[0]
            and configs.tuned_spans(key) == configs.tuned_spans(other)):
        return near[1]
    return own[1]


def tuned_key(key: configs.LayerKey, device: str | None = None,
              directory=None) -> configs.LayerKey:
    """`key`, or where no tuned file has that layer, the key of KEY_FALLBACK's kind: the one
    whose entries (tiles and nibble spans alike) the layer reads."""
    fallback = KEY_FALLBACK.get(key.weight)
    if fallback is None or configs.layer_file(key, device, directory) is not None:
        return key
    return dataclasses.replace(key, weight=fallback)


PREFILL_STEPS = 1  # see pick_configs
# Weight kinds whose tuned entries count at every size, as before the prefill tile: on an
# H200 (2026-11-28, `tools/i34_gpu.sh bench`, graph replay) gptq-int4 Mixtral at M = 1024 ran
# 2365 us on its tuned 128-row bucket (a 32-row swapped tile) and 4561 us on the prefill tile,
# DeepSeek-V3 at M = 4096 17041 against 21589 us: the int4 decode, not the MMA, bounds it.
# Their entries come from the file of their nibble order at every size
# (`every_size_configs`), not from another device's nearer bucket: the H100's
# 512-row bucket ran the same M = 1024 layer in 2640-2647 us on the H200 (2026-12-01, two
# processes), its own 128-row bucket 2345-2384 us (three sessions; docs/speed.md, round seven).
# With NIBBLE_PREFILL_ACTS, since the swapped prefill tile (PREFILL_NIBBLE_TILE), at prefill
# sizes only within PREFILL_STEPS as the other kinds: that tile ran the same layer's two GEMMs
# in 1875.6 us at M 1024 and 7081.3 at M 4096 (the layer on the 128-row bucket: 2646.9 and
# 9538.3 us; 2026-12-01, round nine).
TUNED_AT_EVERY_SIZE = frozenset({W_INT4})


def pick_configs(num_rows: int, num_experts: int, weight: int, act: int,
                 gemm1: tuple[int, int], gemm2: tuple[int, int],
                 weight_name: str | None = None) -> tuple[dict, dict]:
    """Both GEMMs' configs of one layer (gemm1/gemm2: their (N, K)): the device's tuned file
    when it has the layer (configs.py, written by `moecert tune`), else `pick_config`'s
    heuristics, always under the interpreter, fitted to the device's shared memory
    (`fit_shared_memory`). Both share one BLOCK_M either way.
    At prefill sizes (`prefill_block_m`) a tuned bucket counts only within PREFILL_STEPS
    powers of two of the rows: the nearest bucket of a file tuned at decode sizes holds a
    decode tile, a fifth of the GEMM rate there; TUNED_AT_EVERY_SIZE's kinds so only with
    16-bit activations. A decode size reads decode buckets only (a bucket's rows per expert
    below PREFILL_ROWS).
    MOECERT_TRITON_SPLIT_K, when set, overrides both GEMMs' SPLIT_K (configs.forced_split_k)."""
    chosen = None
    if not INTERPRET:
        key = configs.LayerKey(weight_name or WEIGHT_NAMES[weight], ACT_NAMES[act],
                               num_experts, tuple(gemm1), tuple(gemm2))
        prefill = prefill_block_m(num_rows, num_experts) is not None
        # a decode size never reads a bucket tuned at prefill sizes, however near: the
        # 128-row tiles of bf16 Mixtral-8x7B's 2048-row bucket at M 16 (2026-12-01)
        keep = None if prefill else (
            lambda bucket: prefill_block_m(bucket, num_experts) is None)
        if weight in TUNED_AT_EVERY_SIZE:
            chosen = every_size_configs(key, num_rows,
                                        PREFILL_STEPS if prefill and act in NIBBLE_PREFILL_ACTS
                                        else None, keep)
        else:
            for k in dict.fromkeys((key, tuned_key(key))):  # its own, then a fallback's
                chosen = configs.tuned_configs(k, num_rows,
                                               max_steps=PREFILL_STEPS if prefill else None,
                                               keep=keep)
                if chosen is not None:
                    break
    if chosen is None:
        chosen = default_configs(num_rows, num_experts, weight, act)
        smem = None if INTERPRET else configs.current_shared_memory()
        if smem is not None:
            chosen = tuple(fit_shared_memory(c, weight, act, smem) for c in chosen)
    forced = configs.forced_split_k()
    if forced is not None:
        chosen = tuple({**c, "SPLIT_K": forced} for c in chosen)
    return chosen

def block_k_for(config_k: int, K: int, scale_cols: int, weight: int, act: int) -> int:
    """BLOCK_K within one scale column: a divisor of the scale block when it is narrower
    than K (group 32/64/128, fp8 128x128 blocks, MX 32, 1x128 activation groups)."""
    bk = config_k
    if act == A_MX:  # one activation scale per 32 columns
        return MX_COLS
    if act == A_FP8_G:  # a tile also within one 1x128 activation group
        scale_cols = min(scale_cols, SCHEME_ACT_GROUP)
    if scale_cols < K:
        while bk > 16 and scale_cols % bk:
            bk //= 2
        if scale_cols % bk:
            raise ValueError(f"scale block of {scale_cols} columns has no power-of-two tile")
    return bk


def e4m3_scaled_runs(weights: dict, act: int) -> bool:
    """Whether a launch for `weights` (describe_weights) decodes MXFP8's words times their
    E8M0 scales (gemm_kernel's E4M3_SCALED_WORDS): a layer that allows it exactly
    (describe_weights' "e4m3_scaled"), 16-bit activations, a native dot, and the words not
    refused by MOECERT_TRITON_E4M3_WORDS=0."""
    return (bool(weights.get("e4m3_scaled")) and act == A16 and weights["dot"] == DOT_NATIVE
            and configs.e4m3_words_allowed())


def weights_block_k(weights: dict, config_k: int, K: int, act: int) -> int:
    """The BLOCK_K a launch for `weights` (describe_weights) runs with: block_k_for its scale
    block, except that scales applied inside the tile (S_E4M3, MXFP8's scaled words:
    `e4m3_scaled_runs`) leave the tile width free, and nibbles in planes (`plane_nibbles`)
    fix it to their span."""
    span = weights["constexprs"]["NIB_SPAN"]
    if span:
        return span
    cols = weights["scale_cols"] or K
    if weights["constexprs"]["WSCALE"] == S_E4M3 or e4m3_scaled_runs(weights, act):
        cols = K
    return block_k_for(config_k, K, cols, weights["kind"], act)


def split_plan(K: int, block_k: int, split_k: int, scale_blocks: tuple[int, ...] = ()
               ) -> tuple[int, int]:
    """(splits, K_SPLIT) for a requested SPLIT_K: each split's K range starts at a multiple
    of K_SPLIT, itself a multiple of BLOCK_K and of each scale block narrower than K (group
    32/64/128, fp8 blocks, MX 32, 1x128 activation groups), so a split's tiles are the
    whole-K kernel's tiles with their scales; the last split takes the rest. Fewer splits
    than asked when K has fewer such units, never an empty split."""
    if split_k < 1:
        raise ValueError(f"SPLIT_K must be >= 1, got {split_k}")
    unit = math.lcm(block_k, *(b for b in scale_blocks if b < K))
    units = triton.cdiv(K, unit)
    k_split = triton.cdiv(units, min(split_k, units)) * unit
    return triton.cdiv(K, k_split), k_split


def weights_split_plan(weights: dict, config: dict, K: int, act: int) -> tuple[int, int]:
    """`split_plan` of a launch for `weights` (describe_weights) with `config`."""
    blocks = [weights["scale_cols"] or K]
    if act == A_MX:
        blocks.append(MX_COLS)
    elif act == A_FP8_G:
        blocks.append(SCHEME_ACT_GROUP)
    return split_plan(K, weights_block_k(weights, config["BLOCK_K"], K, act),
                      config.get("SPLIT_K", 1), tuple(blocks))


