"""The grouped MoE GEMM's launcher: a linear's kernel description (`describe_weights`, built
once per layer) and the launch of gemm_kernel's `moe_gemm_kernel` with a config
(heuristics.py), split-K's two launches included. The kernel's contract (rows, weight kinds,
scales, activations, epilogue order) is gemm_kernel's docstring."""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from . import configs, gemm_kernel
from .heuristics import (
    default_one_dot,
    e4m3_scaled_runs,
    tail_rows,
    weights_block_k,
    weights_split_plan,
)
from .kinds import (
    A16,
    A_FP8,
    A_INT8,
    DOT_IEEE,
    DOT_NATIVE,
    DOT_TF32,
    FULL,
    I4_MAGIC,
    I4_OFF,
    I4_PAIRS,
    INTERPRET,
    MX_COLS,
    PARTIAL,
    REDUCE,
    S_E4M3,
    S_E8M0,
    S_E8M0_W,
    S_FLOAT,
    S_NONE,
    W16,
    W_FP4,
    W_FP8,
    W_INT4,
    W_INT8,
    W_MXFP8,
)
from .layout import FP6_SPAN, nib_span_fits
from .quant import ACTIVATIONS, GATE_UP_HALVES, RELU2, SWIGLU_ALPHA, SWIGLU_LIMIT, fix_bf16

_COMPUTE = {torch.bfloat16: tl.bfloat16, torch.float16: tl.float16}


def dot_mode(kind: int, weight_dtype: torch.dtype, compute: torch.dtype, has_g_idx: bool,
             interpret: bool = INTERPRET) -> int:
    """How the kernel multiplies tiles so that every product stays exact.
    The interpreter's bf16 dot is broken, and act-order tiles hold dequantized fp32 weights:
    fp32 FMA. 16-bit weights of the other 16-bit dtype than the activations (fp16 weights,
    bf16 compute): tf32, which holds both exactly; casting the weights to the compute dtype
    would round them (bf16 keeps 8 of fp16's 11 significant bits, fp16 lacks bf16's range).
    Everything else (integer codes, e4m3 values, same-dtype weights) is exact in the
    compute dtype: the native dot."""
    if interpret or has_g_idx:
        return DOT_IEEE
    if kind == W16 and weight_dtype != compute:
        return DOT_TF32
    return DOT_NATIVE


