"""Tuned tile configurations of the grouped MoE GEMM: data files written by `moecert tune`,
one per device, read by `heuristics.pick_configs`. Pure Python (no Triton): the lookup must
not fix the interpreter mode, and it is tested on the CPU.

One file per device, `configs/<device key>.json` (`device_key` of torch's device name; the
folder is MOECERT_TRITON_CONFIG_DIR's instead when that is set, `config_dir`):

    {"format": 1, "device": "h100-80gb-hbm3", "device_name": "NVIDIA H100 80GB HBM3",
     "versions": {"triton": "3.6.0", "torch": "2.11.0+cu130"},
     "layers": [
       {"weight": "W_INT4", "act": "A16", "experts": 128,
        "gemm1": [1536, 2048], "gemm2": [2048, 768],          # (N, K) of each GEMM
        "buckets": {"1024": {"BLOCK_M": 16,
                             "gemm1": {"BLOCK_N": 128, "BLOCK_K": 128, "num_warps": 4,
                                       "num_stages": 4, "SWAP_AB": false, "FAST_I4": true,
                                       "SPLIT_K": 1},
                             "gemm2": {...},
                             "us": {"default": 61.2, "tuned": 48.0}}}}]}

A layer is keyed by the kernel's weight and activation kinds (their names in kinds.py, so a
new kind never shifts an old entry), the local expert count and both GEMMs' (N, K). BLOCK_M
belongs to the layer, not to a GEMM: both GEMMs read one row alignment (align.py).
Bucket: the number of assignment rows n (tokens x topk, or E x T batched) rounded up to a
power of two; the tuner's M values give n = M * topk, powers of two for every model shape.
A lookup between or beyond the tuned buckets takes the nearest one on the log scale (the
smaller on a tie; of two files with the layer, the nearer bucket, the device's own file on
a tie, but for int4 layers the file of their nibble order at every size: `tuned_configs`); at
prefill sizes only one within a factor of two (heuristics.pick_configs:
a decode bucket's tile is not a prefill tile). The Triton and torch versions are recorded,
not matched: a config stays correct under any version, only its speed may move (re-run
`moecert tune`).
A layer may also say in which nibble order its int4 linears are stored,
`"nibble_spans": {"w13": 128, "w2": 0}` (layout `plane_nibbles`: 0 is the checkpoint's
order, adjacent columns in a byte), read by the Triton backend when it converts the weights:
an order the tuner measured faster for that linear. Leaving it out means 0 for both.
SPLIT_K (gemm_kernel's split-K, a power of two), K_UNROLL (tiles per K-loop step, >= 1) and
GROUP_M (row blocks a wave of programs runs together, >= 1; 1: all of them, the launch order)
came after the first files: a GEMM entry without them reads as 1, the one-launch kernel
with one tile per step in launch order. FUSED_ACT (gemm1 only; default true): the layer's
activation in GEMM1's epilogue (gemm_kernel's EPI_ACT); false runs the activation kernel
after GEMM1, where that was timed faster (docs/speed.md, "Round ten"); `moecert tune` times
both for each bucket it writes (tune.fused_act_choice). ZERO_SUMS (default true): int4 zero
points in planes (AWQ) from the rows' activation sums (gemm_kernel's ZERO_SUMS) where the
layer's scales can carry them; false takes them inside the decode; the tuner's climb tries
both where they differ (round thirteen timed each faster on some layers).
TAIL_M (0, or BLOCK_M / 2 or / 4 and >= MIN_TAIL_M; default heuristics.default_tail_m): the
smallest tile an expert's last row block runs on (gemm_kernel's TAIL_M): its MMAs on the rows
it holds rounded up to BLOCK_M / 2 or / 4, not on the padding to BLOCK_M
(heuristics.tail_rows).
ONE_DOT (default heuristics.default_one_dot): a nibble-plane tile's four plane products as one
dot over its whole K (gemm_kernel's ONE_DOT; fused_moe.one_dot_run says where it applies);
on int4 planes with 16-bit activations the scales then join the decode, each weight rounded
once to the compute dtype (fused_moe.one_dot_rounds).

MOECERT_TRITON_SPLIT_K=<power of two> forces every GEMM's SPLIT_K, tuned or not, under the
interpreter too (`forced_split_k`): to run the conformance suites with split-K everywhere.
MOECERT_TRITON_NIB_SPAN=128 stores every int4 linear it fits in nibble planes (`forced_nib_span`).
MOECERT_TRITON_I4_PAIRS=0 turns the PTX int4 pair decode off (`int4_pairs_allowed`).
MOECERT_TRITON_E4M3_WORDS=0 reads MXFP8's weights as fp8 bytes instead of 16-bit words of two
columns (`e4m3_words_allowed`, gemm_kernel's E4M3_WORDS: the default since it timed 0.2-2.1%
faster on an H200, docs/speed.md "round twelve"; in bf16 the words are decoded times their
scales where that is exact, in tiles over several scale blocks: 1.4-1.7x faster, "round
fourteen"), 32-column tiles again.
MOECERT_TRITON_FP6_PLANES=1 stores MXFP6's weights as their six-bit codes in planes where the
decode is exact, instead of widened to e4m3 bytes (`fp6_planes_wanted`, backend._fp6_planes_fit,
gemm_kernel's FP6_EXP): a candidate, off by default (3/4 of the bytes, timed 0.99-0.91x the
bytes' speed on an H200: docs/speed.md "round fifteen").
MOECERT_TRITON_TAIL_M=<0, or a power of two >= MIN_TAIL_M> forces every launch's TAIL_M
(`forced_tail_m`; fitted to each tile by heuristics.tail_rows): to time the tails against
the whole tile on the same entries.
MOECERT_TRITON_ONE_DOT=<0 or 1> forces every nibble-plane launch's ONE_DOT (`forced_one_dot`):
to time one dot against four on the same entries.
MOECERT_TRITON_TMA_B=<0 or 1> forces the weight tile by Hopper's TMA (`forced_tma_b`,
gemm_kernel's TMA_B): 0 per-thread loads everywhere, to time one against the other; 1 wherever
fused_moe.tma_b_run allows it, the interpreter included (its tests). Unset: on for sm90+ GPUs
(docs/speed.md "round twenty").
MOECERT_TRITON_ZERO_SUMS=0 takes int4 zero points (AWQ) inside the weights' decode instead of
from each row's activation sums after the tile's dot (`zero_sums_allowed`, gemm_kernel's
ZERO_SUMS; docs/speed.md "round thirteen").
MOECERT_TRITON_DEQUANT_ROWS=<rows per expert> or "off" moves the prefill dispatch's threshold
for FP4 and int4 planes alike (`forced_dequant_rows`, heuristics.dequant_rows: DEQUANT_ROWS,
DEQUANT_ROWS_INT4): 0 runs every eligible layer on the
dequantized path (a correctness run), off none (the fused kernel, to time one against the
other).
MOECERT_TRITON_FP4_SCALE_WORDS=0 stores e2m1 layers' plane scales as a byte per block instead
of one 32-bit word per row and span (`fp4_scale_words`, layout.scale_words: the default since
it timed 1.21-1.41x faster at decode, bit for bit the same, docs/speed.md "Issue 44").
MOECERT_TRITON_FP4_LEAN=0 turns off issue 44's second decode step for e2m1 planes
(`fp4_lean`, gemm_kernel's LEAN): no K masks on activation loads where every tile lies inside K,
and NVFP4 in bf16 decoded with one packed multiply per pair (the scale carries the decode's
power of two). MOECERT_TRITON_FP4_CARRY=0 turns off the third (`fp4_carry`, read when a layer
is processed; bf16 layers only): the plane words stored with each nibble's sign where the
decode's multiply carries it (layout.carry_bits, gemm_kernel's CARRY) and NVFP4's scales by the
hardware e4m3 conversion on sm89+ (E4M3_CVT). Both are the default since 2026-11-30: bit for bit
the words path's output (the CUDA tests on an H200, the FP4 `ci` cases green with them), and
CARRY + LEAN timed 1.10-1.95x faster than words at decode there (docs/speed.md, "Round three").
MOECERT_TRITON_FP4_SCALE_BF16 switches issue 44's fourth (`fp4_scale_bf16`, read when a layer is
processed): the block scales decoded into bf16 once at load (layout.scale_bf16; NVFP4 in bf16
layers, MXFP4 in any), so the K loop loads them instead of decoding e4m3 or E8M0 bytes every
step; bit for bit the scale bytes' output (the CUDA tests on an H200, 14 of 14 on 07d49e9; the
FP4 `ci` cases green with it forced, 50 of 50 on 333ee90). 1 on for both, 0 off for both;
unset: on in bf16 layers, off in fp16 layers (not timed). MXFP4's since 2026-11-30 (timed
1.05-1.22x faster than the scale bytes on every MXFP4 layer and M measured, bf16 on an H200:
docs/speed.md, "Round four"); NVFP4's since 2026-12-01, once retuned for it on the H200
(1.27-1.39x faster than the bytes with their old entries on Mixtral-8x7B and DeepSeek-V3,
1.06-1.08x on Qwen3-30B-A3B untuned; with the bytes retuned too, bf16 still 1.06-1.18x:
docs/speed.md, "Round seven").
MOECERT_TRITON_FUSED_ACT=0 runs the activation as its own kernel after GEMM1 instead of in
GEMM1's epilogue (`fused_activation`, read per forward; the same bits either way: to time one
against the other, docs/speed.md "Round ten"); `halves` or `adjacent` names the order of a
tile's gate and up columns (FUSED_ACT_ORDERS).
"""

from __future__ import annotations

import functools
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from ..convert import PREFIXES as LINEARS  # the linears a layer's "nibble_spans" may name

FORMAT = 1
CONFIG_DIR = Path(__file__).with_name("configs")
# a folder of tuned files read (and written by `moecert tune`) instead of CONFIG_DIR: a tuning
# kept outside the installed package, or two folders timed against each other
CONFIG_DIR_ENV = "MOECERT_TRITON_CONFIG_DIR"
# what each GEMM's entry holds, and the type of each value
GEMM_FIELDS = {"BLOCK_N": int, "BLOCK_K": int, "num_warps": int, "num_stages": int,
               "SWAP_AB": bool, "FAST_I4": bool, "SPLIT_K": int, "K_UNROLL": int,
               "GROUP_M": int, "FUSED_ACT": bool, "ZERO_SUMS": bool, "TAIL_M": int,
               "ONE_DOT": bool}
# the value of a field a config leaves out (a file may leave out only SPLIT_K, K_UNROLL,
# GROUP_M, FUSED_ACT, ZERO_SUMS, TAIL_M and ONE_DOT, younger than the files); flags absent
# are False but FUSED_ACT and ZERO_SUMS; TAIL_M and ONE_DOT absent are heuristics.default_tail_m's
# and default_one_dot's
FIELD_DEFAULTS = {"SWAP_AB": False, "FAST_I4": False, "SPLIT_K": 1, "K_UNROLL": 1,
                  "GROUP_M": 1, "FUSED_ACT": True, "ZERO_SUMS": True}