def describe_weights(kind: int, q: torch.Tensor, compute: torch.dtype, *, s=None, zp=None,
                     g_idx=None, bias=None, scale_rows: int = 1, scale_cols: int | None = None,
                     sym_zero: int = 0, scale_kind: int = S_FLOAT, gscale=None,
                     nib_span: int = 0, carry: bool = False, scale_fold: int = 0,
                     zero_sums: bool = False, fp6_exp: int = 0) -> dict:
    """A linear's kernel description, built once per layer: the weight-side launch
    arguments (placeholders for absent tensors are never read: constexpr-disabled).
    `scale_kind` says how `s` is stored (S_FLOAT, S_E8M0, S_E4M3 as uint8 bytes); with act
    order the scales are applied per column inside the tile, not to the partial sum.
    `gscale` fp32 [E, G]: global multipliers of G equal row blocks (w13 shards).
    q is [E, N, stored K], or tiled as `tile_weights` stores it ([E, N / rows, stored K /
    cols, rows, cols]); `s` may be any strided view. `nib_span`: int4 codes in planes by
    `plane_nibbles` over spans of that many columns (0: adjacent columns share a byte).
    A 4-D `s` holds e2m1 plane scales in words (`layout.scale_words`; nib_span FP4_SPAN).
    `carry`: e2m1 plane words in the sign-carrying order (`layout.carry_bits`; bf16 only).
    A 4-D bf16 `s` holds them decoded at load (`layout.scale_bf16`), times 2^`scale_fold`:
    NVFP4's fold where LEAN folds (bf16), else 0; checked against LEAN here, since the
    kernel reads the stored values as folded exactly when LEAN folds.
    `zero_sums` (the layer's activations 16-bit): int4 zero points in planes may join each
    tile's product through the rows' activation sums, read from scale words that carry them
    ("zero_words": `zero_point_words`, None where they cannot), where a launch's config asks
    (`zero_sums_run`).
    `fp6_exp`: W_MXFP8 weights held as fp6 codes of that many exponent bits in six-bit
    planes (`layout.plane_fp6`: q uint8 [E, N, 3K / 4]), decoded times their E8M0 scales
    [E, N, K / 32] (bf16; every byte in `gemm_kernel.e8m0_words_range`, which the layer
    checked when it stored them: `fp6_planes_fit`)."""
    assert not carry or (kind == W_FP4 and nib_span and compute == torch.bfloat16)
    assert q.is_contiguous() and q.dim() in (3, 5)
    wt_n, wt_k = q.shape[3:] if q.dim() == 5 else (0, 0)
    n_rows = q.shape[1] * q.shape[3] if q.dim() == 5 else q.shape[1]
    scale_bf16 = s is not None and s.dim() == 4 and s.dtype == torch.bfloat16
    assert scale_kind != S_E4M3 or (kind == W_FP4 and (s.dtype == torch.uint8 or scale_bf16)
                                    and scale_cols % 2 == 0)
    dummy = q
    assert s is None or s.dim() < 4 or (kind == W_FP4 and nib_span and (
        s.dtype == torch.uint8 or scale_bf16))
    lean = kind == W_FP4 and bool(nib_span) and configs.fp4_lean()
    if scale_bf16:
        _check_scale_fold(scale_kind, compute, lean, scale_fold)
    wscale = S_NONE if s is None or g_idx is not None else scale_kind
    words = None
    if (zero_sums and kind == W_INT4 and zp is not None and nib_span and g_idx is None
            and s is not None):
        words = zero_point_words(s, zp)
    k = 2 * (q.shape[2] * q.shape[4] if q.dim() == 5 else q.shape[2])
    if fp6_exp:
        assert (kind == W_MXFP8 and scale_kind == S_E8M0 and scale_cols == MX_COLS
                and compute == torch.bfloat16 and q.dim() == 3 and q.dtype == torch.uint8
                and s.dtype == torch.uint8 and s.is_contiguous()
                and s.shape[2] * MX_COLS * 3 // 4 == q.shape[2]
                and q.shape[2] % (FP6_SPAN * 3 // 4) == 0), "six-bit planes' layout"
        nib_span = FP6_SPAN  # BLOCK_K, and the activation tile read in quarters
    elif nib_span and not nib_span_fits(kind, k, scale_cols, g_idx is not None, nib_span,
                                      scale_kind):
        raise ValueError(f"nibble planes over {nib_span} columns: needs int4 or e2m1 codes, "
                         f"K a multiple of it and the scale block of each plane, no act order")
    return {
        "kind": kind, "q": q, "N": n_rows, "compute": compute,
        "e8m0_fold": (kind == W_FP4 and wscale == S_E8M0 and bool(nib_span)
                      and compute == torch.bfloat16 and e8m0_folds(s)),
        # every E8M0 byte a normal scale (gemm_kernel's E8M0_NORMAL), read once per layer
        "e8m0_normal": wscale == S_E8M0 and e8m0_normal(s),
        # MXFP8's words decoded times their scales where that is exact (E4M3_SCALED_WORDS;
        # the kernel indexes those scales by MX_COLS, the MX block every W_MXFP8 layer has)
        "e4m3_scaled": (kind == W_MXFP8 and not fp6_exp and wscale == S_E8M0
                        and scale_cols == MX_COLS and compute == torch.bfloat16
                        and e4m3_cvt_runs_on(q.device)
                        and e8m0_words(s) and e4m3_finite(q)),
        "scale_cols": scale_cols,  # None: no scale, or one per row (the whole K)
        "dot": dot_mode(kind, q.dtype, compute, g_idx is not None),
        "args": (q, s if s is not None else dummy, zp if zp is not None else dummy,
                 g_idx if g_idx is not None else dummy, bias if bias is not None else dummy,
                 gscale if gscale is not None else dummy),
        "strides": (q.stride(0), q.stride(1),
                    s.stride(0) if s is not None else 0, s.stride(1) if s is not None else 0,
                    s.stride(2) if s is not None and s.dim() > 2 else 1,
                    zp.stride(0) if zp is not None else 0, zp.stride(1) if zp is not None else 0,
                    g_idx.stride(0) if g_idx is not None else 0,
                    bias.stride(0) if bias is not None else 0,
                    gscale.stride(0) if gscale is not None else 0),
        "scale_rows": scale_rows,
        "gscale_rows": n_rows // gscale.shape[1] if gscale is not None else 1,
        "constexprs": {"WEIGHT": kind, "WSCALE": wscale, "HAS_ZERO": zp is not None,
                       "SYM_ZERO": sym_zero,
                       "HAS_G_IDX": g_idx is not None, "HAS_BIAS": bias is not None,
                       "HAS_WGSCALE": gscale is not None, "WT_N": wt_n, "WT_K": wt_k,
                       "NIB_SPAN": nib_span,
                       # issue 44's fifteenth: fp6 codes in six-bit planes (layout.plane_fp6)
                       "FP6_EXP": fp6_exp,
                       # e2m1 plane scales in words (layout.scale_words): [E, N, K / span, 4]
                       "SCALE_WORDS": s is not None and s.dim() == 4 and not scale_bf16,
                       # issue 44's lean e2m1 decode step (configs.fp4_lean)
                       "LEAN": lean,
                       # issue 44's third: sign-carrying words (layout.carry_bits)
                       "CARRY": carry,
                       # issue 44's fourth: the scales decoded into bf16 at load
                       "SCALE_BF16": scale_bf16,
                       "COMPUTE": _COMPUTE[compute]},
        "scale_fold": scale_fold if scale_bf16 else 0,
        # issue 44's thirteenth: scale words that carry the zero points, in the scales'
        # strides (`zero_sums_run`)
        "zero_words": words,
    }


def lean_scale_fold(scale_kind: int, compute: torch.dtype, lean: bool) -> int:
    """The power of two `layout.scale_bf16` multiplies a linear's stored bf16 scales by: the
    LEAN fold (gemm_kernel.SCALE_FOLD) for NVFP4 in bf16 with LEAN on, else 0."""
    folds = lean and scale_kind == S_E4M3 and compute == torch.bfloat16
    return gemm_kernel.SCALE_FOLD if folds else 0


def _check_scale_fold(scale_kind: int, compute: torch.dtype, lean: bool, fold: int) -> None:
    """The stored bf16 scales' fold must be the one this launch's LEAN reads them with."""
    if fold != lean_scale_fold(scale_kind, compute, lean):
        raise ValueError(f"bf16 scales stored times 2^{fold}, but LEAN is "
                         f"{'on' if lean else 'off'} now ({configs.FP4_LEAN_ENV}): process "
                         "the layer again after changing it")


@functools.cache
def int4_pairs_run_on(device: torch.device) -> bool:
    """Whether `_int4_pairs`' PTX runs here: compiled CUDA on sm80+ (packed bf16 fma), unless
    MOECERT_TRITON_I4_PAIRS=0 asks for the per-element decode (to time one against the
    other: docs/speed.md)."""
    if INTERPRET or device.type != "cuda" or torch.version.hip is not None:
        return False
    if not configs.int4_pairs_allowed():
        return False
    return torch.cuda.get_device_capability(device) >= (8, 0)


def fp6_planes_run_on(device: torch.device) -> bool:
    """Whether six-bit fp6 planes decode here: the interpreter (integer arithmetic), or
    compiled CUDA on sm80+ (`_fp6_planes_asm`'s packed bf16 fma)."""
    if INTERPRET:
        return device.type == "cpu"
    return (device.type == "cuda" and torch.version.hip is None
            and torch.cuda.get_device_capability(device) >= (8, 0))


def int4_planes_decode(weights: dict, act: int, device: torch.device) -> bool:
    """Whether int4 codes in nibble planes decode by the PTX (`_int4_planes`, with zero
    points `_int4_planes_zero`) under a tile that asks for it (FAST_I4)."""
    c16 = weights["constexprs"]
    return (weights["kind"] == W_INT4 and bool(c16["NIB_SPAN"]) and not c16["HAS_G_IDX"]
            and act in (A16, A_INT8) and weights["dot"] == DOT_NATIVE
            and int4_pairs_run_on(device))


def int8_codes_dtype(weights: dict, device: torch.device) -> torch.dtype:
    """The dtype W4A8's int8 activation codes reach the GEMM in: the compute dtype where the
    planes' PTX decode multiplies them there (`_planes_part`), so no 8-bit tensor reaches
    the dot (Triton then gives both operands the 8-bit layout, kWidth 4, and gathers the
    activation fragments by register moves: docs/speed.md, round twelve); int8 otherwise.
    The codes are integers in [-128, 127], exact in bf16 and fp16."""
    if int4_planes_decode(weights, A_INT8, device):
        return weights["compute"]
    return torch.int8


@functools.cache
def e4m3_cvt_runs_on(device: torch.device) -> bool:
    """Whether the hardware e4m3 -> f16 conversion compiles here: CUDA sm89+."""
    return (not INTERPRET and device.type == "cuda" and torch.version.hip is None
            and torch.cuda.get_device_capability(device) >= (8, 9))


def e4m3_words(weights: dict, act: int, acc_dot: bool, device: torch.device) -> int:
    """gemm_kernel's E4M3_WORDS: MXFP8 weights (MXFP6's too, held as e4m3) with 16-bit
    activations read as 16-bit words of two columns (CUDA sm89+), so no 8-bit tensor reaches
    the 16-bit dot: in bf16 decoded from their bit fields times their scales where that is
    exact (every byte of the layer finite, every E8M0 byte in E8M0_WORDS_MIN..MAX:
    E4M3_SCALED_WORDS, heuristics.e4m3_scaled_runs; a tile then spans any number of scale
    blocks), else converted by the hardware and scaled per tile of one scale block
    (E4M3_CVT_WORDS, `_e4m3_words`); MOECERT_TRITON_E4M3_WORDS=0 keeps the fp8 bytes
    (E4M3_BYTES)."""
    allowed = configs.e4m3_words_allowed()  # (a bad value is refused on any layer)
    if weights["constexprs"]["FP6_EXP"]:  # six-bit planes: no e4m3 words to read
        return gemm_kernel.E4M3_BYTES
    if not (allowed and weights["kind"] == W_MXFP8 and act == A16
            and weights["dot"] == DOT_NATIVE and not acc_dot and e4m3_cvt_runs_on(device)):
        return gemm_kernel.E4M3_BYTES
    if e4m3_scaled_runs(weights, act):
        return gemm_kernel.E4M3_SCALED_WORDS
    return gemm_kernel.E4M3_CVT_WORDS


def e4m3_finite(q: torch.Tensor) -> bool:
    """Whether no byte of the float8_e4m3fn weights `q` is NaN (0x7F, 0xFF: e4m3fn has no
    infinity), so gemm_kernel may build their bf16 values from the bit fields
    (E4M3_SCALED_WORDS). Two reductions, no temporary the weights' size: 0x7F is the int8
    view's largest byte, 0xFF the uint8 view's. Read once per layer, when its plan is
    built; False inside a CUDA-graph capture (the read waits for the device) and where `q`
    holds no bytes."""
    if q.element_size() != 1 or q.numel() == 0:
        return False
    if q.is_cuda and torch.cuda.is_current_stream_capturing():
        return False
    return (int(q.view(torch.int8).amax()) < 0x7F
            and int(q.view(torch.uint8).amax()) < 0xFF)


def zero_sums_run(weights: dict, act: int, config: dict) -> bool:
    """gemm_kernel's ZERO_SUMS for a launch: the layer's scale words carry its zero points
    (describe_weights' "zero_words"), 16-bit activations, and the config's ZERO_SUMS (absent:
    configs.FIELD_DEFAULTS)."""
    return (weights.get("zero_words") is not None and act == A16
            and bool(config.get("ZERO_SUMS", configs.FIELD_DEFAULTS["ZERO_SUMS"])))


def launch_wscale(weights: dict, act: int) -> int:
    """The weight scales' constexpr WSCALE as a launch passes it: S_E8M0_W where MXFP4's E8M0
    scales fold into bf16 values (describe_weights' "e8m0_fold", 16-bit activations, no tf32
    dot), else the layer's own."""
    if weights.get("e8m0_fold") and act == A16 and weights["dot"] != DOT_TF32:
        return S_E8M0_W
    return weights["constexprs"]["WSCALE"]


def one_dot_applies(weights: dict, act: int) -> bool:
    """Whether gemm_kernel's ONE_DOT can change a launch: int4 or e2m1 weights in nibble
    planes, but not MXFP4's unfolded E8M0 scales (each half of the tile takes its own scale
    after its dot)."""
    return (weights["kind"] in (W_INT4, W_FP4) and bool(weights["constexprs"]["NIB_SPAN"])
            and not (weights["kind"] == W_FP4 and launch_wscale(weights, act) == S_E8M0))


def one_dot_run(weights: dict, act: int, config: dict) -> bool:
    """gemm_kernel's ONE_DOT for a launch: where it applies (`one_dot_applies`),
    MOECERT_TRITON_ONE_DOT (configs.forced_one_dot), else the config's ONE_DOT, else
    heuristics.default_one_dot."""
    if not one_dot_applies(weights, act):
        return False
    forced = configs.forced_one_dot()
    if forced is not None:
        return forced
    return bool(config.get("ONE_DOT", default_one_dot(weights, act, config)))


def one_dot_rounds(weights: dict, act: int) -> bool:
    """Whether a launch's ONE_DOT rounds the weights to the compute dtype: int4 planes with
    16-bit activations, whose scale (and zero point) then join the decode (gemm_kernel's
    `_planes_part`: (q - zero) * s rounded once, as Marlin's decode does)."""
    return one_dot_applies(weights, act) and weights["kind"] == W_INT4 and act == A16


def zero_point_words(s: torch.Tensor, zp: torch.Tensor) -> torch.Tensor | None:
    """gemm_kernel's ZERO_SUMS scale words: int32 [E, N, groups], the fp32 scale's bits with
    the zero point (0..15) in their 4 low mantissa bits, which a scale read from a 16-bit
    checkpoint tensor (AWQ's fp16, a bf16 one) leaves zero, so the kernel reads both with
    one load and masks the scale back exactly. None where that does not hold (fp32 scales
    of their own, a zero point past 15, shapes that differ) or cannot be read: inside a
    CUDA-graph capture (read once per layer, when its plan is built)."""
    if (s.dtype != torch.float32 or zp.shape != s.shape or zp.dtype != torch.uint8
            or s.numel() == 0 or (s.is_cuda and torch.cuda.is_current_stream_capturing())):
        return None
    bits = s.view(torch.int32)
    if int((bits & 0xF).amax()) != 0 or int(zp.amax()) > 0xF:
        return None
    words = torch.empty_like(bits)  # the scales' strides: a launch reads either alike
    torch.bitwise_or(bits, zp.to(torch.int32), out=words)
    return words


def activation_sums(a: torch.Tensor, block_k: int) -> torch.Tensor:
    """fp32 [rows, K / block_k]: each row's sum of its activations over each tile's columns
    (ZERO_SUMS' a_sum; K a whole number of tiles, as nibble planes have it)."""
    rows, K = a.shape
    assert K % block_k == 0, (K, block_k)
    return a.view(rows, K // block_k, block_k).sum(-1, dtype=torch.float32)


# The E8M0 bytes whose scale 2^(b - 127) times every e2m1 value (0.5 <= |v| <= 6, or 0) is a
# normal, finite bf16, so the product is exact and no subnormal or flush-to-zero question
# arises on any device: 0.5 * 2^(2 - 127) = 2^-126 is bf16's smallest normal; 6 * 2^125 =
# 1.5 * 2^127 is below its largest, 1.99 * 2^127, where 6 * 2^126 is not. Real checkpoints'
# scales lie far inside; a layer with any byte outside keeps the per-pair fp32 scales.
E8M0_FOLD_MIN, E8M0_FOLD_MAX = 2, 252


def _e8m0_bytes_within(s: torch.Tensor | None, lo: int, hi: int, dtypes) -> bool:
    """Whether every E8M0 byte of `s` lies in lo..hi: `s` of one of `dtypes`, as uint8 bytes
    or decoded into bf16 (`layout.scale_bf16`: byte b is bf16's exponent field there, the
    bit patterns b << 7, 0: 0x0040, 255: 0x7FC0, in the bytes' order). Read once per layer,
    when its plan is built; never inside a CUDA-graph capture (the read waits for the
    device): False then, as for an empty or absent `s`."""
    if s is None or s.dtype not in dtypes or s.numel() == 0:
        return False
    if s.is_cuda and torch.cuda.is_current_stream_capturing():
        return False
    if s.dtype == torch.bfloat16:
        s_lo, s_hi = torch.aminmax(s.view(torch.int16))
        return lo << 7 <= int(s_lo) and int(s_hi) <= hi << 7
    s_lo, s_hi = torch.aminmax(s)
    return lo <= int(s_lo) and int(s_hi) <= hi


def e8m0_folds(s: torch.Tensor) -> bool:
    """Whether every E8M0 scale byte of `s` (bytes or bf16) can be multiplied into bf16 e2m1
    values exactly (E8M0_FOLD_MIN to E8M0_FOLD_MAX; 255, NaN, cannot); no fold when this
    cannot be read (`_e8m0_bytes_within`)."""
    return _e8m0_bytes_within(s, E8M0_FOLD_MIN, E8M0_FOLD_MAX, (torch.uint8, torch.bfloat16))


# The E8M0 bytes whose scale 2^(b - 127) is a normal fp32: its bits are b << 23. Byte 0
# (2^-127, a subnormal) and 255 (NaN) are not; a quantizer writes 0 for an all-zero block.
E8M0_NORMAL_MIN, E8M0_NORMAL_MAX = 1, 254


def e8m0_normal(s: torch.Tensor | None) -> bool:
    """Whether every E8M0 byte of `s` (uint8) lies in E8M0_NORMAL_MIN..E8M0_NORMAL_MAX, so
    the kernel may read a scale from its exponent field alone (gemm_kernel's E8M0_NORMAL);
    False where this cannot be read (`_e8m0_bytes_within`): the full decode."""
    return _e8m0_bytes_within(s, E8M0_NORMAL_MIN, E8M0_NORMAL_MAX, (torch.uint8,))


def e8m0_words(s: torch.Tensor | None, element: str = "e4m3") -> bool:
    """Whether every E8M0 byte of `s` (uint8) lies in `gemm_kernel.e8m0_words_range` of the
    weights' element, so a bf16 decode may multiply them by their scale exactly (MXFP8's
    E4M3_SCALED_WORDS: e4m3, E8M0_WORDS_MIN..MAX; fp6's six-bit planes); False where this
    cannot be read (`_e8m0_bytes_within`)."""
    return _e8m0_bytes_within(s, *gemm_kernel.e8m0_words_range(element), (torch.uint8,))


def scale_cols_constexpr(scale_cols: int, K: int) -> int:
    """gemm_kernel's SCALE_COLS: the scale block's width where it is a power of two narrower
    than K (group 32 / 64 / 128, MX 32, NVFP4 16), so the kernel divides by a constant (a
    shift); 0 (a runtime value) otherwise, per channel included, so K never becomes a
    compile-time constant of its own."""
    return scale_cols if 0 < scale_cols < K and scale_cols & (scale_cols - 1) == 0 else 0


def acc_dot_applies(weights: dict, act: int, K: int) -> bool:
    """Whether the kernel's tiles have no scale of their own, so the dot accumulates
    (gemm_kernel's ACC_DOT): 16-bit weights, or fp8 / int8 weights whose scale has one
    column (per channel or per tensor), with 16-bit activations (fp8 weights also with fp8
    activations, whose row scale the epilogue applies anyway); no act order."""
    c = weights["constexprs"]
    if c["HAS_G_IDX"] or c["HAS_ZERO"] or c["NIB_SPAN"]:
        return False
    kind = weights["kind"]
    if not ((act == A16 and kind in (W16, W_FP8, W_INT8)) or (act == A_FP8 and kind == W_FP8)):
        return False
    cols = weights["scale_cols"]
    return c["WSCALE"] == S_NONE or (c["WSCALE"] == S_FLOAT and (cols is None or cols >= K))


# gemm_kernel's TMA_B where it applies on an sm90+ GPU and MOECERT_TRITON_TMA_B is unset
TMA_B_BY_DEFAULT = True
TMA_BOX = 256  # a TMA copy's largest extent along any dimension


@functools.cache
def tma_runs_on(device: torch.device) -> bool:
    """Whether Hopper's tensor memory accelerator compiles here: CUDA sm90+."""
    return (not INTERPRET and device.type == "cuda" and torch.version.hip is None
            and torch.cuda.get_device_capability(device) >= (9, 0))


def tma_b_run(weights: dict, config: dict, bk: int, activation: str | None, pairs: str,
              device: torch.device) -> int:
    """gemm_kernel's TMA_B for a launch: the number of row runs in a weight tile (2: a fused
    activation's gate / up halves, 1: rows as stored) where the weight tile may come by TMA,
    else 0. It may where the tile's rows are blocks of the weights (not the adjacent order
    of gate and up columns), the weights one element a column (16-bit, fp8 or int8: no
    nibbles, no act order), [E, N, K] untiled, K's stride 1 and the others 16-byte
    multiples, each run of the block within a copy's extent, not SWAP_AB; and where it runs:
    sm90+ (the interpreter too when forced), on unless MOECERT_TRITON_TMA_B=0
    (TMA_B_BY_DEFAULT)."""
    forced = configs.forced_tma_b()
    if not (forced if forced is not None else TMA_B_BY_DEFAULT):
        return 0
    if not (tma_runs_on(device) or (INTERPRET and forced)):
        return 0
    q = weights["q"]
    runs = 1
    if activation in GATE_UP_HALVES:  # the tile's gate rows, then the same up rows; the
        # adjacent order alternates them, no block of the weights
        runs = 2 if pairs == "halves" else 0
    block_n = config["BLOCK_N"]
    c = weights["constexprs"]
    fits = (runs and weights["kind"] in (W16, W_FP8, W_INT8) and not c["HAS_G_IDX"]
            and not config.get("SWAP_AB", False) and q.dim() == 3 and q.stride(2) == 1
            and all(s * q.element_size() % 16 == 0 for s in q.stride()[:2])
            and q.data_ptr() % 16 == 0
            and q.shape[1] % runs == 0 and block_n // runs <= TMA_BOX and bk <= TMA_BOX
            and bk * q.element_size() >= 16)
    return runs if fits else 0


def tma_weights(q: torch.Tensor, runs: int, block_n: int, bk: int) -> TensorDescriptor:
    """The weights' descriptor for TMA_B = runs: q [E, N, K] viewed [E, runs, N / runs, K],
    blocks [1, runs, block_n / runs, bk] (gemm_kernel's docstring)."""
    E, N, K = q.shape
    return TensorDescriptor.from_tensor(q.view(E, runs, N // runs, K),
                                        [1, runs, block_n // runs, bk])


def scale_runs(weights: dict, block_n: int, activation: str | None, pairs: str) -> bool:
    """gemm_kernel's SCALE_RUNS: a fused activation on w13's halves, in the `halves` order,
    whose tile halves each lie in one block of weight-scale rows (N a multiple of the tile,
    the scale block a multiple of half of it): the kernel then reads each half's scale row
    from its first row, which Triton's analysis sees is one value over the run."""
    rows = weights["scale_rows"]
    return (activation in GATE_UP_HALVES and pairs == "halves"
            and weights["N"] % block_n == 0 and rows > 1 and rows % (block_n // 2) == 0)


def moe_gemm(a: torch.Tensor, a_scale, a_gscale, weights: dict, c: torch.Tensor,
             sorted_ids: torch.Tensor, block_expert: torch.Tensor, num_padded: torch.Tensor,
             router: torch.Tensor | None, *, a_row_div: int, act: int, config: dict,
             activation: str | None = None, pairs: str = "halves") -> None:
    """Launch the grouped GEMM for `weights` (describe_weights); c [num_rows, N] receives
    every listed row. With SPLIT_K > 1 (and K long enough to split): the PARTIAL launch into
    an fp32 workspace, then the REDUCE launch into c. `activation` (a name of
    quant.ACTIVATIONS; GEMM1): c receives act(h) instead, [num_rows, N / 2] for a gated one
    (gemm_kernel's EPI_ACT), its gate and up columns in a tile in the order `pairs`
    (configs.FUSED_ACT_ORDERS)."""
    N = weights["N"]
    K = a.shape[1]
    num_rows = c.shape[0]
    epi_act = -1 if activation is None else ACTIVATIONS[activation]
    gated = activation is not None and ACTIVATIONS[activation] != RELU2.value
    # shapes come from the layer's own conversion; these guard the launch
    assert c.shape[1] == (N // 2 if gated else N) and c.is_contiguous() and a.is_contiguous()
    assert not gated or (N % 2 == 0 and router is None)
    block_m = config["BLOCK_M"]
    assert sorted_ids.numel() % block_m == 0
    scale_cols = weights["scale_cols"] or K
    bk = weights_block_k(weights, config["BLOCK_K"], K, act)
    unroll = config.get("K_UNROLL", 1)
    splits, k_split = weights_split_plan(weights, config, K, act)
    c16 = weights["constexprs"]
    fast_i4 = (config.get("FAST_I4", False) and weights["kind"] == W_INT4 and act == A16
               and weights["dot"] == DOT_NATIVE and not c16["HAS_ZERO"]
               and not c16["HAS_G_IDX"])
    fast_i4 = (I4_OFF if not fast_i4 else I4_PAIRS if int4_pairs_run_on(c.device)
               else I4_MAGIC)
    if config.get("FAST_I4", False) and int4_planes_decode(weights, act, c.device):
        # planes (zero points: `_int4_planes_zero`); W4A8's int8 codes join the decoded
        # weights in a 16-bit dot (`_planes_part`)
        fast_i4 = I4_PAIRS
    if act == A_INT8:  # the codes in the dtype this launch multiplies them in: the planes'
        # PTX decode (int8_codes_dtype's case, taken where the tile asks for FAST_I4), else int8
        codes = weights["compute"] if fast_i4 == I4_PAIRS else torch.int8
        if a.dtype != codes:
            a = a.to(codes)  # exact: integers in [-128, 127]
    if weights["kind"] == W_FP4 and c16["NIB_SPAN"]:  # e2m1 planes: PTX decode or bit fields
        fast_i4 = (I4_PAIRS if act == A16 and weights["dot"] == DOT_NATIVE
                   and int4_pairs_run_on(c.device) else I4_OFF)
    acc_dot = acc_dot_applies(weights, act, K)
    args = weights["args"]
    sums = zero_sums_run(weights, act, config)
    one_dot = one_dot_run(weights, act, config)
    if sums:  # the sums in the activation-scale slot (16-bit activations leave it free),
        # the scale words in the scales' slot (scale words are int4 planes with 16-bit
        # activations, so under ONE_DOT the decode takes the zero points from them, scaled:
        # `one_dot_rounds`, no sums)
        assert a_scale is None and weights["zero_words"].stride() == args[1].stride()
        if not one_dot:
            a_scale = activation_sums(a, bk)
        args = (args[0], weights["zero_words"], *args[2:])
    constexprs = weights["constexprs"]
    # the CARRY candidate's NVFP4 scales by the hardware e4m3 conversion (sm89+)
    e4m3_cvt = (constexprs["CARRY"] and constexprs["WSCALE"] == S_E4M3
                and fast_i4 == I4_PAIRS and e4m3_cvt_runs_on(c.device))
    constexprs = {**constexprs, "WSCALE": launch_wscale(weights, act)}
    tma_b = tma_b_run(weights, config, bk, activation, pairs, c.device)
    if tma_b:
        args = (tma_weights(args[0], tma_b, config["BLOCK_N"], bk), *args[1:])
    grid = (sorted_ids.numel() // block_m, triton.cdiv(N, config["BLOCK_N"]))
    # the workspace is never read with one split: c stands in for it (with split-K it holds
    # h's N columns, a fused activation's paired ones included)
    ws = c if splits == 1 else torch.empty(splits, num_rows, N, dtype=torch.float32,
                                           device=c.device)

    def launch(grid, phase):
        gemm_kernel.moe_gemm_kernel[grid](
            a, a_scale if a_scale is not None else a, a_gscale if a_gscale is not None else a,
            *args,
            c, sorted_ids, block_expert, num_padded, router if router is not None else c, ws,
            N, K, num_rows, weights["scale_rows"], scale_cols, weights["gscale_rows"],
            splits, k_split,
            a.stride(0), a_scale.stride(0) if (a_scale is not None and a_scale.dim() == 2)
            else 1, *weights["strides"], c.stride(0), num_rows * N,
            PHASE=phase,
            A_ROW_DIV=a_row_div, ACT=act, HAS_GSCALE=a_gscale is not None,
            MUL_ROUTER=router is not None, DOT=weights["dot"], FIX_BF16=fix_bf16(c.dtype),
            EVEN_K=K % (bk * unroll) == 0 and (splits == 1 or k_split % (bk * unroll) == 0),
            EVEN_N=N % config["BLOCK_N"] == 0,
            SWAP_AB=config.get("SWAP_AB", False), FAST_I4=fast_i4, K_UNROLL=unroll,
            ACC_DOT=acc_dot, GROUP_M=config.get("GROUP_M", 1), E4M3_CVT=e4m3_cvt,
            BLOCK_M=block_m, BLOCK_N=config["BLOCK_N"], BLOCK_K=bk,
            EPI_ACT=epi_act, ALPHA=SWIGLU_ALPHA, LIMIT=SWIGLU_LIMIT,
            PAIR_ADJACENT=pairs == "adjacent",
            SCALE_RUNS=scale_runs(weights, config["BLOCK_N"], activation, pairs),
            SCALE_COLS=scale_cols_constexpr(scale_cols, K),
            E8M0_NORMAL=weights["e8m0_normal"] and constexprs["WSCALE"] == S_E8M0,
            E4M3_WORDS=e4m3_words(weights, act, acc_dot, c.device), ZERO_SUMS=sums,
            TAIL_M=tail_rows(config), ONE_DOT=one_dot, TMA_B=tma_b,
            num_warps=config["num_warps"], num_stages=config["num_stages"],
            **constexprs,
        )

    if splits == 1:
        launch(grid, FULL)
    else:
        launch((*grid, splits), PARTIAL)
        launch(grid, REDUCE)