OPTIONAL_IN_FILE = ("SPLIT_K", "K_UNROLL", "GROUP_M", "FUSED_ACT", "ZERO_SUMS", "TAIL_M",
                    "ONE_DOT")
# written only where a config sets it (a file's entry, or the tuner's choice): absent, the
# heuristics' tiles and older files read the default
WRITTEN_IF_SET = ("FUSED_ACT", "ZERO_SUMS", "TAIL_M", "ONE_DOT")
SPLIT_K_ENV = "MOECERT_TRITON_SPLIT_K"
NIB_SPAN_ENV = "MOECERT_TRITON_NIB_SPAN"
I4_PAIRS_ENV = "MOECERT_TRITON_I4_PAIRS"
E4M3_WORDS_ENV = "MOECERT_TRITON_E4M3_WORDS"
FP6_PLANES_ENV = "MOECERT_TRITON_FP6_PLANES"
ZERO_SUMS_ENV = "MOECERT_TRITON_ZERO_SUMS"
DEQUANT_ROWS_ENV = "MOECERT_TRITON_DEQUANT_ROWS"
FP4_SCALE_WORDS_ENV = "MOECERT_TRITON_FP4_SCALE_WORDS"
FP4_LEAN_ENV = "MOECERT_TRITON_FP4_LEAN"
FP4_CARRY_ENV = "MOECERT_TRITON_FP4_CARRY"
FP4_SCALE_BF16_ENV = "MOECERT_TRITON_FP4_SCALE_BF16"
FUSED_ACT_ENV = "MOECERT_TRITON_FUSED_ACT"
TAIL_M_ENV = "MOECERT_TRITON_TAIL_M"
ONE_DOT_ENV = "MOECERT_TRITON_ONE_DOT"
TMA_B_ENV = "MOECERT_TRITON_TMA_B"
MIN_TAIL_M = 16  # TAIL_M's least rows: a dot's smallest side


class ConfigFileError(ValueError):
    """A tuned-config file that cannot be used: names the file and the key."""

    def __init__(self, path, key: str, expected: str, got):
        super().__init__(f"tuned config file {path}: {key}: expected {expected}, got {got!r} "
                         "(re-run `moecert tune` or delete the file)")


@dataclass(frozen=True)
class LayerKey:
    weight: str  # kinds.py's name of the weight kind, e.g. "W_INT4"
    act: str  # and of the activation kind, e.g. "A16"
    experts: int
    gemm1: tuple[int, int]  # (N, K)
    gemm2: tuple[int, int]

    def label(self) -> str:
        return (f"{self.weight}/{self.act} E{self.experts} gemm1 {self.gemm1[0]}x"
                f"{self.gemm1[1]} gemm2 {self.gemm2[0]}x{self.gemm2[1]}")


def device_key(name: str) -> str:
    """"NVIDIA H100 80GB HBM3" -> "h100-80gb-hbm3": lower case, vendor dropped, runs of
    anything but letters and digits to one dash."""
    key = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    key = re.sub(r"^(nvidia|amd)-", "", key)
    if not key:
        raise ValueError(f"device name {name!r} has no letters or digits")
    return key


@functools.cache
def current_device_key() -> str | None:
    """This process's CUDA (or ROCm) device 0, None without one. Cached: a process keeps its
    devices, and the launch path must not query the driver per call."""
    import torch

    if not torch.cuda.is_available():
        return None
    return device_key(torch.cuda.get_device_name(0))


def rows_bucket(num_rows: int) -> int:
    """n rounded up to a power of two (1 for n <= 1)."""
    return 1 << max(num_rows - 1, 0).bit_length()


def kind_names(namespace: dict, prefix: str) -> dict[int, str]:
    """{value: name} of a module's kind enum, e.g. kind_names(vars(kinds), "W") reads
    W16, W_INT4, ...: names `<prefix>16` or `<prefix>_<UPPER>` bound to ints."""
    pattern = re.compile(rf"{prefix}(16|_[A-Z0-9_]+)")
    names: dict[int, str] = {}
    for name, value in namespace.items():
        if pattern.fullmatch(name) and type(value) is int:
            if value in names:
                raise ValueError(f"kind value {value} named twice: {names[value]}, {name}")
            names[value] = name
    return names


def complete(config: dict) -> dict:
    """A GEMM config with every field a file holds (absent ones: FIELD_DEFAULTS; those of
    WRITTEN_IF_SET only where `config` has them)."""
    return {"BLOCK_M": config["BLOCK_M"],
            **{f: kind(config[f] if f in config else FIELD_DEFAULTS[f])
               for f, kind in GEMM_FIELDS.items()
               if f in config or f not in WRITTEN_IF_SET}}


def forced_split_k(environ=os.environ) -> int | None:
    """SPLIT_K forced by MOECERT_TRITON_SPLIT_K (a power of two), None when unset or empty.
    Read at every lookup (a dict read): a test or a run may set it after import."""
    raw = environ.get(SPLIT_K_ENV, "").strip()
    if not raw:
        return None
    if not raw.isdigit() or not _is_power_of_two(int(raw)):
        raise ValueError(f"{SPLIT_K_ENV}={raw!r}: expected a power of two (1, 2, 4, 8, ...)")
    return int(raw)


def forced_nib_span(environ=os.environ) -> int | None:
    """The nibble span forced by MOECERT_TRITON_NIB_SPAN on every int4 linear it fits, for
    any activation (0: the checkpoint's order), None when unset or empty: to run the
    conformance suites with nibble planes everywhere, as MOECERT_TRITON_SPLIT_K does."""
    raw = environ.get(NIB_SPAN_ENV, "").strip()
    if not raw:
        return None
    if not raw.isdigit() or (int(raw) and not _is_power_of_two(int(raw))) or raw == "1":
        raise ValueError(f"{NIB_SPAN_ENV}={raw!r}: expected 0 or a power of two >= 2 (128)")
    return int(raw)


def int4_pairs_allowed(environ=os.environ) -> bool:
    """False when MOECERT_TRITON_I4_PAIRS=0 asks for the per-element int4 decode instead of
    the PTX pair decode (fused_moe.int4_pairs_run_on), True when it is 1, unset or empty."""
    raw = environ.get(I4_PAIRS_ENV, "").strip()
    if raw not in ("", "0", "1"):
        raise ValueError(f"{I4_PAIRS_ENV}={raw!r}: expected 0 (the per-element int4 decode) "
                         "or 1 (the pair decode where it runs, the default)")
    return raw != "0"


def e4m3_words_allowed(environ=os.environ) -> bool:
    """False when MOECERT_TRITON_E4M3_WORDS=0 asks for MXFP8's weights as fp8 bytes instead of
    16-bit words (fused_moe.e4m3_words; to time one against the other), True when it is 1,
    unset or empty."""
    raw = environ.get(E4M3_WORDS_ENV, "").strip()
    if raw not in ("", "0", "1"):
        raise ValueError(f"{E4M3_WORDS_ENV}={raw!r}: expected 0 (fp8 bytes) or 1 (16-bit "
                         "words where the conversion runs, the default)")
    return raw != "0"


def fp6_planes_wanted(environ=os.environ) -> bool:
    """Whether MOECERT_TRITON_FP6_PLANES=1 asks for MXFP6's codes in six-bit planes where they
    fit (backend._fp6_planes_fit) instead of the e4m3 bytes the conversion widens them to:
    off by default, since they timed no faster on an H200 (docs/speed.md, round fifteen)."""
    return _switch(FP6_PLANES_ENV, False, "six-bit planes where they fit",
                   " (the e4m3 bytes the conversion widens them to, the default)", environ)


def forced_tail_m(environ=os.environ) -> int | None:
    """The smallest tile an expert's last row block runs on, forced by MOECERT_TRITON_TAIL_M
    on every launch (0: the whole block, as before; a power of two >= 16: heuristics.tail_rows
    fits it to each tile), None when unset or empty (the tile's entry and the heuristics
    decide): to time one against the other on the same entries."""
    raw = environ.get(TAIL_M_ENV, "").strip()
    if not raw:
        return None
    if not raw.isdigit() or (int(raw) and (int(raw) < MIN_TAIL_M
                                          or not _is_power_of_two(int(raw)))):
        raise ValueError(f"{TAIL_M_ENV}={raw!r}: expected 0 (every block on the whole tile) "
                         f"or a power of two >= {MIN_TAIL_M} (the smallest tile an expert's "
                         "last block runs on)")
    return int(raw)


def forced_dequant_rows(environ=os.environ) -> float | None:
    """The rows per expert from which MOECERT_TRITON_DEQUANT_ROWS sends eligible FP4 layers
    to the dequantized prefill path (an integer >= 0; "off": never, as infinity), None when
    unset or empty (heuristics.DEQUANT_ROWS decides)."""
    raw = environ.get(DEQUANT_ROWS_ENV, "").strip()
    if not raw:
        return None
    if raw == "off":
        return float("inf")
    if not raw.isdigit():
        raise ValueError(f"{DEQUANT_ROWS_ENV}={raw!r}: expected rows per expert (an integer "
                         ">= 0) or off")
    return int(raw)


def _switch(name: str, default: bool | None, on: str, off: str, environ) -> bool | None:
    """An on/off switch: 1 on, 0 off, unset or empty `default` (on for the timed FP4 steps,
    off for a candidate not yet timed, None where the caller decides per case); another value
    is a ValueError saying both (`on`, `off`: what each means)."""
    raw = environ.get(name, "").strip()
    if raw not in ("", "0", "1"):
        raise ValueError(f"{name}={raw!r}: expected 1 ({on}{', the default' if default else ''})"
                         f" or 0{off}")
    return default if raw == "" else raw == "1"


def forced_one_dot(environ=os.environ) -> bool | None:
    """ONE_DOT forced on every nibble-plane launch by MOECERT_TRITON_ONE_DOT (1 one dot, 0
    four), None when unset or empty (each entry's own, or heuristics.default_one_dot)."""
    return _switch(ONE_DOT_ENV, None, "a tile's four plane products as one dot",
                   " (four dots, one a plane)", environ)


def forced_tma_b(environ=os.environ) -> bool | None:
    """The weight tile by Hopper's TMA (gemm_kernel's TMA_B) forced by MOECERT_TRITON_TMA_B:
    1 wherever it applies (the interpreter included), 0 nowhere; None when unset or empty
    (fused_moe.tma_b_run's default)."""
    return _switch(TMA_B_ENV, None, "the weight tile by TMA where it applies",
                   " (per-thread loads)", environ)


def zero_sums_allowed(environ=os.environ) -> bool:
    """Whether int4 zero points in nibble planes with 16-bit activations (AWQ) join each
    tile's product through the rows' activation sums (fused_moe.describe_weights): True when
    MOECERT_TRITON_ZERO_SUMS is 1, unset or empty, False when 0 (inside the decode)."""
    return _switch(ZERO_SUMS_ENV, True, "zero points from the activation sums",
                   " (zero points inside the weights' decode)", environ)


def fp4_scale_words(environ=os.environ) -> bool:
    """Whether e2m1 plane scales are stored in 32-bit words (read when a layer is
    processed): True when MOECERT_TRITON_FP4_SCALE_WORDS is 1, unset or empty, False when 0
    (one byte a block)."""
    return _switch(FP4_SCALE_WORDS_ENV, True, "plane scales in 32-bit words",
                       " (one byte a block)", environ)


def fp4_lean(environ=os.environ) -> bool:
    """Whether the lean e2m1 decode step runs (gemm_kernel's LEAN; read when a layer is
    processed): True when MOECERT_TRITON_FP4_LEAN is 1, unset or empty, False when 0."""
    return _switch(FP4_LEAN_ENV, True, "the lean e2m1 decode step", "", environ)


def fp4_carry(environ=os.environ) -> bool:
    """Whether e2m1 words carry their sign into the decode's multiply (layout.carry_bits;
    read when a layer is processed): True when MOECERT_TRITON_FP4_CARRY is 1, unset or
    empty, False when 0."""
    return _switch(FP4_CARRY_ENV, True, "e2m1 words whose sign the multiply carries", "",
                       environ)


def fp4_scale_bf16(environ=os.environ) -> bool | None:
    """Whether e2m1 layers' block scales are stored decoded into bf16 (layout.scale_bf16;
    read when a layer is processed): True when MOECERT_TRITON_FP4_SCALE_BF16 is 1, False
    when 0, None when unset or empty (the default: `scale_bf16_by_default`)."""
    return _switch(FP4_SCALE_BF16_ENV, None, "block scales decoded into bf16 at load",
                   " (the scale bytes, decoded in the K loop); unset: decoded in bf16 "
                   "layers", environ)


FUSED_ACT_ORDERS = ("halves", "adjacent")  # gemm_kernel's PAIR_ADJACENT off / on


def fused_activation(environ=os.environ) -> str | None:
    """How GEMM1's epilogue applies the layer's activation (gemm_kernel's EPI_ACT): the
    order of a tile's gate and up columns, FUSED_ACT_ORDERS[0] (the default) when
    MOECERT_TRITON_FUSED_ACT is 1, unset or empty, or names one; None when 0 (the
    activation kernel after GEMM1)."""
    raw = environ.get(FUSED_ACT_ENV, "").strip()
    if raw in ("", "1"):
        return FUSED_ACT_ORDERS[0]
    if raw == "0":
        return None
    if raw not in FUSED_ACT_ORDERS:
        raise ValueError(f"{FUSED_ACT_ENV}={raw!r}: expected 1 (the activation in GEMM1's "
                         f"epilogue, the default), 0 (the activation kernel after GEMM1) or "
                         f"an order of the tile's gate and up columns: "
                         f"{', '.join(FUSED_ACT_ORDERS)}")
    return raw


def scale_bf16_by_default(bf16: bool) -> bool:
    """The default of `fp4_scale_bf16` (the module docstring: timed per format): on for both
    formats' block scales in bf16 layers, off in fp16 layers (not timed)."""
    return bf16


def config_dir(environ=os.environ) -> Path:
    """The folder of tuned files: MOECERT_TRITON_CONFIG_DIR when set, else the package's."""
    raw = environ.get(CONFIG_DIR_ENV, "").strip()
    if not raw:
        return CONFIG_DIR
    if not Path(raw).is_dir():
        raise ValueError(f"{CONFIG_DIR_ENV}={raw!r}: expected a folder of tuned-config files "
                         "(`moecert tune --out DIR` writes one)")
    return Path(raw)


def path_for(device: str, directory: Path | None = None) -> Path:
    return (directory or config_dir()) / f"{device}.json"


@functools.cache
def current_capability() -> tuple[int, int] | None:
    """Device 0's compute capability, None without CUDA (ROCm reports its own numbers, which
    no file records)."""
    import torch

    if not torch.cuda.is_available() or torch.version.hip is not None:
        return None
    return tuple(torch.cuda.get_device_capability(0))


@functools.cache
def current_shared_memory() -> int | None:
    """Bytes of shared memory one program of device 0 may use (NVIDIA: the opt-in maximum,
    227 KiB on an H100, 99 KiB on an L40S; ROCm: the LDS, 64 KiB on an MI300), None without a
    GPU or where torch does not say (the heuristic tile is then kept as it is)."""
    import torch

    if not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(0)
    smem = (getattr(props, "shared_memory_per_block_optin", 0)
            or getattr(props, "shared_memory_per_block", 0))
    return int(smem) or None


def file_capability(path: Path) -> tuple[int, int] | None:
    """The compute capability a file was tuned on (its "capability"), None when it does not
    say."""
    try:
        cap = json.loads(Path(path).read_text()).get("capability")
    except (OSError, json.JSONDecodeError, AttributeError):
        return None
    return tuple(cap) if isinstance(cap, list) and len(cap) == 2 else None


@functools.cache
def config_devices(device: str, directory: Path,
                   capability: tuple[int, int] | None = None) -> tuple[str, ...]:
    """The files a device reads, in order: its own, then the files of the other devices of
    the same compute capability, the same chip generation, whose tiles fit its
    multiprocessors and shared memory (an H200 reads the H100's for a layer its own file
    lacks: the same SM90 chip with faster memory). A layer none of them has takes the
    heuristics (`pick_config`)."""
    own = (device,) if path_for(device, directory).exists() else ()
    if capability is None:
        return own
    same = sorted(p.stem for p in Path(directory).glob("*.json")
                  if p.stem != device and file_capability(p) == tuple(capability))
    return own + tuple(same)


# --- reading ---------------------------------------------------------------------------------

Table = dict[LayerKey, dict[int, tuple[dict, dict]]]
Spans = dict[LayerKey, dict[str, int]]  # {layer: {linear: nibble span}}


def read_table(path: Path) -> Table:
    """The file's layers: {LayerKey: {bucket: (gemm1 config, gemm2 config)}}, each config a
    full `moe_gemm` config (BLOCK_M included). Every value is checked here, so a bad file fails
    at load with its name and the key, never inside a launch."""
    try:
        data = json.loads(Path(path).read_text())
    except json.JSONDecodeError as e:
        raise ConfigFileError(path, f"line {e.lineno}", "JSON", e.msg) from None
    if not isinstance(data, dict):
        raise ConfigFileError(path, "top level", "an object", type(data).__name__)
    if data.get("format") != FORMAT:
        raise ConfigFileError(path, "format", FORMAT, data.get("format"))
    layers = _field(path, data, "layers", list, "")
    table: Table = {}
    for i, layer in enumerate(layers):
        where = f"layers[{i}]"
        if not isinstance(layer, dict):
            raise ConfigFileError(path, where, "an object", type(layer).__name__)
        key = LayerKey(_field(path, layer, "weight", str, where),
                       _field(path, layer, "act", str, where),
                       _field(path, layer, "experts", int, where),
                       _shape(path, layer, "gemm1", where), _shape(path, layer, "gemm2", where))
        if key in table:
            raise ConfigFileError(path, where, "one entry per layer", f"a second {key.label()}")
        _spans(path, layer, where)
        buckets = _field(path, layer, "buckets", dict, where)
        table[key] = {_bucket(path, b, where): _configs(path, entry, f"{where}.buckets[{b}]")
                      for b, entry in buckets.items()}
    return table


def read_spans(path: Path) -> Spans:
    """The layers' nibble spans ({} for a layer without them); the file as read_table
    checks it."""
    read_table(path)
    spans: Spans = {}
    for layer in json.loads(Path(path).read_text())["layers"]:
        if (found := _spans(path, layer, "")):
            spans[_key(layer)] = found
    return spans


def _key(layer: dict) -> LayerKey:
    return LayerKey(layer["weight"], layer["act"], layer["experts"], tuple(layer["gemm1"]),
                    tuple(layer["gemm2"]))


def _spans(path, layer: dict, where: str) -> dict[str, int]:
    if "nibble_spans" not in layer:
        return {}
    spans = _field(path, layer, "nibble_spans", dict, where)
    for linear, span in spans.items():
        key = f"{where}.nibble_spans.{linear}"
        if linear not in LINEARS:
            raise ConfigFileError(path, key, f"a linear of {', '.join(LINEARS)}", linear)
        if type(span) is not int or (span and not _is_power_of_two(span)) or span == 1:
            raise ConfigFileError(path, key, "0 or a power of two >= 2", span)
    return dict(spans)


def _field(path, obj: dict, name: str, kind: type, where: str):
    key = f"{where}.{name}" if where else name
    if name not in obj:
        raise ConfigFileError(path, key, f"a {kind.__name__}", "nothing (missing)")
    value = obj[name]
    # bool is an int in Python: a true where a tile size belongs is still an error
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ConfigFileError(path, key, f"a {kind.__name__}", value)
    return value


def _shape(path, layer: dict, name: str, where: str) -> tuple[int, int]:
    value = _field(path, layer, name, list, where)
    if len(value) != 2 or not all(type(v) is int and v > 0 for v in value):
        raise ConfigFileError(path, f"{where}.{name}", "[N, K], two positive ints", value)
    return (value[0], value[1])


def _bucket(path, name: str, where: str) -> int:
    if not name.isdigit() or rows_bucket(int(name)) != int(name):
        raise ConfigFileError(path, f"{where}.buckets", "power-of-two row counts as keys", name)
    return int(name)


def _configs(path, entry, where: str) -> tuple[dict, dict]:
    if not isinstance(entry, dict):
        raise ConfigFileError(path, where, "an object", type(entry).__name__)
    block_m = _field(path, entry, "BLOCK_M", int, where)
    _power_of_two(path, f"{where}.BLOCK_M", block_m)
    out = []
    for gemm in ("gemm1", "gemm2"):
        cfg = _field(path, entry, gemm, dict, where)
        extra = set(cfg) - set(GEMM_FIELDS)
        if extra:
            raise ConfigFileError(path, f"{where}.{gemm}", f"only {', '.join(GEMM_FIELDS)}",
                                  ", ".join(sorted(extra)))
        cfg = {**{f: FIELD_DEFAULTS[f] for f in OPTIONAL_IN_FILE if f not in WRITTEN_IF_SET},
               **cfg}
        for name, kind in GEMM_FIELDS.items():
            if name in cfg or name not in WRITTEN_IF_SET:
                _field(path, cfg, name, kind, f"{where}.{gemm}")
        for name in ("BLOCK_N", "BLOCK_K", "num_warps", "SPLIT_K"):
            _power_of_two(path, f"{where}.{gemm}.{name}", cfg[name])
        for name in ("num_stages", "K_UNROLL", "GROUP_M"):
            if cfg[name] < 1:
                raise ConfigFileError(path, f"{where}.{gemm}.{name}", ">= 1", cfg[name])
        tail = cfg.get("TAIL_M", 0)
        if tail and (tail < MIN_TAIL_M or tail not in (block_m // 2, block_m // 4)):
            raise ConfigFileError(path, f"{where}.{gemm}.TAIL_M", f"0, or BLOCK_M / 2 or / 4 "
                                  f"and >= {MIN_TAIL_M} (BLOCK_M {block_m})",
                                  tail)
        out.append({"BLOCK_M": block_m, **cfg})
    return out[0], out[1]


def _power_of_two(path, key: str, value: int) -> None:
    if not _is_power_of_two(value):
        raise ConfigFileError(path, key, "a power of two", value)


def _is_power_of_two(value: int) -> bool:
    return value >= 1 and not value & (value - 1)


@functools.cache
def load_table(device: str, directory: Path) -> Table | None:
    """The device's table in `directory`, None when it has no file; read once per
    process (a malformed file raises at every lookup, never half-used)."""
    path = path_for(device, directory)
    return read_table(path) if path.exists() else None


@functools.cache
def load_spans(device: str, directory: Path) -> Spans:
    path = path_for(device, directory)
    return read_spans(path) if path.exists() else {}


def tuned_spans(key: LayerKey, device: str | None = None,
                directory: Path | None = None) -> dict[str, int]:
    """The layer's nibble span per linear from the file that answers for it (`layer_file`;
    {} without a file, a CUDA device, or spans for the layer)."""
    name = layer_file(key, device, directory)
    if name is None:
        return {}
    return dict(load_spans(name, directory or config_dir()).get(key, {}))


def layer_file(key: LayerKey, device: str | None = None,
               directory: Path | None = None) -> str | None:
    """The first of the device's files (its own, then its generation's) that has the layer:
    the one whose nibble order the layer is stored in."""
    for name in _config_devices(device, directory):
        table = load_table(name, directory or config_dir())
        if table is not None and table.get(key):
            return name
    return None


def _config_devices(device: str | None, directory: Path | None) -> tuple[str, ...]:
    """`config_devices` of `device`, default the current one (only the current device's
    capability is known here: another named device reads its own file or none)."""
    if device is None:
        device = current_device_key()
        if device is None:
            return ()
        return config_devices(device, directory or config_dir(), current_capability())
    return config_devices(device, directory or config_dir())


def _nearest(table: Table, key: LayerKey, num_rows: int, keep=None) -> tuple[int, int] | None:
    """(powers of two between n's bucket and the layer's nearest tuned bucket, that bucket),
    None when the layer was not tuned (or has no bucket that `keep(bucket)` accepts)."""
    buckets = [b for b in table.get(key) or () if keep is None or keep(b)]
    if not buckets:
        return None
    want = rows_bucket(num_rows).bit_length()
    best = min(buckets, key=lambda b: (abs(b.bit_length() - want), b))
    return abs(best.bit_length() - want), best


def lookup(table: Table, key: LayerKey, num_rows: int, max_steps: int | None = None,
           keep=None) -> tuple[dict, dict] | None:
    """The layer's configs for n rows: the tuned bucket nearest to n's on the log scale among
    those `keep(bucket)` accepts (default all); None when the layer was not tuned, or when
    `max_steps` is given and the nearest bucket is more than that many powers of two from
    n's. Copies: callers may keep or change them."""
    found = _nearest(table, key, num_rows, keep)
    if found is None or (max_steps is not None and found[0] > max_steps):
        return None
    c1, c2 = table[key][found[1]]
    return dict(c1), dict(c2)


def nearest_in_layer_file(key: LayerKey, num_rows: int, device: str | None = None,
                          directory: Path | None = None, max_steps: int | None = None,
                          keep=None) -> tuple[tuple[int, int], tuple[dict, dict]] | None:
    """((powers of two between n's bucket and the nearest tuned one, that bucket), copies of
    its configs) from the file of the layer's nibble order (`layer_file`), which answers at
    every size (heuristics.TUNED_AT_EVERY_SIZE); None when no file has the layer, or no
    bucket that `keep` accepts within `max_steps` (as lookup). The first item orders two
    answers as lookups do: the nearer bucket, the smaller on a tie."""
    name = layer_file(key, device, directory)
    if name is None:
        return None
    table = load_table(name, directory or config_dir())
    chosen = lookup(table, key, num_rows, max_steps, keep)
    return None if chosen is None else (_nearest(table, key, num_rows, keep), chosen)


def tuned_configs(key: LayerKey, num_rows: int, device: str | None = None,
                  directory: Path | None = None, max_steps: int | None = None, keep=None
                  ) -> tuple[dict, dict] | None:
    """Configs for this device (default: the current one) from its files, None without a
    file, a CUDA device, or an entry for the layer (within `max_steps`, see lookup). Of the
    files that have the layer, the one whose bucket is nearest n's wins, the device's own on
    a tie: an H200 file tuned at decode sizes leaves M = 256 to the H100's bucket there,
    not to its own M = 64 one."""
    best = None
    for name in _config_devices(device, directory):
        table = load_table(name, directory or config_dir())
        found = None if table is None else _nearest(table, key, num_rows, keep)
        if found is not None and (best is None or found[0] < best[0]):
            best = (found[0], table)
    if best is None:
        return None
    return lookup(best[1], key, num_rows, max_steps, keep)


# --- writing ---------------------------------------------------------------------------------

def table_json(device: str, device_name: str, versions: dict, table: Table,
               timings: dict | None = None, spans: Spans | None = None,
               capability: tuple[int, int] | None = None) -> str:
    """The file's text for `table`; `timings` {(LayerKey, bucket): {"default": us, "tuned":
    us}} is recorded beside each entry (read by people, ignored by lookups)."""
    timings = timings or {}
    layers = []
    for key in sorted(table, key=lambda k: (k.weight, k.act, k.experts, k.gemm1, k.gemm2)):
        buckets = {}
        for bucket in sorted(table[key]):
            c1, c2 = table[key][bucket]
            if c1["BLOCK_M"] != c2["BLOCK_M"]:
                raise ValueError(f"{key.label()} n={bucket}: BLOCK_M {c1['BLOCK_M']} != "
                                 f"{c2['BLOCK_M']}: both GEMMs share the row alignment")
            entry = {"BLOCK_M": c1["BLOCK_M"],
                     **{g: {f: v for f, v in complete(c).items() if f != "BLOCK_M"}
                        for g, c in (("gemm1", c1), ("gemm2", c2))}}
            if (key, bucket) in timings:
                entry["us"] = timings[key, bucket]
            buckets[str(bucket)] = entry
        layer = {"weight": key.weight, "act": key.act, "experts": key.experts,
                 "gemm1": list(key.gemm1), "gemm2": list(key.gemm2)}
        if (spans or {}).get(key):
            layer["nibble_spans"] = dict(spans[key])
        layers.append({**layer, "buckets": buckets})
    head = {"format": FORMAT, "device": device, "device_name": device_name}
    if capability is not None:  # lets a GPU of the same generation without a file read it
        head["capability"] = list(capability)
    return json.dumps({**head, "versions": versions, "layers": layers}, indent=1) + "\n"


def recorded_timings(path: Path) -> dict:
    """The timings a file records beside its entries, {(LayerKey, bucket): {...}}, so that
    writing other layers keeps them (read_table has checked everything else)."""
    out = {}
    for layer in json.loads(Path(path).read_text())["layers"]:
        key = _key(layer)
        for bucket, entry in layer["buckets"].items():
            if isinstance(entry.get("us"), dict):
                out[key, int(bucket)] = entry["us"]
    return out


def write_table(path: Path, device: str, device_name: str, versions: dict, table: Table,
                timings: dict | None = None, spans: Spans | None = None,
                capability: tuple[int, int] | None = None) -> None:
    """Write, then read back through the same checks as a lookup (a file this writes must
    load); entries of other layers already in the file are kept, with their recorded
    timings and nibble spans."""
    path = Path(path)
    merged: Table = dict(read_table(path)) if path.exists() else {}
    kept_timings = recorded_timings(path) if path.exists() else {}
    kept_spans = read_spans(path) if path.exists() else {}
    for key, buckets in table.items():
        merged[key] = {**merged.get(key, {}), **buckets}
    path.parent.mkdir(parents=True, exist_ok=True)
    capability = capability or (file_capability(path) if path.exists() else None)
    path.write_text(table_json(device, device_name, versions, merged,
                               {**kept_timings, **(timings or {})},
                               {**kept_spans, **(spans or {})}, capability))
    read_table(path)
    load_table.cache_clear()
    load_spans.cache_clear()
    config_devices.cache_clear()
