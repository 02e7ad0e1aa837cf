"""The grouped MoE GEMM: one Triton kernel for every weight format.

    c[row] = epilogue( sum_k a[row // A_ROW_DIV, k] * W[expert(row), n, k] )

Rows are assignments (token, expert) listed by `align.align_assignments`: `sorted_ids` holds
assignment ids grouped by expert, each expert's segment padded to BLOCK_M with the sentinel
`num_rows`, and `block_expert[b]` names the expert of block b. GEMM1 reads token rows
(A_ROW_DIV = topk), GEMM2 reads the intermediate's assignment rows (A_ROW_DIV = 1).

Weights (per expert a linear [N out, K in], K contiguous):
  W16      bf16/fp16 values
  W_INT4   uint8 [E, N, ceil(K/2)], column 2j in the low nibble; W = (u - z) * s
  W_UINT8  uint8 [E, N, K] unsigned codes;                      W = (u - z) * s
  W_INT8   int8  [E, N, K];                                      W = w * s
  W_FP8    float8_e4m3fn [E, N, K];                              W = w * s
  W_MXFP8  float8_e4m3fn [E, N, K], uint8 E8M0 scales [E, N, K/32]; or (FP6_EXP, the element's
           exponent bits) fp6 codes in six-bit planes, uint8 [E, N, 3K/4] (`layout.plane_fp6`:
           per 128 columns 32 16-bit words of four planes' low magnitude bits, then 16 words of
           their top bits and signs, a byte per word: words i and i + 16), decoded times their
           E8M0 scales (`_fp6_planes_part`; NIB_SPAN = 128 the tile's width, a plane one MX
           block)
  W_FP4    uint8 [E, N, K/2] FP4 E2M1 codes, column 2j in the low nibble (decoded by bit
           arithmetic); its scales are a separate choice (WSCALE): E8M0 per 32 for MXFP4,
           e4m3 per 16 for NVFP4
Any of these may come tiled (`tile_weights`, constexprs WT_N x WT_K: [E, N / WT_N, stored
K / WT_K, WT_N, WT_K], each tile one run of memory; the Triton backend stores int4 codes so,
INT4_TILE): the same values at other addresses. W_INT4 codes may also come in four planes of
NIB_SPAN / 4 columns per NIB_SPAN columns (`plane_nibbles`, constexpr NIB_SPAN, which then is
BLOCK_K), read as 16-bit words: each plane is one quarter of the tile.
Scales s [E, R, C] apply to block (scale_rows, scale_cols): s[e, n // rows, k // cols], stored
as WSCALE says: S_FLOAT (fp32 values) or S_E8M0 (bytes 2^(b - 127)); S_NONE: none, or applied
per column inside the tile (act order). Unless act order permutes the columns, a K tile never
spans two scale columns (the host picks BLOCK_K so), and the dot runs on exact small integers,
e4m3 or e2m1 values: the scale multiplies the tile's fp32 partial sum, so the only rounding is
fp32 accumulation.
S_E4M3 (NVFP4: e4m3 bytes per 16 columns, FP4 weights only) is applied inside the tile
instead: a 16-column block is 8 columns per nibble plane, narrower than a dot's K >= 16, so
each e2m1 value is multiplied by its block scale before the dot. The product is exact in
fp32 and in both 16-bit operand dtypes: e2m1 has 2 significant bits and e4m3 at most 4, so
it has at most 6 (bf16 holds 8, fp16 11), and its magnitude lies in [2^-10, 448 * 6]
(e4m3's smallest subnormal 2^-9 times 0.5), inside fp16's normal range [2^-14, 65504].
An optional global multiplier per expert and output-row shard (NVFP4's fp32 scale_2,
w13: w1 rows then w3 rows, the kernel format's row halves) multiplies the fp32 accumulator in
the epilogue: a float64 factor of no exact fold into the e4m3 scales.
Activations: A16 (bf16/fp16), A_INT8 (int8 codes, fp32 scale per row, times an optional
global factor), A_MX (e4m3 values held in bf16/fp16, E8M0 byte per row and 32 columns),
A_FP8 (float8_e4m3fn codes viewed as uint8, fp32 scale per row), A_FP8_G (the same codes,
fp32 scale per row and 128 columns, DeepSeek's 1x128 groups: applied per K tile like a block scale).
A16 with a global factor: NVFP4 activations as e2m1 * e4m3 block scale values (exact in
bf16/fp16, see S_E4M3), the global 1 / g multiplying the accumulator.
With fp8 weights and fp8 activations the tile product is an fp8 x fp8 dot (fp32
accumulation) on the GPU; the interpreter multiplies the same values in fp32.

ACC_DOT (host-chosen constexpr): tiles with no scale of their own (16-bit weights; fp8 or
int8 weights whose scale has one column, the whole K) accumulate inside the dot,
acc = dot(a, b, acc), with no product tile beside the accumulator; such a weight scale then
multiplies the whole sum once, first in the epilogue (the same products, the scale's fp32
rounding once instead of per tile).
GROUP_M (config, > 1): programs run GROUP_M row blocks at a time over every column block
(the launch order remapped), so that at prefill sizes a wave reads few row blocks' activations.
TAIL_M (host-chosen, `heuristics.tail_rows`; 0 none): an expert's last row block runs its
MMAs on the smallest of BLOCK_M, BLOCK_M / 2 and BLOCK_M / 4 rows (down to TAIL_M) that holds
its rows, not on the padding (`_tile` is the tile at any row count; the kernel picks one).
ONE_DOT (host-chosen, `fused_moe.one_dot_run`; nibble planes, not MXFP4's unfolded E8M0
halves): a tile's four plane products as one dot over its whole K (`_cat4`), the activations
one load, instead of four dots of K / 4. Where the tile accumulates in the dot (FP4 planes
scaled inside the decode), Triton on sm90 then keeps the MMAs asynchronous across K steps
(wgmma waits with 3 pending) where the four dots each waited for the last: FP4 prefill
1.21-1.37x (heuristics.default_one_dot; docs/speed.md, round seventeen). Int4 planes with
16-bit activations take their scale (and zero point) into the decode under ONE_DOT, as
Marlin does: each weight (q - zero) * s rounded once to the compute dtype, s rounded to it
first (the tolerance table's error model (2); round eighteen), so that the tile accumulates
in its dot too; scaled after its dot, one dot had waited as four do and ran slower. W4A8's
int8 codes keep their scales after the dot.
SCALE_COLS (host-chosen, `fused_moe.scale_cols_constexpr`): scale_cols as a compile-time
constant where it is a power of two narrower than K, so the K loop's scale-column index is a
shift. E8M0_NORMAL (host-chosen, `fused_moe.e8m0_normal`): every E8M0 weight-scale byte of
the layer lies in 1..254, so a scale is its exponent field (`_weight_e8m0`). E4M3_WORDS
(host-chosen, `fused_moe.e4m3_words`): MXFP8 weights with 16-bit activations load as 16-bit
words of two columns and convert by the hardware (`_e4m3_words`), so no 8-bit tensor reaches
the bf16 dot; E4M3_SCALED_WORDS (bf16, a layer of finite bytes, every E8M0 byte in
E8M0_WORDS_MIN..MAX): decoded from their bit fields times their scale instead, so that a
tile needs no scale of its own and spans any number of scale blocks (`_e4m3_scaled_part`;
the host's BLOCK_K: heuristics.weights_block_k).
TMA_B (host-chosen, `fused_moe.tma_b_runs`; 0 none): b_ptr is a tensor descriptor of the
weights (Hopper's TMA, sm90+) and each K step's weight tile is one asynchronous bulk copy
instead of per-thread loads; only the weight tile (the activation rows are gathered per
row). The descriptor views [E, N, K] as [E, TMA_B, N / TMA_B, K] with blocks [1, TMA_B,
BLOCK_N / TMA_B, BLOCK_K]: TMA_B = 2 where the tile holds gate rows and the same up rows
(EPI_ACT on halves), so one copy brings both runs, 1 otherwise. Rows or columns past the
expert's matrix arrive as zeros (the copy's bounds are the expert's own), where the
pointer tile clamps them: finite either way, dropped at the store or times zero
activations. Weights of one element a column (16-bit, fp8, int8), not SWAP_AB: the same
tile, so the same products summed in the same order.

Epilogue order (the reference's): per-row activation scale (or the global factor), the
weights' global multiplier, + bias, * router weight, store
(the store rounds to c's dtype: bf16/fp16 for GEMM1's h, fp32 for GEMM2's y).
EPI_ACT (GEMM1 only, quant.ACTIVATIONS' code; -1 none): the layer's activation fused into
the epilogue. The tile's columns pair gate row j with up row j (w13 in halves: j and
N/2 + j, the tile's first half gate rows and its second the same up rows, or with
PAIR_ADJACENT gate and up columns alternating; gpt-oss's interleaved rows: as stored),
h is rounded to c's dtype as the unfused
store would, and `quant.act_values` of each pair is stored: c [rows, N / 2] (relu2: N),
the activation kernel's bits without h's round trip through memory. Split-K's workspace
holds the paired columns (a permutation of [0, N)); REDUCE runs the same epilogue.
SCALE_RUNS (host-chosen, `fused_moe.scale_runs`): each half of such a tile lies in one block
of weight-scale rows, whose row the kernel reads from the half's first row.

Split-K (config SPLIT_K > 1, for grids too small to fill the GPU): the kernel runs twice.
PARTIAL: program (row block, column block, split s) sums its K range, in the same tile order
as a whole-K program, and stores the fp32 tile in a workspace [splits, rows, N]; split s
covers columns [s * K_SPLIT, min((s + 1) * K_SPLIT, K)), K_SPLIT a multiple of BLOCK_K and of
every scale block narrower than K (`split_plan`), so each tile is one of the whole-K kernel's
tiles with the same scales; the last split takes the rest. REDUCE: program (row block, column
block) adds the splits in order 0, 1, ... and runs the epilogue above, the one code path
both modes share. No atomics: the sum order is fixed, so runs are bit-identical; against
SPLIT_K = 1 only the association of the fp32 sum differs. FULL (SPLIT_K = 1) is the
one-launch kernel, unchanged.

K_UNROLL (config, >= 1): that many BLOCK_K tiles per K-loop step, each with its own loads,
product and scales, added in the same order: the same bits as one tile per step, with half
(or less) of the loop's per-step costs (its waits and barriers: int4 g128 at DeepSeek-V3
GEMM1 went from 63 to 73-76% of the memory floor on an H100, docs/speed.md "Change 4"). A
step's tile at or past its range's end (K, or the split's end) loads zero activations and
clamped weight rows: it adds an exact zero.
"""

from __future__ import annotations

import triton
import triton.language as tl
from moecert.reference.schemes import ACT_GROUP as SCHEME_ACT_GROUP
from moecert.reference.schemes import ELEMENTS

from .kinds import (
    A16,
    A_FP8,
    A_FP8_G,
    A_INT8,
    A_MX,
    DOT_IEEE,
    DOT_TF32,
    I4_PAIRS,
    MX_COLS,
    PARTIAL,
    REDUCE,
    S_E4M3,
    S_E8M0,
    S_E8M0_W,
    S_FLOAT,
    W16,
    W_FP4,
    W_FP8,
    W_INT4,
    W_MXFP8,
    W_UINT8,
)
from .layout import CARRY_EEM, CARRY_SIGN, fp6_top_sign
from .quant import ACTIVATIONS, GATE_UP_HALVES, RELU2, act_values, rne_bf16

# the same values as constexpr globals, the only globals a jit function may read
_W16, _W_INT4, _W_UINT8 = tl.constexpr(W16), tl.constexpr(W_INT4), tl.constexpr(W_UINT8)
_W_FP8, _W_MXFP8, _W_FP4 = tl.constexpr(W_FP8), tl.constexpr(W_MXFP8), tl.constexpr(W_FP4)
_S_FLOAT, _S_E8M0, _S_E4M3 = tl.constexpr(S_FLOAT), tl.constexpr(S_E8M0), tl.constexpr(S_E4M3)
_S_E8M0_W = tl.constexpr(S_E8M0_W)
_A16, _A_INT8, _A_MX = tl.constexpr(A16), tl.constexpr(A_INT8), tl.constexpr(A_MX)
_A_FP8, _A_FP8_G = tl.constexpr(A_FP8), tl.constexpr(A_FP8_G)
_DOT_TF32, _DOT_IEEE = tl.constexpr(DOT_TF32), tl.constexpr(DOT_IEEE)
_I4_PAIRS = tl.constexpr(I4_PAIRS)
_PARTIAL, _REDUCE = tl.constexpr(PARTIAL), tl.constexpr(REDUCE)
_HALF_ACT0, _HALF_ACT1, _HALF_ACT2 = (tl.constexpr(ACTIVATIONS[a]) for a in GATE_UP_HALVES)
ACT_GROUP = tl.constexpr(SCHEME_ACT_GROUP)  # columns per A_FP8_G activation scale


@triton.jit
def _decode_e8m0(byte):
    """2^(byte - 127) as fp32 from the bit pattern; 0 -> 2^-127 (subnormal), 255 -> NaN."""
    b = byte.to(tl.int32)
    v = (b << 23).to(tl.float32, bitcast=True)
    v = tl.where(b == 0, tl.full(b.shape, 0x00400000, tl.int32).to(tl.float32, bitcast=True), v)
    nan = tl.full(b.shape, 0x7FC00000, tl.int32).to(tl.float32, bitcast=True)
    return tl.where(b == 255, nan, v)


@triton.jit
def _weight_e8m0(byte, E8M0_NORMAL: tl.constexpr):
    """A weight's E8M0 scale as fp32: with E8M0_NORMAL (the host found every byte of the
    layer in 1..254, `fused_moe.e8m0_normal`) the exponent field alone, which is exact there;
    else `_decode_e8m0` (0 and 255 need a compare and select each: four of the six
    instructions a scale took in MXFP8's K step, docs/speed.md, round eleven)."""
    if E8M0_NORMAL:
        return (byte.to(tl.int32) << 23).to(tl.float32, bitcast=True)
    return _decode_e8m0(byte)


@triton.jit
def _decode_e4m3(byte):
    """float8_e4m3fn bytes -> fp32 from the bit fields (no fp8 conversion needed, so sm80 and
    ROCm without OCP fp8 decode it too): exponent bits 6-3 (bias 7), mantissa bits 2-0;
    exponent 0 is the subnormal m * 2^-9; S.1111.111 is NaN. The sign goes in as a bit: a
    select of -v compiled for an H200 gave +0 for the byte 0x80 (-0; tools/i44_prefill_diag.py,
    2026-11-30: 3232 weights of the NVFP4 prefill test, only in a zero's sign)."""
    b = byte.to(tl.int32)
    e = (b >> 3) & 15
    m = b & 7
    v = (((e + 120) << 23) | (m << 20)).to(tl.float32, bitcast=True)
    v = tl.where(e == 0, m.to(tl.float32) * 0.001953125, v)
    v = (v.to(tl.int32, bitcast=True) | ((b & 0x80) << 24)).to(tl.float32, bitcast=True)
    nan = tl.full(b.shape, 0x7FC00000, tl.int32).to(tl.float32, bitcast=True)
    return tl.where((b & 0x7F) == 0x7F, nan, v)


@triton.jit
def _decode_e2m1(nib):
    """FP4 E2M1 codes [0, 15] (int32) -> fp32 from the bit fields: exponent e = bits 2-1
    (bias 1) and mantissa m = bit 0 give 2^(e-1) * (1 + m/2), or m/2 when e = 0; bit 3 is
    the sign. Built as an fp32 bit pattern: exponent field e - 1 + 127, mantissa bit 22."""
    e = (nib >> 1) & 3
    m = nib & 1
    normal = ((e + 126) << 23) | (m << 22)
    bits = tl.where(e == 0, m * 0x3F000000, normal)  # 0x3F000000 is 0.5
    bits = bits | ((nib & 8) << 28)
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _dequant(codes, cols, k0, g_row, s_rows, z_rows, scale_cols, stride_sk,
             HAS_G_IDX: tl.constexpr,
             HAS_ZERO: tl.constexpr, SYM_ZERO: tl.constexpr):
    """Integer codes [BK, BN] -> codes - zero (exact small integers), or with act order the
    dequantized fp32 weights (the group changes from column to column)."""
    if HAS_G_IDX:
        g = tl.load(g_row + cols)
        s = tl.load(s_rows[None, :] + g[:, None] * stride_sk)
        if HAS_ZERO:
            codes = codes - tl.load(z_rows[None, :] + g[:, None]).to(tl.int32)
        else:
            codes = codes - SYM_ZERO
        return codes.to(tl.float32) * s
    elif HAS_ZERO:
        return codes - tl.load(z_rows + k0 // scale_cols).to(tl.int32)[None, :]
    else:
        return codes - SYM_ZERO


@triton.jit
def _int4_magic(nib, SYM_ZERO: tl.constexpr, COMPUTE: tl.constexpr):
    """Nibbles [0, 15] (int32) -> nib - SYM_ZERO in the compute dtype without an int-to-float
    conversion: the nibble ORed into the mantissa of 128 (bf16) or 1024 (fp16) spells
    magic + nib exactly, and subtracting magic + SYM_ZERO is exact (small integers)."""
    if COMPUTE == tl.bfloat16:
        v = (nib | 0x4300).to(tl.int16).to(tl.bfloat16, bitcast=True)
        return v - (128.0 + SYM_ZERO)
    else:
        v = (nib | 0x6400).to(tl.int16).to(tl.float16, bitcast=True)
        return v - (1024.0 + SYM_ZERO)


def _int4_asm(regs: str, decode: str, magic: int, one: int, offset: int | str, fma: str,
              scale: str = "") -> str:
    """PTX for one 16-bit dtype that decodes nibbles into $0-$3 (`decode`; its `{lop}` is a
    lop3's operands that OR the nibbles at bits 0-3 and 16-19 into the mantissa of a packed
    pair of the magic number, spelling magic + nibble exactly) and subtracts magic + 8 from
    each by one packed fma: the magic number (the exponent that makes the mantissa's low
    bits an integer), 1.0 and -(magic + 8), each as a packed pair. `scale` (an operand):
    then each times that packed scale pair plus -0, one rounding of the exact product to the
    compute dtype (ONE_DOT's int4 planes, `_int4_planes_scaled`)."""
    lop = f"0x000F000F, 0x{magic:04X}{magic:04X}, 0xEA"
    fmas = "".join(f"\n            {fma} ${i}, ${i}, one, off;" for i in range(4))
    if scale:
        fmas += "".join(f"\n            {fma} ${i}, ${i}, {scale}, negz;" for i in range(4))
        regs += ", negz"
    return (f"{{\n            .reg .b32 {regs}, one, off;"
            + ("\n            mov.b32 negz, 0x80008000;" if scale else "")
            + f"\n            mov.b32 one, 0x{one:04X}{one:04X};"
            + (f"\n            mov.b32 off, 0x{offset:04X}{offset:04X};"
               if isinstance(offset, int) else f"\n            mov.b32 off, {offset};")
            + decode.format(lop=lop) + fmas + "\n            }")


# `_int4_pairs`: bytes 0 and 1 spread into the halves of one register, 2 and 3 of another
_PAIRS_DECODE = """
            prmt.b32 t0, $4, 0, 0x4140;
            prmt.b32 t1, $4, 0, 0x4342;
            lop3.b32 $0, t0, {lop};
            lop3.b32 $1, t1, {lop};
            shr.u32 u0, t0, 4;
            shr.u32 u1, t1, 4;
            lop3.b32 $2, u0, {lop};
            lop3.b32 $3, u1, {lop};"""
# `_int4_planes`: two 16-bit words already in the halves, nibble p at bits 4p and 16 + 4p
_PLANES_DECODE = """
            lop3.b32 $0, $4, {lop};
            shr.u32 t, $4, 4;
            lop3.b32 $1, t, {lop};
            shr.u32 t, $4, 8;
            lop3.b32 $2, t, {lop};
            shr.u32 t, $4, 12;
            lop3.b32 $3, t, {lop};"""
# bf16: magic 128 (0x4300), offset -136; fp16: magic 1024 (0x6400), offset -1032
_BF16_MAGIC = (0x4300, 0x3F80, 0xC308, "fma.rn.bf16x2")
_FP16_MAGIC = (0x6400, 0x3C00, 0xE408, "fma.rn.f16x2")
_I4_PAIRS_BF16 = tl.constexpr(_int4_asm("t<2>, u<2>", _PAIRS_DECODE, *_BF16_MAGIC))
_I4_PAIRS_FP16 = tl.constexpr(_int4_asm("t<2>, u<2>", _PAIRS_DECODE, *_FP16_MAGIC))
_I4_PLANES_BF16 = tl.constexpr(_int4_asm("t", _PLANES_DECODE, *_BF16_MAGIC))
_I4_PLANES_FP16 = tl.constexpr(_int4_asm("t", _PLANES_DECODE, *_FP16_MAGIC))
# with zero points (AWQ): the packed offset -(magic + zero) of the weight row is operand $5
_I4_PLANES_Z_BF16 = tl.constexpr(_int4_asm("t", _PLANES_DECODE, *_BF16_MAGIC[:2], "$5",
                                           _BF16_MAGIC[3]))
_I4_PLANES_Z_FP16 = tl.constexpr(_int4_asm("t", _PLANES_DECODE, *_FP16_MAGIC[:2], "$5",
                                           _FP16_MAGIC[3]))
# ONE_DOT's int4 planes: the scale pair of the weight row is operand $5 (symmetric) or $6
# (after the zero points' offset)
_I4_PLANES_S_BF16 = tl.constexpr(_int4_asm("t", _PLANES_DECODE, *_BF16_MAGIC, scale="$5"))
_I4_PLANES_S_FP16 = tl.constexpr(_int4_asm("t", _PLANES_DECODE, *_FP16_MAGIC, scale="$5"))
_I4_PLANES_ZS_BF16 = tl.constexpr(_int4_asm("t", _PLANES_DECODE, *_BF16_MAGIC[:2], "$5",
                                            _BF16_MAGIC[3], scale="$6"))
_I4_PLANES_ZS_FP16 = tl.constexpr(_int4_asm("t", _PLANES_DECODE, *_FP16_MAGIC[:2], "$5",
                                            _FP16_MAGIC[3], scale="$6"))


def _fp4_asm(mag_mask: int, mag_shift: int, mul: int, fma: str, scaled: bool,
             folded: bool = False) -> str:
    """PTX that decodes the four e2m1 planes of two 16-bit words (`plane_nibbles`, nibble p
    at bits 4p and 16 + 4p of $4) into $0-$3, two values of the compute dtype each. Per
    plane: the magnitude bits EEM shifted onto the lowest exponent bits and the top mantissa
    bit and masked (`mag_mask`): that bit pattern is the e2m1 magnitude times 2^-126 (bf16)
    or 2^-14 (fp16), subnormal for e = 0 as e2m1 is; one packed fma by `mul` (2^126 or 2^14)
    makes it the magnitude, exactly (a power of two), times plane p's scale pair $(5 + p)
    when `scaled`
    (NVFP4's e4m3 block scale: the product has <= 6 significant bits, exact); the sign bit
    is XORed in last (the value is sign-magnitude, so XOR with the sign negates it, also
    after a negative scale). 5-6 instructions per two values. `folded` (with `scaled`): no
    multiply by `mul`, the scale operands carry it (`_fp4_planes_folded`): 4-5."""
    lines = []
    for p in range(4):
        shift = mag_shift - 4 * p  # nibble p's EEM at bits 4p..4p+2 -> the magnitude field
        op = f"shl.b32 t, $4, {shift};" if shift > 0 else f"shr.u32 t, $4, {-shift};"
        lines.append(op if shift else "mov.b32 t, $4;")
        lines.append(f"and.b32 t, t, 0x{mag_mask:08X};")
        if not folded:
            lines.append(f"{fma} t, t, mul, negz;")
        if scaled:  # plane p's scales in operand 5 + p
            lines.append(f"{fma} t, t, ${5 + p}, negz;")
        sign = 12 - 4 * p  # nibble p's sign bit 4p + 3 -> bit 15 (and 31)
        lines.append(f"shl.b32 u, $4, {sign};" if sign else "mov.b32 u, $4;")
        lines.append(f"lop3.b32 ${p}, u, 0x80008000, t, 0x6A;")  # (u & sign) ^ t
    body = "".join(f"\n            {line}" for line in lines)
    return (f"{{\n            .reg .b32 t, u, mul, negz;"
            f"\n            mov.b32 mul, 0x{mul:04X}{mul:04X};"
            f"\n            mov.b32 negz, 0x80008000;{body}\n            }}")


# bf16: EEM to bits 8-6 (exponent bits 1-0, mantissa bit 6), times 2^126 (0x7E80);
# fp16: EEM to bits 11-9, times 2^14 (0x7400)
_FP4_BF16 = (0x01C001C0, 6, 0x7E80, "fma.rn.bf16x2")
_FP4_FP16 = (0x0E000E00, 9, 0x7400, "fma.rn.f16x2")
_FP4_PLANES_BF16 = tl.constexpr(_fp4_asm(*_FP4_BF16, scaled=False))
_FP4_PLANES_FP16 = tl.constexpr(_fp4_asm(*_FP4_FP16, scaled=False))
_FP4_PLANES_S_BF16 = tl.constexpr(_fp4_asm(*_FP4_BF16, scaled=True))
_FP4_PLANES_S_FP16 = tl.constexpr(_fp4_asm(*_FP4_FP16, scaled=True))
_FP4_PLANES_F_BF16 = tl.constexpr(_fp4_asm(*_FP4_BF16, scaled=True, folded=True))
# LEAN (issue 44's second decode candidate), NVFP4 in bf16: the e2m1 bit pattern is the value
# times 2^-126 (`_fp4_asm`); multiplied straight by the block scale times 2^(126 - LEAN_SHIFT)
# it is the weight times 2^-LEAN_SHIFT, one packed multiply per pair instead of two. Exact:
# the scale operand s * 2^119 <= 448 * 2^119 < 2^128 fits bf16, and the product, at least
# 0.5 * 2^-9 * 2^-7 = 2^-17, is a normal bf16 of <= 6 significant bits; the epilogue
# multiplies the fp32 sum by 2^LEAN_SHIFT (exact, as every sum of the products is scaled by
# the same power of two while it stays inside fp32's normal range).
LEAN_SHIFT = 7
LEAN_FOLD = tl.constexpr(2.0 ** (126 - LEAN_SHIFT))  # into the scale operands
LEAN_UNDO = tl.constexpr(2.0 ** -LEAN_SHIFT)  # the weights' factor, undone in the epilogue
LEAN_REDO = tl.constexpr(2.0 ** LEAN_SHIFT)
# SCALE_BF16 stores NVFP4's scales times the fold where LEAN folds (layout.scale_bf16): the
# bit-field decode's fp32 path takes it back off (exact, a power of two)
SCALE_FOLD = 126 - LEAN_SHIFT
SCALE_UNFOLD = tl.constexpr(2.0 ** -SCALE_FOLD)


def _fp4_carry_asm(scaled: bool, folded: bool = False) -> str:
    """`_fp4_asm` in bf16 for words in the carried order (layout.carry_bits: plane p's EEM
    from bit CARRY_EEM[p], its sign at CARRY_SIGN[p]): one shift puts EEM on bits 6-8 and,
    where the sign is 9 bits above it, the sign on bit 15; one mask keeps both (a sign-
    magnitude bf16 pattern, the value times 2^-126), so the multiplies carry the sign and no
    fix-up follows. A plane whose sign lies elsewhere takes the nibble order's fix-up (its
    sign shifted to bit 15, XORed in last by a lop3). The same values as `_fp4_asm` on the
    words before `carry_bits`, bit for bit: a product's magnitude does not depend on the
    signs, and IEEE multiplication gives sign(a) XOR sign(b), also for zeros (x * s + -0
    keeps the product's sign: -0 + -0 is -0 and +0 + -0 is +0 when rounding to nearest)."""
    lines = []
    for p, (eem, sign) in enumerate(zip(CARRY_EEM, CARRY_SIGN, strict=True)):
        shift = 6 - eem  # EEM from bit eem to bits 6-8
        carried = sign == eem + 9 and shift >= 0  # the same shift puts the sign on bit 15
        mask = 0x01C001C0 | (0x80008000 if carried else 0)
        if shift:
            lines.append(f"shl.b32 t, $4, {shift};" if shift > 0 else
                         f"shr.u32 t, $4, {-shift};")
            lines.append(f"and.b32 t, t, 0x{mask:08X};")
        else:
            lines.append(f"and.b32 t, $4, 0x{mask:08X};")
        muls = ([] if folded else ["mul"]) + ([f"${5 + p}"] if scaled else [])
        assert muls, "a block multiplies at least once"
        for i, m in enumerate(muls):
            last = i == len(muls) - 1
            lines.append(f"fma.rn.bf16x2 {f'${p}' if last and carried else 't'}, t, {m}, negz;")
        if not carried:
            up = 15 - sign  # the sign to bit 15 (and 31)
            lines.append(f"shl.b32 u, $4, {up};" if up else "mov.b32 u, $4;")
            lines.append(f"lop3.b32 ${p}, u, 0x80008000, t, 0x6A;")  # (u & sign) ^ t
    body = "".join(f"\n            {line}" for line in lines)
    return ("{\n            .reg .b32 t, u, mul, negz;"
            "\n            mov.b32 mul, 0x7E807E80;"
            f"\n            mov.b32 negz, 0x80008000;{body}\n            }}")


_FP4_CARRY = tl.constexpr(_fp4_carry_asm(scaled=False))
_FP4_CARRY_S = tl.constexpr(_fp4_carry_asm(scaled=True))
_FP4_CARRY_F = tl.constexpr(_fp4_carry_asm(scaled=True, folded=True))
# plane p's bit positions in the carried order, as constexprs for `_nibble`
_CE0, _CE1, _CE2, _CE3 = (tl.constexpr(b) for b in CARRY_EEM)
_CS0, _CS1, _CS2, _CS3 = (tl.constexpr(b) for b in CARRY_SIGN)


@triton.jit
def _nibble(raw, P: tl.constexpr, EEM: tl.constexpr, SIGN: tl.constexpr,
            CARRY: tl.constexpr):
    """Plane P's e2m1 code [0, 15] of each word (int32): nibble P, or with CARRY its bits
    gathered from EEM and SIGN (layout.carry_bits) for the bit-field decode."""
    if CARRY:
        return ((raw >> EEM) & 7) | (((raw >> SIGN) & 1) << 3)
    else:
        return (raw >> (4 * P)) & 0xF


@triton.jit
def _fp4_carry(words, s0, s1, s2, s3, FOLDED: tl.constexpr):
    """`_fp4_planes_scaled` in bf16 (FOLDED: `_fp4_planes_folded`) on carried words."""
    if FOLDED:
        return tl.inline_asm_elementwise(
            asm=_FP4_CARRY_F, constraints="=r,=r,=r,=r,r,r,r,r,r",
            args=[words, s0, s1, s2, s3],
            dtype=(tl.bfloat16, tl.bfloat16, tl.bfloat16, tl.bfloat16), is_pure=True, pack=2)
    else:
        return tl.inline_asm_elementwise(
            asm=_FP4_CARRY_S, constraints="=r,=r,=r,=r,r,r,r,r,r",
            args=[words, s0, s1, s2, s3],
            dtype=(tl.bfloat16, tl.bfloat16, tl.bfloat16, tl.bfloat16), is_pure=True, pack=2)


@triton.jit
def _fp4_carry_plain(words):
    """`_fp4_planes` in bf16 on carried words."""
    return tl.inline_asm_elementwise(
        asm=_FP4_CARRY, constraints="=r,=r,=r,=r,r", args=[words],
        dtype=(tl.bfloat16, tl.bfloat16, tl.bfloat16, tl.bfloat16), is_pure=True, pack=2)


@triton.jit
def _e4m3_cvt(byte):
    """float8_e4m3fn bytes (int32) -> fp32 by the hardware conversion (cvt e4m3x2 -> f16x2,
    sm89+; exact, e4m3 lies inside fp16): `_decode_e4m3`'s values in far fewer
    instructions. On sm90 it also lets Triton decode the scales where the dot operand needs
    them, without the shared-memory round trip (and its barriers) of each plane's scales."""
    return byte.to(tl.uint8).to(tl.float8e4nv, bitcast=True).to(tl.float32)


# Two 16-bit words (two e4m3 bytes each: columns 2j and 2j + 1) per 32-bit register -> the
# even columns' and the odd columns' values as f16 pairs: one hardware conversion per word
# (cvt e4m3x2 -> f16x2, sm89+; exact: e4m3 lies inside fp16), one byte permute per output.
_E4M3_WORDS_ASM = tl.constexpr("""{
            .reg .b16 lo, hi;
            .reg .b32 h0, h1;
            mov.b32 {lo, hi}, $2;
            cvt.rn.f16x2.e4m3x2 h0, lo;
            cvt.rn.f16x2.e4m3x2 h1, hi;
            prmt.b32 $0, h0, h1, 0x5410;
            prmt.b32 $1, h0, h1, 0x7632;
            }""")


def _e4m3_scaled_asm() -> str:
    """PTX: the 16-bit words of two e4m3 bytes in $2 (two words, `_E4M3_WORDS_ASM`'s order)
    -> the low bytes' and the high bytes' values times $3's bf16 pair (the words' E8M0
    scale times 2^120, 2^(E - 7): `_e4m3_scaled_words`), bf16 pairs in $0 and $1, for a
    layer whose bytes are all finite (no 0x7F / 0xFF, NaN in e4m3fn:
    `fused_moe.e4m3_finite`). One permute puts two bytes seeeemmm at bits 15-8 of the two
    16-bit lanes (zeros below); shifted 4 right and masked to eeeemmm, the lane is the bf16
    bit pattern 0 0000eeee mmm0000: the e4m3 magnitude times 2^-120, a bf16 subnormal where
    the e4m3 value is one (e = 0); one packed fma by $3 (a power of two: exact while the
    result is a normal bf16, E8M0_WORDS_MIN..MAX; the FP4 planes' fma takes bf16 subnormals
    the same way), then the sign XORed in from bit 15, as `_fp4_asm` does (one mask cannot keep
    bit 15 unshifted and clear the shifted sign at bit 11). 5 instructions per two values,
    none on the conversion unit: the cvt route takes 6 (cvt, permutes, two f16 -> f32, a
    pack to bf16; docs/speed.md, round fourteen)."""
    lines = []
    for out, sel in ((0, "0x2404"), (1, "0x3414")):
        lines += [f"prmt.b32 t, $2, 0, {sel};", "shr.u32 u, t, 4;",
                  "and.b32 u, u, 0x07F007F0;",
                  "fma.rn.bf16x2 u, u, $3, negz;",
                  f"lop3.b32 ${out}, t, 0x80008000, u, 0x6A;"]  # (t & sign) ^ u
    body = "".join(f"\n            {line}" for line in lines)
    return (f"{{\n            .reg .b32 t, u, negz;"
            f"\n            mov.b32 negz, 0x80008000;{body}\n            }}")


_E4M3_SCALED_BF16 = tl.constexpr(_e4m3_scaled_asm())
# E4M3_WORDS' values: the weights as fp8 bytes, as words converted by cvt (scaled per tile),
# or as words decoded from the bit fields times their scale, so that a tile spans any number
# of scale blocks (bf16, finite bytes, every E8M0 byte in E8M0_WORDS_MIN..MAX:
# `fused_moe.e4m3_words`)
E4M3_BYTES, E4M3_CVT_WORDS, E4M3_SCALED_WORDS = 0, 1, 2
_E4M3_SCALED_WORDS = tl.constexpr(E4M3_SCALED_WORDS)
MX_COLS_K = tl.constexpr(MX_COLS)  # columns of one E8M0 weight scale


def e8m0_words_range(element: str) -> tuple[int, int]:
    """The E8M0 bytes E for which a float element's codes decode exactly times their scale
    in bf16 (E4M3_SCALED_WORDS, `_fp6_planes_asm`): the multiplier 2^(E - bias) a normal
    bf16 and every nonzero value times 2^(E - 127), from the smallest subnormal
    2^(1 - bias - mantissa bits) up, a normal bf16: bias + mantissa bits .. 127 + bias."""
    el = ELEMENTS[element]
    return el.exp_bias + el.mantissa_bits, 127 + el.exp_bias


# e4m3: 10..134
E8M0_WORDS_MIN, E8M0_WORDS_MAX = e8m0_words_range("e4m3")


@triton.jit
def _e4m3_words(words, COMPUTE: tl.constexpr):
    """16-bit words of two float8_e4m3fn bytes (the weights as stored, read two columns at a
    time) -> (the low bytes' values, the high bytes') in the compute dtype, exactly. The
    words keep every tensor on the way to the dot 16 bits wide: fp8 bytes there make Triton
    give both dot operands the 8-bit register layout (kWidth 4), whose bf16 activations load
    without ldmatrix and are gathered by register moves (docs/speed.md, round twelve). PTX,
    CUDA sm89+ (the host decides: E4M3_WORDS)."""
    lo, hi = tl.inline_asm_elementwise(
        asm=_E4M3_WORDS_ASM, constraints="=r,=r,r", args=[words],
        dtype=(tl.float16, tl.float16), is_pure=True, pack=2)
    return lo.to(COMPUTE), hi.to(COMPUTE)


@triton.jit
def _e4m3_scaled_words(words, e8m0):
    """`_e4m3_words` in bf16 times each word's E8M0 scale byte (`e8m0`, its shape; every
    byte of the layer in E8M0_WORDS_MIN..MAX, bytes finite): the weights' values, exact."""
    mul = ((e8m0.to(tl.int32) + 120) << 7).to(tl.int16).to(tl.bfloat16, bitcast=True)
    return tl.inline_asm_elementwise(  # mul: 2^(E - 7), the scale times 2^120
        asm=_E4M3_SCALED_BF16, constraints="=r,=r,r,r", args=[words, mul],
        dtype=(tl.bfloat16, tl.bfloat16), is_pure=True, pack=2)


@triton.jit
def _e4m3_scaled_part(a, bq, k0, K, s_rows, stride_sk, ACT: tl.constexpr, DOT: tl.constexpr,
                      COMPUTE: tl.constexpr, EVEN_K: tl.constexpr, SWAP_AB: tl.constexpr,
                      TILE_K: tl.constexpr):
    """The product of one tile of TILE_K columns (E4M3_SCALED_WORDS; any multiple of the 32
    columns of a scale block): bq [TILE_K / 2, BLOCK_N] words of two e4m3 columns, decoded
    times their E8M0 scale into the weights' bf16 values (`_e4m3_scaled_words`; word j in
    scale column (k0 + 2j) / 32), so the tile needs no scale of its own: it is not held to
    one scale column, which kept MXFP8's tiles 32 columns wide (docs/speed.md, round
    fourteen). The same exact products as the tile-scaled path; only the fp32 sum's
    association differs. Returned, not accumulated: a dot chained into the accumulator
    made the tuned K_UNROLL tiles 2-10% slower (round fourteen, first call)."""
    BLOCKS: tl.constexpr = TILE_K // MX_COLS_K
    BLOCK_N: tl.constexpr = bq.shape[1]
    col = k0 // MX_COLS_K + tl.arange(0, BLOCKS)
    if not EVEN_K:
        col = tl.minimum(col, (K - 1) // MX_COLS_K)
    e = tl.load(s_rows[None, :] + col[:, None] * stride_sk)  # [BLOCKS, BLOCK_N]
    words = tl.reshape(bq, (BLOCKS, MX_COLS_K // 2, BLOCK_N))
    lo, hi = _e4m3_scaled_words(words, tl.broadcast_to(e[:, None, :], words.shape))
    b_even = tl.reshape(lo, (TILE_K // 2, BLOCK_N))
    b_odd = tl.reshape(hi, (TILE_K // 2, BLOCK_N))
    a_even, a_odd = tl.split(tl.reshape(a, (a.shape[0], TILE_K // 2, 2)))
    part = _mma(a_even, b_even, ACT, DOT, COMPUTE, SWAP_AB)
    return _dot_acc(a_odd, b_odd, part, ACT, DOT, COMPUTE, SWAP_AB)


# fp6 weights in six-bit planes (layout.plane_fp6), decoded times their E8M0 scales: the
# elements the kernel decodes so, by exponent bits (FP6_EXP), and their biases
FP6_ELEMENTS = {ELEMENTS[name].exp_bits: name for name in ("e2m3", "e3m2")}
_FP6_BIAS = tl.constexpr(tuple(ELEMENTS[FP6_ELEMENTS[e]].exp_bias for e in (2, 3)))
_FP6_TOP_SIGN = tl.constexpr(tuple(fp6_top_sign(e) for e in (2, 3)))


def _fp6_planes_asm(exp_bits: int) -> str:
    """PTX: $8 and $9 two 16-bit words each of a span's halves (`layout.plane_fp6`: word i
    and word i + 16, nibble p the low magnitude bits of plane p), $10 their two 16-bit words
    of top bits and signs (low byte word i's, high byte word i + 16's), $11..$14 plane p's
    bf16 pair of multipliers 2^(E - bias) (E the plane's E8M0 scale byte) -> $0..$3 plane
    p's two weights of the first half, $4..$7 of the second, in bf16, exact (every E8M0
    byte of the layer in `e8m0_words_range`). One permute per half copies its byte into
    both bytes of a 16-bit lane; per plane a shift puts the nibble at the lane's bits
    SH..SH + 3 (SH = 2 + exponent bits: bf16's exponent bits 7.. and mantissa top bits), a
    shift and a mask put the top bit at SH + 4 and the sign at 15 together
    (`layout.fp6_top_sign`), a lop3 merges them: the bf16 bit pattern of the value times
    2^(bias - 127), a bf16 subnormal where the code is one; one packed fma by the
    multiplier gives the weight, as `_e4m3_scaled_asm`. 4-5 instructions per two weights,
    one permute per four planes."""
    sh = 2 + exp_bits
    lanes = 0x10001  # a 16-bit mask in both lanes
    mag, top_sign = (0xF << sh) * lanes, ((1 << (sh + 4)) | 0x8000) * lanes
    lines = []
    for half, (words, select) in enumerate((("$8", "0x2200"), ("$9", "0x3311"))):
        lines.append(f"prmt.b32 t, $10, 0, {select};")  # lane i: its byte in both bytes
        for p, (top, sign) in enumerate(fp6_top_sign(exp_bits)):
            shift, nib = sh + 4 - top, sh - 4 * p
            assert 8 + sign + shift == 15 and shift > 0
            src = "n"
            if nib > 0:
                lines.append(f"shl.b32 n, {words}, {nib};")
            elif nib < 0:
                lines.append(f"shr.u32 n, {words}, {-nib};")
            else:
                src = words
            lines += [f"shl.b32 u, t, {shift};", f"and.b32 u, u, {top_sign:#x};",
                      f"lop3.b32 u, {src}, {mag:#x}, u, 0xEA;",  # (nibbles & mag) | u
                      f"fma.rn.bf16x2 ${4 * half + p}, u, ${11 + p}, negz;"]
    body = "".join(f"\n            {line}" for line in lines)
    return (f"{{\n            .reg .b32 t, n, u, negz;"
            f"\n            mov.b32 negz, 0x80008000;{body}\n            }}")


_FP6_PLANES_E2 = tl.constexpr(_fp6_planes_asm(2))
_FP6_PLANES_E3 = tl.constexpr(_fp6_planes_asm(3))


@triton.jit
def _fp6_planes(lo, hi, high, m0, m1, m2, m3, FP6_EXP: tl.constexpr):
    """`_fp6_planes_asm` on a span's words of its two halves (lo: words i, hi: words
    i + 16), their 16-bit words of top bits and signs, and each plane's bf16 multipliers
    (all in lo's shape): the four planes' weights of each half in bf16, (lo's p = 0..3,
    hi's p = 0..3). PTX, CUDA sm80+ (the host decides: fused_moe.fp6_planes_run_on)."""
    if FP6_EXP == 2:
        out = tl.inline_asm_elementwise(
            asm=_FP6_PLANES_E2, constraints="=r,=r,=r,=r,=r,=r,=r,=r,r,r,r,r,r,r,r",
            args=[lo, hi, high, m0, m1, m2, m3], dtype=(tl.bfloat16,) * 8, is_pure=True,
            pack=2)
    else:
        out = tl.inline_asm_elementwise(
            asm=_FP6_PLANES_E3, constraints="=r,=r,=r,=r,=r,=r,=r,=r,r,r,r,r,r,r,r",
            args=[lo, hi, high, m0, m1, m2, m3], dtype=(tl.bfloat16,) * 8, is_pure=True,
            pack=2)
    return out


@triton.jit
def _fp6_mul(sw, P: tl.constexpr, FP6_EXP: tl.constexpr, IEEE: tl.constexpr):
    """Plane P's multiplier 2^(E - bias) from the span's scale word (byte P its E8M0 byte
    E): bf16, or fp32 for the interpreter's decode (IEEE)."""
    e = ((sw >> (8 * P)) & 0xFF) + (127 - _FP6_BIAS[FP6_EXP - 2])
    if IEEE:
        return (e << 23).to(tl.float32, bitcast=True)
    return (e << 7).to(tl.int16).to(tl.bfloat16, bitcast=True)


@triton.jit
def _fp6_plane_ieee(raw, h, mul, P: tl.constexpr, FP6_EXP: tl.constexpr):
    """`_fp6_planes_asm`'s plane P in fp32 integer arithmetic (the interpreter's, which
    runs no PTX): the nibble and the top bit at fp32's mantissa top bits, the sign at
    bit 31, the pattern times the multiplier (exact: an fp32 subnormal times a power of two
    that makes it normal)."""
    SH: tl.constexpr = 2 + FP6_EXP + 16
    top = (h >> _FP6_TOP_SIGN[FP6_EXP - 2][P][0]) & 1
    sign = (h >> _FP6_TOP_SIGN[FP6_EXP - 2][P][1]) & 1
    bits = ((((raw >> (4 * P)) & 0xF) | (top << 4)) << SH) | (sign << 31)
    return bits.to(tl.float32, bitcast=True) * mul


@triton.jit
def _a_cols(a_base, a_mask, k, k_hi, EVEN_K: tl.constexpr, COLS: tl.constexpr):
    """COLS activation columns from k of the tile's rows (zeros past the range's end)."""
    kk = tl.max_contiguous(tl.multiple_of(k + tl.arange(0, COLS), COLS), COLS)
    if EVEN_K:  # every tile inside the range: rows masked only
        return tl.load(a_base + kk[None, :], mask=a_mask, other=0)
    return tl.load(a_base + kk[None, :], mask=a_mask & (kk < k_hi)[None, :], other=0)


@triton.jit
def _fp6_half(a_base, a_mask, k0, k_hi, b, P: tl.constexpr, HALF: tl.constexpr,
              ACT: tl.constexpr, DOT: tl.constexpr, COMPUTE: tl.constexpr,
              EVEN_K: tl.constexpr, SWAP_AB: tl.constexpr, Q: tl.constexpr):
    """Plane P's half HALF of the span's weights (b: [Q, BLOCK_N]) times its Q activation
    columns (k0 + 2Q P + Q HALF ..)."""
    a = _a_cols(a_base, a_mask, k0 + (2 * P + HALF) * Q, k_hi, EVEN_K, Q)
    return _mma(a, b, ACT, DOT, COMPUTE, SWAP_AB)


@triton.jit
def _fp6_planes_part(a_base, a_mask, k0, k_hi, K, lo, hi, high, s_rows, stride_sk,
                     ACT: tl.constexpr, DOT: tl.constexpr, COMPUTE: tl.constexpr,
                     EVEN_K: tl.constexpr, SWAP_AB: tl.constexpr, TILE_K: tl.constexpr,
                     FP6_EXP: tl.constexpr):
    """The product of one span of fp6 weights in six-bit planes (`layout.plane_fp6`), every
    part read as 16-bit words [TILE_K / 8, BLOCK_N]: lo (words i: nibble p plane p's low
    magnitude bits), hi (words i + TILE_K / 8), high (their top bits and signs, lo's in the
    low byte). Plane p is one 32-column MX block, decoded times its E8M0 scale (the four
    blocks' bytes one aligned 32-bit word per row), so the tile needs no scale of its own;
    each half of a plane multiplies its 16 activation columns, loaded as a dot operand. The
    same exact products as the e4m3 bytes they were widened to (MXFP8's scaled words); only
    the fp32 sum's association differs."""
    tl.static_assert(TILE_K == 4 * MX_COLS_K)
    Q: tl.constexpr = TILE_K // 8
    col = k0 // MX_COLS_K
    if not EVEN_K:  # a tile past K (a K_UNROLL step's last): the last span's scales
        col = tl.minimum(col, (K - 1) // TILE_K * 4)
    sw = tl.load((s_rows + col * stride_sk).to(tl.pointer_type(tl.int32), bitcast=True))
    if DOT == _DOT_IEEE:  # the interpreter (fp32 dots): the same bits in integer arithmetic
        raw_lo = lo.to(tl.int32) & 0xFFFF
        raw_hi = hi.to(tl.int32) & 0xFFFF
        h = high.to(tl.int32) & 0xFFFF
        m0 = _fp6_mul(sw, 0, FP6_EXP, True)[None, :]
        m1 = _fp6_mul(sw, 1, FP6_EXP, True)[None, :]
        m2 = _fp6_mul(sw, 2, FP6_EXP, True)[None, :]
        m3 = _fp6_mul(sw, 3, FP6_EXP, True)[None, :]
        b0 = _fp6_plane_ieee(raw_lo, h & 0xFF, m0, 0, FP6_EXP)
        b1 = _fp6_plane_ieee(raw_lo, h & 0xFF, m1, 1, FP6_EXP)
        b2 = _fp6_plane_ieee(raw_lo, h & 0xFF, m2, 2, FP6_EXP)
        b3 = _fp6_plane_ieee(raw_lo, h & 0xFF, m3, 3, FP6_EXP)
        c0 = _fp6_plane_ieee(raw_hi, h >> 8, m0, 0, FP6_EXP)
        c1 = _fp6_plane_ieee(raw_hi, h >> 8, m1, 1, FP6_EXP)
        c2 = _fp6_plane_ieee(raw_hi, h >> 8, m2, 2, FP6_EXP)
        c3 = _fp6_plane_ieee(raw_hi, h >> 8, m3, 3, FP6_EXP)
    else:
        b0, b1, b2, b3, c0, c1, c2, c3 = _fp6_planes(
            lo, hi, high, tl.broadcast_to(_fp6_mul(sw, 0, FP6_EXP, False)[None, :], lo.shape),
            tl.broadcast_to(_fp6_mul(sw, 1, FP6_EXP, False)[None, :], lo.shape),
            tl.broadcast_to(_fp6_mul(sw, 2, FP6_EXP, False)[None, :], lo.shape),
            tl.broadcast_to(_fp6_mul(sw, 3, FP6_EXP, False)[None, :], lo.shape), FP6_EXP)
    out = _fp6_half(a_base, a_mask, k0, k_hi, b0, 0, 0, ACT, DOT, COMPUTE, EVEN_K, SWAP_AB, Q)
    out += _fp6_half(a_base, a_mask, k0, k_hi, c0, 0, 1, ACT, DOT, COMPUTE, EVEN_K, SWAP_AB, Q)
    out += _fp6_half(a_base, a_mask, k0, k_hi, b1, 1, 0, ACT, DOT, COMPUTE, EVEN_K, SWAP_AB, Q)
    out += _fp6_half(a_base, a_mask, k0, k_hi, c1, 1, 1, ACT, DOT, COMPUTE, EVEN_K, SWAP_AB, Q)
    out += _fp6_half(a_base, a_mask, k0, k_hi, b2, 2, 0, ACT, DOT, COMPUTE, EVEN_K, SWAP_AB, Q)
    out += _fp6_half(a_base, a_mask, k0, k_hi, c2, 2, 1, ACT, DOT, COMPUTE, EVEN_K, SWAP_AB, Q)
    out += _fp6_half(a_base, a_mask, k0, k_hi, b3, 3, 0, ACT, DOT, COMPUTE, EVEN_K, SWAP_AB, Q)
    out += _fp6_half(a_base, a_mask, k0, k_hi, c3, 3, 1, ACT, DOT, COMPUTE, EVEN_K, SWAP_AB, Q)
    return out


@triton.jit
def _fp4_planes(words, COMPUTE: tl.constexpr):
    """16-bit words of four e2m1 nibbles (`plane_nibbles`) -> the e2m1 values of nibble p,
    p = 0..3, in the compute dtype (exact: e2m1 has 2 significant bits). PTX, CUDA sm80+."""
    if COMPUTE == tl.bfloat16:
        return tl.inline_asm_elementwise(
            asm=_FP4_PLANES_BF16, constraints="=r,=r,=r,=r,r", args=[words],
            dtype=(tl.bfloat16, tl.bfloat16, tl.bfloat16, tl.bfloat16), is_pure=True,
            pack=2)
    else:
        return tl.inline_asm_elementwise(
            asm=_FP4_PLANES_FP16, constraints="=r,=r,=r,=r,r", args=[words],
            dtype=(tl.float16, tl.float16, tl.float16, tl.float16), is_pure=True, pack=2)


@triton.jit
def _fp4_planes_scaled(words, s0, s1, s2, s3, COMPUTE: tl.constexpr):
    """`_fp4_planes` with plane p's values times s<p> (the compute dtype, the words' shape):
    e2m1 x e4m3 products, exact (module docstring, S_E4M3)."""
    if COMPUTE == tl.bfloat16:
        return tl.inline_asm_elementwise(
            asm=_FP4_PLANES_S_BF16, constraints="=r,=r,=r,=r,r,r,r,r,r",
            args=[words, s0, s1, s2, s3],
            dtype=(tl.bfloat16, tl.bfloat16, tl.bfloat16, tl.bfloat16), is_pure=True,
            pack=2)
    else:
        return tl.inline_asm_elementwise(
            asm=_FP4_PLANES_S_FP16, constraints="=r,=r,=r,=r,r,r,r,r,r",
            args=[words, s0, s1, s2, s3],
            dtype=(tl.float16, tl.float16, tl.float16, tl.float16), is_pure=True, pack=2)


@triton.jit
def _fp4_planes_folded(words, s0, s1, s2, s3):
    """`_fp4_planes_scaled` in bf16 with s<p> the block scale times 2^(126 - LEAN_SHIFT):
    plane p's values times its scale times 2^-LEAN_SHIFT, exact (LEAN_SHIFT)."""
    return tl.inline_asm_elementwise(
        asm=_FP4_PLANES_F_BF16, constraints="=r,=r,=r,=r,r,r,r,r,r",
        args=[words, s0, s1, s2, s3],
        dtype=(tl.bfloat16, tl.bfloat16, tl.bfloat16, tl.bfloat16), is_pure=True, pack=2)


@triton.jit
def _int4_planes(words, COMPUTE: tl.constexpr):
    """16-bit words of four nibbles (`plane_nibbles`) -> nibble p - 8 of each word, p = 0..3,
    in the compute dtype: two words per 32-bit register, so one lop3 takes nibble p of both
    into the register's two halves (the magic number's mantissa, as `_int4_pairs`) and one
    packed fma subtracts magic + 8; no byte permutes. (PTX; CUDA sm80+, the host decides.)"""
    if COMPUTE == tl.bfloat16:
        return tl.inline_asm_elementwise(
            asm=_I4_PLANES_BF16, constraints="=r,=r,=r,=r,r", args=[words],
            dtype=(tl.bfloat16, tl.bfloat16, tl.bfloat16, tl.bfloat16), is_pure=True,
            pack=2)
    else:
        return tl.inline_asm_elementwise(
            asm=_I4_PLANES_FP16, constraints="=r,=r,=r,=r,r", args=[words],
            dtype=(tl.float16, tl.float16, tl.float16, tl.float16), is_pure=True, pack=2)


@triton.jit
def _int4_planes_zero(words, zero, COMPUTE: tl.constexpr):
    """`_int4_planes` for codes with zero points: nibble p - zero of each word, `zero` the
    zero point of each word's weight row (int32, the words' shape). The packed fma subtracts
    magic + zero, in the compute dtype exactly (an integer below 2^8 in bf16, 2^11 in fp16),
    so AWQ's asymmetric codes decode in as few instructions as GPTQ's."""
    if COMPUTE == tl.bfloat16:
        off = (-(128 + zero)).to(tl.float32).to(tl.bfloat16)
        return tl.inline_asm_elementwise(
            asm=_I4_PLANES_Z_BF16, constraints="=r,=r,=r,=r,r,r", args=[words, off],
            dtype=(tl.bfloat16, tl.bfloat16, tl.bfloat16, tl.bfloat16), is_pure=True,
            pack=2)
    else:
        off = (-(1024 + zero)).to(tl.float32).to(tl.float16)
        return tl.inline_asm_elementwise(
            asm=_I4_PLANES_Z_FP16, constraints="=r,=r,=r,=r,r,r", args=[words, off],
            dtype=(tl.float16, tl.float16, tl.float16, tl.float16), is_pure=True, pack=2)


@triton.jit
def _round_to(v, COMPUTE: tl.constexpr):
    """fp32 v rounded to the compute dtype, to nearest, ties to even (the interpreter's fp32 ->
    bf16 cast truncates: `rne_bf16` first, after which the cast is exact)."""
    if COMPUTE == tl.bfloat16:
        return rne_bf16(v).to(tl.bfloat16)
    return v.to(COMPUTE)


@triton.jit
def _int4_planes_scaled(words, zero, scale, DECODE_ZERO: tl.constexpr, COMPUTE: tl.constexpr):
    """`_int4_planes` (DECODE_ZERO: `_int4_planes_zero`, `zero` int32 per weight row) with
    each value times `scale` (its weight row's, the compute dtype), the exact product
    (nibble - zero) * scale rounded once to the compute dtype by the packed fma (ONE_DOT's
    int4 planes, `_planes_part`). Both [BLOCK_N] vectors broadcast to the words' shape."""
    sc = tl.broadcast_to(scale[None, :], words.shape)
    if COMPUTE == tl.bfloat16:
        if DECODE_ZERO:
            off = tl.broadcast_to((-(128 + zero)).to(tl.float32).to(tl.bfloat16)[None, :],
                                  words.shape)
            return tl.inline_asm_elementwise(
                asm=_I4_PLANES_ZS_BF16, constraints="=r,=r,=r,=r,r,r,r",
                args=[words, off, sc],
                dtype=(tl.bfloat16, tl.bfloat16, tl.bfloat16, tl.bfloat16), is_pure=True,
                pack=2)
        return tl.inline_asm_elementwise(
            asm=_I4_PLANES_S_BF16, constraints="=r,=r,=r,=r,r,r", args=[words, sc],
            dtype=(tl.bfloat16, tl.bfloat16, tl.bfloat16, tl.bfloat16), is_pure=True,
            pack=2)
    else:
        if DECODE_ZERO:
            off = tl.broadcast_to((-(1024 + zero)).to(tl.float32).to(tl.float16)[None, :],
                                  words.shape)
            return tl.inline_asm_elementwise(
                asm=_I4_PLANES_ZS_FP16, constraints="=r,=r,=r,=r,r,r,r",
                args=[words, off, sc],
                dtype=(tl.float16, tl.float16, tl.float16, tl.float16), is_pure=True, pack=2)
        return tl.inline_asm_elementwise(
            asm=_I4_PLANES_S_FP16, constraints="=r,=r,=r,=r,r,r", args=[words, sc],
            dtype=(tl.float16, tl.float16, tl.float16, tl.float16), is_pure=True, pack=2)


@triton.jit
def int4_planes_rounded(bq, s, z, DECODE_ZERO: tl.constexpr, SYM_ZERO: tl.constexpr,
                        FAST_I4: tl.constexpr, COMPUTE: tl.constexpr):
    """Plane words bq [Q, BLOCK_N] (`plane_nibbles`) -> the four planes' weights
    (q - zero) * s in the compute dtype, s (each weight row's scale, [BLOCK_N]) first
    rounded to it and the product rounded once to nearest: ONE_DOT's int4 decode
    (`_planes_part`) and the int4 prefill dispatch's (dequant.py). `z`: each row's zero
    point (int32 [BLOCK_N]) where DECODE_ZERO, else SYM_ZERO for every code. FAST_I4 ==
    I4_PAIRS: the packed fma (`_int4_planes_scaled`; CUDA sm80+, the host decides), else
    the product exact in fp32, then one rounding: the same values."""
    sc = _round_to(s, COMPUTE)
    if FAST_I4 == _I4_PAIRS:
        b0, b1, b2, b3 = _int4_planes_scaled(bq, z, sc, DECODE_ZERO, COMPUTE)
    else:
        raw = bq.to(tl.int32)
        sr = sc.to(tl.float32)[None, :]
        zero = SYM_ZERO
        if DECODE_ZERO:
            zero = z[None, :]
        b0 = _round_to(((raw & 0xF) - zero).to(tl.float32) * sr, COMPUTE)
        b1 = _round_to((((raw >> 4) & 0xF) - zero).to(tl.float32) * sr, COMPUTE)
        b2 = _round_to((((raw >> 8) & 0xF) - zero).to(tl.float32) * sr, COMPUTE)
        b3 = _round_to((((raw >> 12) & 0xF) - zero).to(tl.float32) * sr, COMPUTE)
    return b0, b1, b2, b3


@triton.jit
def _int4_pairs(raw, COMPUTE: tl.constexpr):
    """Bytes [0, 255] (uint8) -> (low nibble - 8, high nibble - 8) in the compute dtype,
    four bytes per 32-bit register as the tile arrives from shared memory (PTX; CUDA sm80+
    only, the host decides): bytes 0 and 1 spread into the two 16-bit halves of one
    register, bytes 2 and 3 of another (prmt), each nibble plane ORed into the mantissa of
    the magic number (lop3: magic + nibble, exact) and magic + 8 subtracted by one packed
    fma (exact: small integers). The same values as _int4_magic in fewer instructions; the
    decode was measured not to bound the kernel (docs/speed.md). Bytes taken one per
    register instead cost Triton a byte extract each before the asm (128 of the K loop's 438
    sm90 SASS instructions were PRMT)."""
    if COMPUTE == tl.bfloat16:
        return tl.inline_asm_elementwise(
            asm=_I4_PAIRS_BF16, constraints="=r,=r,=r,=r,r", args=[raw],
            dtype=(tl.bfloat16, tl.bfloat16), is_pure=True, pack=4)
    else:
        return tl.inline_asm_elementwise(
            asm=_I4_PAIRS_FP16, constraints="=r,=r,=r,=r,r", args=[raw],
            dtype=(tl.float16, tl.float16), is_pure=True, pack=4)


@triton.jit
def _cat4(b0, b1, b2, b3):
    """Four [Q, N] tiles stacked into one [4 Q, N], b_p rows [p Q, (p + 1) Q) (ONE_DOT).
    Each plane arrives in its quarter dot's operand layout, and the K = 4 Q operand's layout
    is the four quarters' side by side, so Triton 3.6 builds it from the same registers: no
    layout conversion in the sm90 TTGIR."""
    j = tl.join(tl.join(b0, b1), tl.join(b2, b3))  # [Q, N, u, v] = b_(2v + u)
    return tl.reshape(tl.permute(j, (3, 2, 0, 1)), (4 * b0.shape[0], b0.shape[1]))


@triton.jit
def _mma(a, b, ACT: tl.constexpr, DOT: tl.constexpr, COMPUTE: tl.constexpr,
         SWAP_AB: tl.constexpr):
    """a [BM, BK] @ b [BK, BN], or with SWAP_AB the transposed product b^T a^T [BN, BM]:
    the weight tile becomes the MMA's M side (64/128 wide on Hopper) and the few token rows
    its N side. The same products and the same fp32 sums per output, only transposed."""
    if SWAP_AB:
        out = _dot(tl.trans(b), tl.trans(a), ACT, DOT, COMPUTE)
    else:
        out = _dot(a, b, ACT, DOT, COMPUTE)
    return out


@triton.jit
def _dot(a, b, ACT: tl.constexpr, DOT: tl.constexpr, COMPUTE: tl.constexpr):
    """The tile product with fp32 (int32 for int8 x int8) accumulation; operands are exact.
    Int8 MMA needs K >= 32 per dot: narrower int8 tiles (int4 nibble planes of a group-32
    tile) run as 16-bit dots, still exact (|codes| <= 128, fp32 sums of 16 products).
    DOT_TF32 serves 16-bit weights of the other 16-bit dtype (fp16 weights, bf16
    activations): tf32 holds every bf16 and fp16 value exactly, the compute dtype would not."""
    if DOT == _DOT_IEEE:
        out = tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
    elif DOT == _DOT_TF32:
        out = tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="tf32")
    elif ACT == _A_INT8 and a.shape[-1] >= 32:
        out = tl.dot(a.to(tl.int8), b.to(tl.int8), out_dtype=tl.int32).to(tl.float32)
    elif (ACT == _A_FP8 or ACT == _A_FP8_G) and a.shape[-1] >= 32:
        # e4m3 x e4m3 on the tensor cores (sm89+: the backend's claims), exact products;
        # int4 weights (W4AFP8) as e4m3 values: every integer in [-8, 8] is one (either
        # operand: SWAP_AB puts the weights first)
        if a.dtype != tl.float8e4nv:
            a = a.to(tl.float32).to(tl.float8e4nv)
        if b.dtype != tl.float8e4nv:
            b = b.to(tl.float32).to(tl.float8e4nv)
        out = tl.dot(a, b, out_dtype=tl.float32)
    else:
        out = tl.dot(a.to(COMPUTE), b.to(COMPUTE))
    return out


@triton.jit
def _dot_acc(a, b, acc, ACT: tl.constexpr, DOT: tl.constexpr, COMPUTE: tl.constexpr,
             SWAP_AB: tl.constexpr):
    """acc + the tile product (`_mma`'s, transposed with SWAP_AB) in one dot: the MMA
    accumulates into acc, no product tile beside it (ACC_DOT: tiles without a scale of their
    own). Operands as `_dot` makes them; 16-bit, tf32 or e4m3 x e4m3 dots only."""
    if SWAP_AB:
        x = tl.trans(b)
        y = tl.trans(a)
    else:
        x = a
        y = b
    if DOT == _DOT_IEEE:
        out = tl.dot(x.to(tl.float32), y.to(tl.float32), acc, input_precision="ieee")
    elif DOT == _DOT_TF32:
        out = tl.dot(x.to(tl.float32), y.to(tl.float32), acc, input_precision="tf32")
    elif ACT == _A_FP8 and a.shape[-1] >= 32:  # e4m3 codes and e4m3 weights (W_FP8)
        out = tl.dot(x, y, acc, out_dtype=tl.float32)
    else:
        out = tl.dot(x.to(COMPUTE), y.to(COMPUTE), acc)
    return out


@triton.jit
def _pairs_part(a, bq, k0, K, s_rows, z_rows, g_row, scale_cols, stride_sk,
                WEIGHT: tl.constexpr, WSCALE: tl.constexpr, ACT: tl.constexpr,
                HAS_ZERO: tl.constexpr, SYM_ZERO: tl.constexpr, HAS_G_IDX: tl.constexpr,
                DOT: tl.constexpr, COMPUTE: tl.constexpr, EVEN_K: tl.constexpr,
                SWAP_AB: tl.constexpr, FAST_I4: tl.constexpr, TILE_K: tl.constexpr):
    """The product of a nibble tile in the checkpoint's order: byte j holds columns 2j (low
    nibble) and 2j + 1 (high). Each byte is read once and the nibble planes multiply the
    even and odd columns of a, split from the whole tile in registers. (Two loads at stride
    2 were 2-byte accesses that the pipeliner cannot stage, cp.async moving >= 4 bytes, so
    every K step waited on them; the split's halves land in the dot operand's layout, no
    shuffle: Triton 3.6 sm90 TTGIR.)"""
    a_lo, a_hi = tl.split(tl.reshape(a, (a.shape[0], TILE_K // 2, 2)))
    kb = k0 // 2 + tl.arange(0, TILE_K // 2)
    k_lo = 2 * kb
    k_hi = k_lo + 1
    raw = bq.to(tl.int32)
    if WEIGHT == _W_FP4:  # e2m1 values: exact in fp32 and in bf16 / fp16 operands
        b_lo = _decode_e2m1(raw & 0xF)
        b_hi = _decode_e2m1(raw >> 4)
        if WSCALE == _S_E4M3:  # columns 2j and 2j+1 share a block (even scale_cols)
            kbs = kb if EVEN_K else tl.minimum(kb, (K - 1) // 2)
            sw = _decode_e4m3(tl.load(s_rows[None, :]
                                         + (2 * kbs // scale_cols * stride_sk)[:, None]))
            b_lo = b_lo * sw
            b_hi = b_hi * sw
    elif FAST_I4 == _I4_PAIRS:  # host: FAST_I4 on CUDA sm80+, SYM_ZERO 8
        tl.static_assert(SYM_ZERO == 8)
        b_lo, b_hi = _int4_pairs(bq, COMPUTE)
    elif FAST_I4:  # host: symmetric, no act order, 16-bit activations, native dot
        b_lo = _int4_magic(raw & 0xF, SYM_ZERO, COMPUTE)
        b_hi = _int4_magic(raw >> 4, SYM_ZERO, COMPUTE)
    else:
        b_lo = _dequant(raw & 0xF, tl.minimum(k_lo, K - 1), k0, g_row, s_rows, z_rows,
                        scale_cols, stride_sk, HAS_G_IDX, HAS_ZERO, SYM_ZERO)
        b_hi = _dequant(raw >> 4, tl.minimum(k_hi, K - 1), k0, g_row, s_rows,
                        z_rows, scale_cols, stride_sk, HAS_G_IDX, HAS_ZERO, SYM_ZERO)
    return (_mma(a_lo, b_lo, ACT, DOT, COMPUTE, SWAP_AB)
            + _mma(a_hi, b_hi, ACT, DOT, COMPUTE, SWAP_AB))


@triton.jit
def _planes_part(a0, a1, a2, a3, bq, k0, K, s_rows, z_rows, g_row, scale_cols, stride_sk,
                 ACT: tl.constexpr, HAS_ZERO: tl.constexpr, SYM_ZERO: tl.constexpr,
                 HAS_G_IDX: tl.constexpr, DOT: tl.constexpr, COMPUTE: tl.constexpr,
                 SWAP_AB: tl.constexpr, FAST_I4: tl.constexpr, TILE_K: tl.constexpr,
                 ZERO_SUMS: tl.constexpr, ONE_DOT: tl.constexpr):
    """The product of an int4 tile in four planes (`plane_nibbles`): 16-bit word j holds
    columns j + p * TILE_K / 4 in nibble p, so plane p multiplies the tile's quarter p,
    each quarter a dot operand as loaded. Two words share a 32-bit register, so one lop3
    decodes a plane's pair of consecutive columns (`_int4_planes`), and both dot operands
    have the 16-bit layout (the byte tile of the other orders gives both operands the 8-bit
    one, and the activation quarters then cost register copies: docs/speed.md, "Change 8").
    With ZERO_SUMS the codes decode as symmetric ones (codes - SYM_ZERO) whatever their zero
    points: `_tile_part` takes the zero points' share off the product.
    ONE_DOT with 16-bit activations: the tile's scale (and zero point: from
    the scale words with ZERO_SUMS, as `_tile_part` reads them) joins the decode, each weight
    (q - zero) * s rounded once to the compute dtype, s first rounded to it (as Marlin's
    decode does: the tolerance table's error model (2), tune's `candidate_bound`), so the
    tile's product needs no scale after its dot and accumulates in it."""
    Q: tl.constexpr = TILE_K // 4
    SCALED: tl.constexpr = ONE_DOT and ACT == _A16  # (`_tile_part`'s I4_SCALED)
    DECODE_ZERO: tl.constexpr = HAS_ZERO and (SCALED or not ZERO_SUMS)  # zeros in the decode
    if SCALED:
        col = tl.minimum(k0 // scale_cols, (K - 1) // scale_cols)
        if ZERO_SUMS:  # the words: the fp32 scale, the zero point in its 4 low bits
            word = tl.load(s_rows + col * stride_sk)
            z = word & 0xF
            s = (word & ~0xF).to(tl.float32, bitcast=True)
        else:
            s = tl.load(s_rows + col * stride_sk)
            z = col  # (a placeholder without zero points)
            if DECODE_ZERO:
                z = tl.load(z_rows + col).to(tl.int32)
        b0, b1, b2, b3 = int4_planes_rounded(bq, s, z, DECODE_ZERO, SYM_ZERO, FAST_I4,
                                             COMPUTE)
        return _mma(a0, _cat4(b0, b1, b2, b3), ACT, DOT, COMPUTE, SWAP_AB)
    if FAST_I4 == _I4_PAIRS and DECODE_ZERO:  # host: CUDA sm80+, no act order (planes)
        z = tl.load(z_rows + k0 // scale_cols).to(tl.int32)
        b0, b1, b2, b3 = _int4_planes_zero(bq, tl.broadcast_to(z[None, :], bq.shape),
                                           COMPUTE)
    elif FAST_I4 == _I4_PAIRS:  # host: FAST_I4 on CUDA sm80+, SYM_ZERO 8
        tl.static_assert(SYM_ZERO == 8)
        b0, b1, b2, b3 = _int4_planes(bq, COMPUTE)
    else:
        raw = bq.to(tl.int32)
        if FAST_I4:  # host: symmetric, no act order, 16-bit activations, native dot
            b0 = _int4_magic(raw & 0xF, SYM_ZERO, COMPUTE)
            b1 = _int4_magic((raw >> 4) & 0xF, SYM_ZERO, COMPUTE)
            b2 = _int4_magic((raw >> 8) & 0xF, SYM_ZERO, COMPUTE)
            b3 = _int4_magic((raw >> 12) & 0xF, SYM_ZERO, COMPUTE)
        else:  # (no act order here: the host stores planes only without it)
            kq = k0 + tl.arange(0, Q)
            b0 = _dequant(raw & 0xF, tl.minimum(kq, K - 1), k0, g_row, s_rows, z_rows,
                          scale_cols, stride_sk, HAS_G_IDX, DECODE_ZERO, SYM_ZERO)
            b1 = _dequant((raw >> 4) & 0xF, tl.minimum(kq + Q, K - 1), k0, g_row, s_rows,
                          z_rows, scale_cols, stride_sk, HAS_G_IDX, DECODE_ZERO, SYM_ZERO)
            b2 = _dequant((raw >> 8) & 0xF, tl.minimum(kq + 2 * Q, K - 1), k0, g_row,
                          s_rows, z_rows, scale_cols, stride_sk, HAS_G_IDX, DECODE_ZERO, SYM_ZERO)
            b3 = _dequant((raw >> 12) & 0xF, tl.minimum(kq + 3 * Q, K - 1), k0, g_row,
                          s_rows, z_rows, scale_cols, stride_sk, HAS_G_IDX, DECODE_ZERO, SYM_ZERO)
    if FAST_I4 == _I4_PAIRS and ACT == _A_INT8:
        # W4A8: the PTX decode gives the codes in the compute dtype, so the int8 activation
        # codes join them there (|a| <= 128, exact in bf16 and fp16) for a 16-bit dot: the
        # products (|a w| <= 128 * 15) and a quarter's sums (< 2^24) are the integer dot's
        # exactly, with no per-element conversion of the weights back to int8
        if ONE_DOT:  # a0: the whole tile
            out = _mma(a0.to(COMPUTE), _cat4(b0, b1, b2, b3), _A16, DOT, COMPUTE, SWAP_AB)
        else:
            out = (_mma(a0.to(COMPUTE), b0, _A16, DOT, COMPUTE, SWAP_AB)
                   + _mma(a1.to(COMPUTE), b1, _A16, DOT, COMPUTE, SWAP_AB)
                   + _mma(a2.to(COMPUTE), b2, _A16, DOT, COMPUTE, SWAP_AB)
                   + _mma(a3.to(COMPUTE), b3, _A16, DOT, COMPUTE, SWAP_AB))
    elif ONE_DOT:  # a0: the whole tile
        out = _mma(a0, _cat4(b0, b1, b2, b3), ACT, DOT, COMPUTE, SWAP_AB)
    else:
        out = (_mma(a0, b0, ACT, DOT, COMPUTE, SWAP_AB) + _mma(a1, b1, ACT, DOT, COMPUTE, SWAP_AB)
               + _mma(a2, b2, ACT, DOT, COMPUTE, SWAP_AB)
               + _mma(a3, b3, ACT, DOT, COMPUTE, SWAP_AB))
    return out


@triton.jit
def _plane_scale(s_rows, k, scale_cols, stride_sk, K, EVEN_K: tl.constexpr):
    """The scale bytes (or values) of every weight row for column k's scale block (a tile
    past K, which only a K_UNROLL step's last tiles are: the last block)."""
    col = k // scale_cols
    if not EVEN_K:
        col = tl.minimum(col, (K - 1) // scale_cols)
    return tl.load(s_rows + col * stride_sk)


@triton.jit
def _scale_word(s_rows, k0, stride_sk, K, EVEN_K: tl.constexpr, TILE_K: tl.constexpr):
    """SCALE_WORDS: the 32-bit word of every weight row for the span at k0, byte p the scale
    byte of plane p (one 4-byte load a row, which cp.async can stage, where four 1-byte
    loads cannot be; `layout.scale_words`)."""
    col = k0 // TILE_K
    if not EVEN_K:
        col = tl.minimum(col, (K - 1) // TILE_K)
    return tl.load((s_rows + col * stride_sk).to(tl.pointer_type(tl.int32), bitcast=True))


@triton.jit
def _scale_bf16_words(s_rows, k0, stride_sk, K, EVEN_K: tl.constexpr, TILE_K: tl.constexpr,
                      TWO: tl.constexpr):
    """SCALE_BF16: the span's scales of every weight row as stored at load
    (layout.scale_bf16: bf16 pairs, 4-byte words that cp.async stages): the first word (NVFP4
    planes 0 and 1; MXFP4 the blocks of planes 0-1 and 2-3) and, TWO (NVFP4), the second
    (planes 2 and 3); else the first again."""
    col = k0 // TILE_K
    if not EVEN_K:
        col = tl.minimum(col, (K - 1) // TILE_K)
    w = (s_rows + col * stride_sk).to(tl.pointer_type(tl.int32), bitcast=True)
    lo = tl.load(w)
    if TWO:
        hi = tl.load(w + 1)
    else:
        hi = lo
    return lo, hi


@triton.jit
def _bf16_value(w, HIGH: tl.constexpr):
    """The bf16 in the low (HIGH: high) half of each word as fp32: its bits are fp32's top
    half, so the value is exact, NaN and the subnormal 2^-127 included."""
    if HIGH:
        return (w & -65536).to(tl.float32, bitcast=True)
    else:
        return (w << 16).to(tl.float32, bitcast=True)


@triton.jit
def _scale_operand(s, w, HIGH: tl.constexpr, FOLD: tl.constexpr, SCALE_BF16: tl.constexpr,
                   COMPUTE: tl.constexpr):
    """A plane's scale as the PTX decode's operand, in the compute dtype: s (fp32), times
    2^(126 - LEAN_SHIFT) with FOLD; SCALE_BF16: the stored bf16 itself, half HIGH of word w
    (layout.scale_bf16 stored it folded where FOLD), no conversion in the loop."""
    if SCALE_BF16:
        if HIGH:
            h = (w >> 16).to(tl.int16)
        else:
            h = w.to(tl.int16)
        return h.to(tl.bfloat16, bitcast=True)
    elif FOLD:
        return (s * LEAN_FOLD).to(COMPUTE)
    else:
        return s.to(COMPUTE)


@triton.jit
def _fp4_planes_part(a0, a1, a2, a3, bq, k0, K, s_rows, scale_cols, stride_sk,
                     WSCALE: tl.constexpr, ACT: tl.constexpr, DOT: tl.constexpr,
                     COMPUTE: tl.constexpr, EVEN_K: tl.constexpr, SWAP_AB: tl.constexpr,
                     FAST_I4: tl.constexpr, TILE_K: tl.constexpr, SCALE_WORDS: tl.constexpr,
                     LEAN: tl.constexpr, CARRY: tl.constexpr, E4M3_CVT: tl.constexpr,
                     SCALE_BF16: tl.constexpr, ONE_DOT: tl.constexpr):
    """The scaled product of an e2m1 tile in four planes (`plane_nibbles`, FP4_SPAN columns:
    plane p is the tile's columns [k0 + p Q, k0 + (p + 1) Q), Q = TILE_K / 4, inside one
    scale block: `nib_span_fits`). S_E4M3 (NVFP4): each plane's values times its block scale
    before the dot, exact (module docstring). S_E8M0 (MXFP4): planes 0-1 and 2-3 each lie in
    one 32-column block, so each pair's fp32 partial sum takes its scale, as a 32-column
    tile's would. S_E8M0_W (MXFP4, bf16, `fused_moe.e8m0_folds`): the E8M0 scale multiplied
    into the plane's values before the dot as NVFP4's is, exact there (a power of two times
    an e2m1 value inside bf16's range), so the four products chain into one sum with no
    fp32 partial sums to scale. With FAST_I4 (PTX, CUDA sm80+) the planes decode straight
    into the compute dtype (`_fp4_planes`), else through fp32 bit patterns (`_decode_e2m1`).
    LEAN with S_E4M3 in bf16: the product times 2^-LEAN_SHIFT (the scale carries the
    decode's 2^126, one multiply per pair fewer; the epilogue restores it). Not fp16 (its
    range has no room for the fold) nor E8M0 scales (no fold fits every byte).
    CARRY (bf16 only): the words in the carried order (layout.carry_bits), decoded by
    `_fp4_carry*` or gathered into nibbles (`_nibble`); E4M3_CVT (host: CUDA sm89+): the
    e4m3 scales by the hardware conversion (`_e4m3_cvt`). The same values either way.
    SCALE_BF16: the scales decoded into bf16 at load (layout.scale_bf16; NVFP4 bf16 only,
    folded by 2^(126 - LEAN_SHIFT) where LEAN folds): loaded, not decoded; the same values."""
    tl.static_assert(not CARRY or COMPUTE == tl.bfloat16)
    tl.static_assert(not SCALE_BF16 or WSCALE != _S_E4M3 or COMPUTE == tl.bfloat16)
    Q: tl.constexpr = TILE_K // 4
    SCALED: tl.constexpr = WSCALE == _S_E4M3 or WSCALE == _S_E8M0 or WSCALE == _S_E8M0_W
    FOLD: tl.constexpr = LEAN and WSCALE == _S_E4M3 and COMPUTE == tl.bfloat16
    E4: tl.constexpr = WSCALE == _S_E4M3
    # SCALE_BF16: plane p's bf16 is half H<p> of word w_lo / w_hi (E8M0: planes 0-1 the low
    # half of the one word, 2-3 its high half; e4m3: one plane a half, two words)
    H1: tl.constexpr = E4
    H2: tl.constexpr = not E4
    if SCALED and SCALE_BF16:
        w_lo, w_hi = _scale_bf16_words(s_rows, k0, stride_sk, K, EVEN_K, TILE_K, E4)
    else:  # (placeholders: read only with SCALE_BF16)
        w_lo = k0
        w_hi = k0
    # the scale bytes of planes 0-3 (E8M0: planes 0-1 share a 32-column block, 2-3 the next)
    if SCALED and SCALE_WORDS and not SCALE_BF16:  # one word a row, byte p for plane p
        sw = _scale_word(s_rows, k0, stride_sk, K, EVEN_K, TILE_K)
        p0 = sw & 0xFF
        p1 = (sw >> 8) & 0xFF
        p2 = (sw >> 16) & 0xFF
        p3 = (sw >> 24) & 0xFF
    elif SCALED and not SCALE_BF16:
        p0 = _plane_scale(s_rows, k0, scale_cols, stride_sk, K, EVEN_K)
        p2 = _plane_scale(s_rows, k0 + 2 * Q, scale_cols, stride_sk, K, EVEN_K)
        if WSCALE == _S_E4M3:
            p1 = _plane_scale(s_rows, k0 + Q, scale_cols, stride_sk, K, EVEN_K)
            p3 = _plane_scale(s_rows, k0 + 3 * Q, scale_cols, stride_sk, K, EVEN_K)
        else:
            p1 = p0
            p3 = p2
    if WSCALE == _S_E4M3 or WSCALE == _S_E8M0_W:
        if SCALE_BF16:  # the stored values (fp32 for the bit-field decode; FOLD: unfolded)
            s0 = _bf16_value(w_lo, False)
            s1 = _bf16_value(w_lo, H1)
            s2 = _bf16_value(w_hi, H2)
            s3 = _bf16_value(w_hi, True)
            if FOLD:
                s0 = s0 * SCALE_UNFOLD
                s1 = s1 * SCALE_UNFOLD
                s2 = s2 * SCALE_UNFOLD
                s3 = s3 * SCALE_UNFOLD
        elif WSCALE == _S_E4M3 and E4M3_CVT:
            s0 = _e4m3_cvt(p0)
            s1 = _e4m3_cvt(p1)
            s2 = _e4m3_cvt(p2)
            s3 = _e4m3_cvt(p3)
        elif WSCALE == _S_E4M3:
            s0 = _decode_e4m3(p0)
            s1 = _decode_e4m3(p1)
            s2 = _decode_e4m3(p2)
            s3 = _decode_e4m3(p3)
        else:  # E8M0 folded
            s0 = _decode_e8m0(p0)
            s1 = s0
            s2 = _decode_e8m0(p2)
            s3 = s2
        if FAST_I4 == _I4_PAIRS:  # the PTX decode's operands (FOLD: folded, exact)
            o0 = tl.broadcast_to(_scale_operand(s0, w_lo, False, FOLD, SCALE_BF16, COMPUTE
                                                )[None, :], bq.shape)
            o1 = tl.broadcast_to(_scale_operand(s1, w_lo, H1, FOLD, SCALE_BF16, COMPUTE
                                                )[None, :], bq.shape)
            o2 = tl.broadcast_to(_scale_operand(s2, w_hi, H2, FOLD, SCALE_BF16, COMPUTE
                                                )[None, :], bq.shape)
            o3 = tl.broadcast_to(_scale_operand(s3, w_hi, True, FOLD, SCALE_BF16, COMPUTE
                                                )[None, :], bq.shape)
        if FOLD and FAST_I4 == _I4_PAIRS and CARRY:
            b0, b1, b2, b3 = _fp4_carry(bq, o0, o1, o2, o3, True)
        elif FOLD and FAST_I4 == _I4_PAIRS:
            b0, b1, b2, b3 = _fp4_planes_folded(bq, o0, o1, o2, o3)
        elif FOLD:  # the same values through fp32: e2m1 * scale * 2^-LEAN_SHIFT, exact
            raw = bq.to(tl.int32)
            b0 = _decode_e2m1(_nibble(raw, 0, _CE0, _CS0, CARRY)) * (s0 * LEAN_UNDO)[None, :]
            b1 = _decode_e2m1(_nibble(raw, 1, _CE1, _CS1, CARRY)) * (s1 * LEAN_UNDO)[None, :]
            b2 = _decode_e2m1(_nibble(raw, 2, _CE2, _CS2, CARRY)) * (s2 * LEAN_UNDO)[None, :]
            b3 = _decode_e2m1(_nibble(raw, 3, _CE3, _CS3, CARRY)) * (s3 * LEAN_UNDO)[None, :]
        elif FAST_I4 == _I4_PAIRS and CARRY:
            b0, b1, b2, b3 = _fp4_carry(bq, o0, o1, o2, o3, False)
        elif FAST_I4 == _I4_PAIRS:
            b0, b1, b2, b3 = _fp4_planes_scaled(bq, o0, o1, o2, o3, COMPUTE)
        else:
            raw = bq.to(tl.int32)
            b0 = _decode_e2m1(_nibble(raw, 0, _CE0, _CS0, CARRY)) * s0[None, :]
            b1 = _decode_e2m1(_nibble(raw, 1, _CE1, _CS1, CARRY)) * s1[None, :]
            b2 = _decode_e2m1(_nibble(raw, 2, _CE2, _CS2, CARRY)) * s2[None, :]
            b3 = _decode_e2m1(_nibble(raw, 3, _CE3, _CS3, CARRY)) * s3[None, :]
        if ONE_DOT:  # a0: the whole tile
            part = _mma(a0, _cat4(b0, b1, b2, b3), ACT, DOT, COMPUTE, SWAP_AB)
        else:
            part = (_mma(a0, b0, ACT, DOT, COMPUTE, SWAP_AB)
                    + _mma(a1, b1, ACT, DOT, COMPUTE, SWAP_AB)
                    + _mma(a2, b2, ACT, DOT, COMPUTE, SWAP_AB)
                    + _mma(a3, b3, ACT, DOT, COMPUTE, SWAP_AB))
    else:
        if FAST_I4 == _I4_PAIRS and CARRY:
            b0, b1, b2, b3 = _fp4_carry_plain(bq)
        elif FAST_I4 == _I4_PAIRS:
            b0, b1, b2, b3 = _fp4_planes(bq, COMPUTE)
        else:
            raw = bq.to(tl.int32)
            b0 = _decode_e2m1(_nibble(raw, 0, _CE0, _CS0, CARRY))
            b1 = _decode_e2m1(_nibble(raw, 1, _CE1, _CS1, CARRY))
            b2 = _decode_e2m1(_nibble(raw, 2, _CE2, _CS2, CARRY))
            b3 = _decode_e2m1(_nibble(raw, 3, _CE3, _CS3, CARRY))
        tl.static_assert(not ONE_DOT or WSCALE != _S_E8M0)  # (its halves scale apart)
        if ONE_DOT:  # a0: the whole tile
            lo = _mma(a0, _cat4(b0, b1, b2, b3), ACT, DOT, COMPUTE, SWAP_AB)
            hi = 0.0
        else:
            lo = (_mma(a0, b0, ACT, DOT, COMPUTE, SWAP_AB)
                  + _mma(a1, b1, ACT, DOT, COMPUTE, SWAP_AB))
            hi = (_mma(a2, b2, ACT, DOT, COMPUTE, SWAP_AB)
                  + _mma(a3, b3, ACT, DOT, COMPUTE, SWAP_AB))
        if WSCALE == _S_E8M0:
            if SCALE_BF16:  # E8M0 values in bf16: fp32 by a shift
                s_lo = _bf16_value(w_lo, False)
                s_hi = _bf16_value(w_lo, True)
            else:
                s_lo = _decode_e8m0(p0)
                s_hi = _decode_e8m0(p2)
            if SWAP_AB:
                part = lo * s_lo[:, None] + hi * s_hi[:, None]
            else:
                part = lo * s_lo[None, :] + hi * s_hi[None, :]
        else:  # S_FLOAT / S_NONE: the tile's scale after (_tile_part)
            part = lo + hi
    return part


@triton.jit
def _tile_part(a, a2, a3, a4, bq, k0, K, a_rows, row_mask, s_rows, z_rows, g_row, a_scale_ptr,
               scale_cols, stride_sk, stride_asm, WEIGHT: tl.constexpr, WSCALE: tl.constexpr,
               ACT: tl.constexpr, HAS_ZERO: tl.constexpr, SYM_ZERO: tl.constexpr,
               HAS_G_IDX: tl.constexpr, DOT: tl.constexpr, COMPUTE: tl.constexpr,
               EVEN_K: tl.constexpr, SWAP_AB: tl.constexpr, FAST_I4: tl.constexpr,
               NIB_SPAN: tl.constexpr, TILE_K: tl.constexpr, SCALE_WORDS: tl.constexpr,
               LEAN: tl.constexpr, CARRY: tl.constexpr, E4M3_CVT: tl.constexpr,
               SCALE_BF16: tl.constexpr, E8M0_NORMAL: tl.constexpr,
               E4M3_WORDS: tl.constexpr, ZERO_SUMS: tl.constexpr, ONE_DOT: tl.constexpr,
               a_sum):
    """The scaled fp32 product of one tile of TILE_K columns from k0, inside one scale
    column: a [BLOCK_M, TILE_K] activations (with NIB_SPAN: a, a2, a3, a4 the tile's four
    quarters, [BLOCK_M, TILE_K / 4] each), bq the weight tile as stored ([TILE_K / 2,
    BLOCK_N] bytes for nibble weights, [TILE_K / 4, BLOCK_N] 16-bit words with NIB_SPAN,
    else [TILE_K, BLOCK_N]); [BLOCK_N, BLOCK_M] with
    SWAP_AB (rows of the product are weight columns). A tile past K (zero activations) reads
    the last scale column, never past the scales. ZERO_SUMS (int4 planes with zero points,
    16-bit activations; s_rows point at scale words that carry the zero points): `a_sum`
    [BLOCK_M] is each row's sum of the tile's activations (fp32, the host's), 0 for a tile
    past the range's end."""
    if ACT == _A_FP8 or ACT == _A_FP8_G:
        # e4m3 codes passed as their bytes: `other=0` is +0.0 (the interpreter
        # cannot fill an fp8 load)
        a = a.to(tl.float8e4nv, bitcast=True)
        if NIB_SPAN:
            a2 = a2.to(tl.float8e4nv, bitcast=True)
            a3 = a3.to(tl.float8e4nv, bitcast=True)
            a4 = a4.to(tl.float8e4nv, bitcast=True)
    if WEIGHT == _W_INT4 or WEIGHT == _W_FP4:
        if NIB_SPAN and WEIGHT == _W_FP4:  # scales applied per plane inside
            tl.static_assert(NIB_SPAN == TILE_K)
            part = _fp4_planes_part(a, a2, a3, a4, bq, k0, K, s_rows, scale_cols, stride_sk,
                                    WSCALE, ACT, DOT, COMPUTE, EVEN_K, SWAP_AB, FAST_I4,
                                    TILE_K, SCALE_WORDS, LEAN, CARRY, E4M3_CVT, SCALE_BF16,
                                    ONE_DOT)
        elif NIB_SPAN:  # word j holds columns j + p * TILE_K / 4, p = 0..3 (`plane_nibbles`)
            tl.static_assert(NIB_SPAN == TILE_K and WEIGHT == _W_INT4)
            part = _planes_part(a, a2, a3, a4, bq, k0, K, s_rows, z_rows, g_row, scale_cols,
                                stride_sk, ACT, HAS_ZERO, SYM_ZERO, HAS_G_IDX, DOT, COMPUTE,
                                SWAP_AB, FAST_I4, TILE_K, ZERO_SUMS, ONE_DOT)
        else:
            part = _pairs_part(a, bq, k0, K, s_rows, z_rows, g_row, scale_cols, stride_sk,
                               WEIGHT, WSCALE, ACT, HAS_ZERO, SYM_ZERO, HAS_G_IDX, DOT,
                               COMPUTE, EVEN_K, SWAP_AB, FAST_I4, TILE_K)
    elif E4M3_WORDS:  # bq: [TILE_K / 2, BLOCK_N] words, columns 2j and 2j + 1 in word j
        a_even, a_odd = tl.split(tl.reshape(a, (a.shape[0], TILE_K // 2, 2)))
        b_even, b_odd = _e4m3_words(bq, COMPUTE)
        part = (_mma(a_even, b_even, ACT, DOT, COMPUTE, SWAP_AB)
                + _mma(a_odd, b_odd, ACT, DOT, COMPUTE, SWAP_AB))
    else:
        b = bq
        if WEIGHT == _W_UINT8:
            kk = k0 + tl.arange(0, TILE_K)
            b = _dequant(b.to(tl.int32), tl.minimum(kk, K - 1), k0, g_row, s_rows, z_rows,
                         scale_cols, stride_sk, HAS_G_IDX, HAS_ZERO, SYM_ZERO)
        part = _mma(a, b, ACT, DOT, COMPUTE, SWAP_AB)
    # tile scales (rows of `part` are weight columns when SWAP_AB)
    if ACT == _A_MX:
        sa = tl.load(a_scale_ptr + a_rows * stride_asm + k0 // 32, mask=row_mask, other=0)
        if SWAP_AB:
            part = part * _decode_e8m0(sa)[None, :]
        else:
            part = part * _decode_e8m0(sa)[:, None]
    elif ACT == _A_FP8_G:
        sa = tl.load(a_scale_ptr + a_rows * stride_asm + k0 // ACT_GROUP, mask=row_mask,
                     other=0.0)
        if SWAP_AB:
            part = part * sa[None, :]
        else:
            part = part * sa[:, None]
    col = k0 // scale_cols
    if not EVEN_K:
        col = tl.minimum(col, (K - 1) // scale_cols)
    FP4_PLANES: tl.constexpr = WEIGHT == _W_FP4 and NIB_SPAN != 0  # scaled per plane
    # int4 planes under ONE_DOT with 16-bit activations: scaled (zero points too) inside
    # the decode (`_planes_part`)
    I4_SCALED: tl.constexpr = WEIGHT == _W_INT4 and NIB_SPAN != 0 and ONE_DOT and ACT == _A16
    if I4_SCALED:
        pass
    elif ZERO_SUMS:
        # sum_k a_k (q_k - z) = sum_k a_k (q_k - SYM_ZERO) - (z - SYM_ZERO) sum_k a_k: the
        # zero points join after the dot, per weight column as the scales do, not inside the
        # decode, where the zero vector took a second load and a trip through shared memory
        # (a barrier) each K step: AWQ ran 14-17% behind gptq-int4 (round twelve). Each scale
        # word is the fp32 scale with the zero point in its 4 low mantissa bits, which a
        # 16-bit scale leaves zero (`fused_moe.zero_point_words`): one load, one layout trip
        word = tl.load(s_rows + col * stride_sk)
        # the word broadcast to the tile before it is taken apart, so that Triton converts
        # its layout once (taken apart first, the two halves took a layout trip each)
        if SWAP_AB:
            word = tl.broadcast_to(word[:, None], part.shape)
            sums = tl.broadcast_to(a_sum[None, :], part.shape)
        else:
            word = tl.broadcast_to(word[None, :], part.shape)
            sums = tl.broadcast_to(a_sum[:, None], part.shape)
        # zero - SYM_ZERO without an int-to-float conversion: the 4 bits ORed into 2^23's
        # mantissa spell 2^23 + zero exactly (`_int4_magic`'s trick in fp32)
        zc = ((word & 0xF) | 0x4B000000).to(tl.float32, bitcast=True) - (8388608.0 + SYM_ZERO)
        sw = (word & ~0xF).to(tl.float32, bitcast=True)
        part = (part - zc * sums) * sw
    elif (WSCALE == _S_FLOAT or WSCALE == _S_E8M0) and not FP4_PLANES:
        sw = tl.load(s_rows + col * stride_sk)
        if WSCALE == _S_E8M0:
            sw = _weight_e8m0(sw, E8M0_NORMAL)
        if SWAP_AB:
            part = part * sw[:, None]
        else:
            part = part * sw[None, :]
    return part


@triton.jit
def _k_range(a_base, a_mask, a_rows, row_mask, b_rows, s_rows, z_rows, g_row, a_scale_ptr,
             sum_rows, K, scale_cols, stride_sk, stride_asm, K_SPLIT, tma_e, tma_n,
             PHASE: tl.constexpr,
             WEIGHT: tl.constexpr,
             WSCALE: tl.constexpr, ACT: tl.constexpr, HAS_ZERO: tl.constexpr,
             SYM_ZERO: tl.constexpr, HAS_G_IDX: tl.constexpr, DOT: tl.constexpr,
             COMPUTE: tl.constexpr, EVEN_K: tl.constexpr, SWAP_AB: tl.constexpr,
             FAST_I4: tl.constexpr, K_UNROLL: tl.constexpr, WT_N: tl.constexpr,
             WT_K: tl.constexpr, NIB_SPAN: tl.constexpr, ACC_DOT: tl.constexpr,
             SCALE_WORDS: tl.constexpr, LEAN: tl.constexpr, CARRY: tl.constexpr,
             E4M3_CVT: tl.constexpr, SCALE_BF16: tl.constexpr, E8M0_NORMAL: tl.constexpr,
             E4M3_WORDS: tl.constexpr, ZERO_SUMS: tl.constexpr, ONE_DOT: tl.constexpr,
             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
             FP6_EXP: tl.constexpr, TMA_B: tl.constexpr):
    """The tile's fp32 sum [BLOCK_M, BLOCK_N] over all of K (FULL) or over split
    program_id(2)'s columns (PARTIAL: K_SPLIT a multiple of BLOCK_K, so the `multiple_of`
    hints hold): tile after tile in increasing k0, each tile's scales applied to its
    partial product before it joins the sum. K_UNROLL tiles per loop step (the host's
    EVEN_K: every step's tiles lie inside the range; otherwise a tile at or past its end
    loads zero activations and clamped weight rows, and adds an exact zero). With TMA_B,
    b_rows is the weights' descriptor and the tile is its block at (tma_e, 0, tma_n, k0)."""
    if PHASE == _PARTIAL:
        k_lo = tl.program_id(2) * K_SPLIT
        k_hi = tl.minimum(k_lo + K_SPLIT, K)
    else:
        k_lo = 0
        k_hi = K
    # with SWAP_AB the accumulator is the transposed tile [BLOCK_N, BLOCK_M] until the end
    if SWAP_AB:
        acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    NIBBLES: tl.constexpr = WEIGHT == _W_INT4 or WEIGHT == _W_FP4
    I4_SCALED: tl.constexpr = WEIGHT == _W_INT4 and NIB_SPAN != 0 and ONE_DOT and ACT == _A16
    Q4: tl.constexpr = BLOCK_K // 4  # columns of a plane (NIB_SPAN)
    # weight tile rows as stored: bytes, or 16-bit words (NIB_SPAN), per BLOCK_K columns
    BQ_K: tl.constexpr = Q4 if NIB_SPAN else BLOCK_K // 2 if NIBBLES or E4M3_WORDS else BLOCK_K
    WT_RUN: tl.constexpr = WT_K // 2 if NIB_SPAN else WT_K  # a tile row in those units
    RUN: tl.constexpr = min(BQ_K, WT_RUN) if WT_K else BQ_K  # contiguous stored units
    for k_step in range(k_lo, k_hi, BLOCK_K * K_UNROLL):
        for u in tl.static_range(K_UNROLL):
            k0 = k_step + u * BLOCK_K
            if FP6_EXP:  # (its part loads its activation columns itself)
                a = a_base
                a2 = a_base
                a3 = a_base
                a4 = a_base
            elif NIB_SPAN and ONE_DOT:  # the whole tile, one dot operand (a2-a4 unused)
                kk = tl.max_contiguous(tl.multiple_of(k0 + tl.arange(0, BLOCK_K), BLOCK_K),
                                       BLOCK_K)
                if EVEN_K:
                    a = tl.load(a_base + kk[None, :], mask=a_mask, other=0)
                else:
                    a = tl.load(a_base + kk[None, :], mask=a_mask & (kk < k_hi)[None, :],
                                other=0)
                a2 = a
                a3 = a
                a4 = a
            elif NIB_SPAN and LEAN and EVEN_K:  # every tile inside the range: rows masked only
                kk = tl.max_contiguous(tl.multiple_of(k0 + tl.arange(0, Q4), Q4), Q4)
                a = tl.load(a_base + kk[None, :], mask=a_mask, other=0)
                a2 = tl.load(a_base + (kk + Q4)[None, :], mask=a_mask, other=0)
                a3 = tl.load(a_base + (kk + 2 * Q4)[None, :], mask=a_mask, other=0)
                a4 = tl.load(a_base + (kk + 3 * Q4)[None, :], mask=a_mask, other=0)
            elif NIB_SPAN:  # the tile's quarters, each a dot operand as loaded
                kk = tl.max_contiguous(tl.multiple_of(k0 + tl.arange(0, Q4), Q4), Q4)
                a = tl.load(a_base + kk[None, :], mask=a_mask & (kk < k_hi)[None, :],
                            other=0)
                a2 = tl.load(a_base + (kk + Q4)[None, :],
                             mask=a_mask & (kk + Q4 < k_hi)[None, :], other=0)
                a3 = tl.load(a_base + (kk + 2 * Q4)[None, :],
                             mask=a_mask & (kk + 2 * Q4 < k_hi)[None, :], other=0)
                a4 = tl.load(a_base + (kk + 3 * Q4)[None, :],
                             mask=a_mask & (kk + 3 * Q4 < k_hi)[None, :], other=0)
            else:
                kk = tl.max_contiguous(tl.multiple_of(k0 + tl.arange(0, BLOCK_K), BLOCK_K),
                                       BLOCK_K)
                a = tl.load(a_base + kk[None, :], mask=a_mask & (kk < k_hi)[None, :], other=0)
                a2 = a
                a3 = a
                a4 = a
            # the weight tile in its stored units: bytes, or 16-bit words of four planes
            kq = k0 * BQ_K // BLOCK_K + tl.arange(0, BQ_K)
            if not EVEN_K:  # rows clamp into the matrix: finite values, times zero activations
                kq = tl.minimum(kq, (K - 1) * BQ_K // BLOCK_K)
            if WT_K != 0:  # tiled weights (describe_weights): WT_K stored columns per tile row
                kq = (kq // WT_RUN) * (WT_N * WT_RUN) + kq % WT_RUN
            if EVEN_K:  # (a clamped tile's offsets are neither aligned nor contiguous)
                kq = tl.max_contiguous(tl.multiple_of(kq, RUN), RUN)
            if TMA_B:  # one bulk copy [1, TMA_B, BLOCK_N / TMA_B, BLOCK_K]: the tile's rows
                bq = tl.trans(tl.reshape(b_rows.load([tma_e, 0, tma_n, k0]),
                                         (BLOCK_N, BLOCK_K)))
            elif FP6_EXP:  # a span's 3 Q4 / 2 words: its halves' nibbles, then their high
                # bits (layout.plane_fp6), all 16-bit
                span = k0 // BLOCK_K
                if not EVEN_K:
                    span = tl.minimum(span, (K - 1) // BLOCK_K)
                kw = tl.multiple_of(span * (3 * Q4 // 2), Q4 // 2) + tl.arange(0, Q4 // 2)
                kw = tl.max_contiguous(tl.multiple_of(kw, Q4 // 2), Q4 // 2)
                words = b_rows.to(tl.pointer_type(tl.uint16), bitcast=True)
                bq = tl.load(words + kw[:, None])
                bq_hi = tl.load(words + (kw + Q4 // 2)[:, None])
                bh = tl.load(words + (kw + Q4)[:, None])
            elif NIB_SPAN or E4M3_WORDS:
                bq = tl.load(b_rows.to(tl.pointer_type(tl.uint16), bitcast=True) + kq[:, None])
            else:
                bq = tl.load(b_rows + kq[:, None])
            if I4_SCALED:  # (`_tile_part`: the zero points join the decode, no sums)
                a_sum = 0.0
            elif ZERO_SUMS and EVEN_K:  # the rows' activation sums over this tile
                a_sum = tl.load(sum_rows + k0 // BLOCK_K)
            elif ZERO_SUMS:  # a tile at or past the range's end adds 0
                a_sum = tl.load(sum_rows + k0 // BLOCK_K, mask=k0 < k_hi, other=0.0)
            else:
                a_sum = 0.0
            if ACC_DOT:  # no tile scale: the dot accumulates (the scale, if any, at the end)
                if ACT == _A_FP8:
                    a = a.to(tl.float8e4nv, bitcast=True)
                acc = _dot_acc(a, bq, acc, ACT, DOT, COMPUTE, SWAP_AB)
            elif FP6_EXP:  # six-bit planes, the scales inside their decode
                acc += _fp6_planes_part(a_base, a_mask, k0, k_hi, K, bq, bq_hi, bh, s_rows,
                                        stride_sk, ACT, DOT, COMPUTE, EVEN_K, SWAP_AB, BLOCK_K,
                                        FP6_EXP)
            elif E4M3_WORDS == _E4M3_SCALED_WORDS:  # the scales inside the weights' decode
                acc += _e4m3_scaled_part(a, bq, k0, K, s_rows, stride_sk, ACT, DOT, COMPUTE,
                                         EVEN_K, SWAP_AB, BLOCK_K)
            else:
                acc += _tile_part(a, a2, a3, a4, bq, k0, K, a_rows, row_mask, s_rows, z_rows,
                                  g_row, a_scale_ptr, scale_cols, stride_sk, stride_asm, WEIGHT,
                                  WSCALE, ACT, HAS_ZERO, SYM_ZERO, HAS_G_IDX, DOT, COMPUTE,
                                  EVEN_K, SWAP_AB, FAST_I4, NIB_SPAN, BLOCK_K, SCALE_WORDS,
                                  LEAN, CARRY, E4M3_CVT, SCALE_BF16, E8M0_NORMAL,
                                  E4M3_WORDS, ZERO_SUMS, ONE_DOT, a_sum)
    if SWAP_AB:
        acc = tl.trans(acc)
    return acc


@triton.jit
def _sum_splits(ws_tile, ws_mask, num_splits, stride_ws, BLOCK_M: tl.constexpr,
                BLOCK_N: tl.constexpr):
    """The split-K partial tiles added in split order 0, 1, ... (a fixed order: every run
    gives the same bits)."""
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for _ in range(0, num_splits):
        acc += tl.load(ws_tile, mask=ws_mask, other=0.0)
        ws_tile += stride_ws  # pointer arithmetic is 64-bit: no int32 product to overflow
    return acc


@triton.jit
def _tile(
    row_ids, expert, pid_n,
    # pointers
    a_ptr, a_scale_ptr, a_gscale_ptr,
    b_ptr, b_scale_ptr, b_zero_ptr, g_idx_ptr, bias_ptr, b_gscale_ptr,
    c_ptr, router_ptr, ws_ptr,
    # dimensions
    N, K, num_rows, scale_rows, scale_cols, gscale_rows, num_splits, K_SPLIT,
    # strides (elements; the last dimension of every tensor is contiguous)
    stride_am, stride_asm, stride_be, stride_bn, stride_se, stride_sn, stride_sk, stride_ze,
    stride_zn,
    stride_ge, stride_biase, stride_gse, stride_cm, stride_ws,
    # meta-parameters
    PHASE: tl.constexpr,
    A_ROW_DIV: tl.constexpr, WEIGHT: tl.constexpr, WSCALE: tl.constexpr, ACT: tl.constexpr,
    HAS_ZERO: tl.constexpr, SYM_ZERO: tl.constexpr, HAS_G_IDX: tl.constexpr,
    HAS_BIAS: tl.constexpr, HAS_GSCALE: tl.constexpr, HAS_WGSCALE: tl.constexpr,
    MUL_ROUTER: tl.constexpr,
    DOT: tl.constexpr, COMPUTE: tl.constexpr, FIX_BF16: tl.constexpr,
    EVEN_K: tl.constexpr, EVEN_N: tl.constexpr, SWAP_AB: tl.constexpr, FAST_I4: tl.constexpr,
    K_UNROLL: tl.constexpr, WT_N: tl.constexpr, WT_K: tl.constexpr, NIB_SPAN: tl.constexpr,
    ACC_DOT: tl.constexpr, SCALE_WORDS: tl.constexpr,
    LEAN: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    CARRY: tl.constexpr, E4M3_CVT: tl.constexpr,
    SCALE_BF16: tl.constexpr,
    EPI_ACT: tl.constexpr, ALPHA: tl.constexpr, LIMIT: tl.constexpr,
    PAIR_ADJACENT: tl.constexpr, SCALE_RUNS: tl.constexpr,
    SCALE_COLS: tl.constexpr, E8M0_NORMAL: tl.constexpr,
    E4M3_WORDS: tl.constexpr, ZERO_SUMS: tl.constexpr, ONE_DOT: tl.constexpr,
    FP6_EXP: tl.constexpr, TMA_B: tl.constexpr,
):
    """The tile of the rows `row_ids` (BLOCK_M of them: the kernel's row block, or with
    TAIL_M the part of an expert's last block that holds rows) and the column block pid_n
    of `expert`'s weights: the pointers, the sum over K, the write-back."""
    # --- pointers ---------------------------------------------------------------------------
    row_mask = row_ids < num_rows
    a_rows = (row_ids // A_ROW_DIV).to(tl.int64)
    # EPI_ACT on gate / up halves (w1 rows, then w3 rows): the tile holds gate rows
    # `pair` and the same up rows, so the epilogue holds both: the first BLOCK_N / 2 columns
    # gate, the rest up (runs of rows as stored), or PAIR_ADJACENT column 2i gate, 2i + 1 up
    # (gpt-oss's interleaved rows are in that order as stored)
    HALVES: tl.constexpr = (EPI_ACT == _HALF_ACT0 or EPI_ACT == _HALF_ACT1
                            or EPI_ACT == _HALF_ACT2)
    if HALVES:
        half = N // 2
        cols = tl.arange(0, BLOCK_N)
        if PAIR_ADJACENT:
            pair = pid_n * (BLOCK_N // 2) + cols // 2
            up_rows = (cols % 2) * half
        else:
            pair = pid_n * (BLOCK_N // 2) + cols % (BLOCK_N // 2)
            up_rows = (cols // (BLOCK_N // 2)) * half
        offs_n = pair + up_rows
        n_mask = pair < half
        if EVEN_N:
            offs_bn = offs_n.to(tl.int64)
        else:  # the clamp below, within each half
            offs_bn = (tl.minimum(pair, half - 1) + up_rows).to(tl.int64)
    else:
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        n_mask = offs_n < N
        if EVEN_N:
            offs_bn = offs_n.to(tl.int64)
        else:
            # weight rows clamp into the matrix instead of masking: every weight load reads
            # real (finite) values and columns past N are dropped at the store
            offs_bn = tl.minimum(offs_n, N - 1).to(tl.int64)
    a_base = a_ptr + a_rows[:, None] * stride_am
    a_mask = row_mask[:, None]
    tma_n = 0
    if TMA_B:  # the descriptor; the tile's first row within each of its TMA_B runs
        b_rows = b_ptr
        tma_n = pid_n * (BLOCK_N // TMA_B)
    elif WT_K == 0:
        b_rows = b_ptr + expert * stride_be + offs_bn[None, :] * stride_bn
    else:  # stride_bn steps one tile of WT_N rows
        b_rows = (b_ptr + expert * stride_be + (offs_bn // WT_N)[None, :] * stride_bn
                  + (offs_bn % WT_N)[None, :] * WT_K)
    if SCALE_RUNS:
        # (the host's: halves, EVEN_N, scale_rows a multiple of BLOCK_N / 2) each half's
        # run of rows lies in one block of scale rows: its first row's, constant over the
        # run. The rows' own quotient is the same value, but Triton's axis analysis finds it
        # constant only over a row index contiguous across the whole tile, which the halves
        # are not: every thread then loaded all its columns' scales each K step (fp8-w8a8's
        # 128-row tile: 279 -> 345 SASS instructions a step, 10% slower; docs/speed.md,
        # round ten)
        s_index = (pid_n * (BLOCK_N // 2) + up_rows) // scale_rows
    else:
        s_index = offs_bn // scale_rows
    s_rows = b_scale_ptr + expert * stride_se + s_index.to(tl.int64) * stride_sn
    z_rows = b_zero_ptr + expert * stride_ze + offs_bn * stride_zn
    g_row = g_idx_ptr + expert * stride_ge
    if ZERO_SUMS:
        # each row's activation sums per tile (the host's [rows, K / BLOCK_K] fp32, in the
        # activation-scale slot); padding rows read a real row's, unmasked: never stored
        sum_rows = a_scale_ptr + (tl.minimum(row_ids, num_rows - 1)
                                  // A_ROW_DIV).to(tl.int64) * stride_asm
    else:
        sum_rows = a_scale_ptr

    # split-K workspace [splits, num_rows, N]: this tile's place in split 0 (c's rows)
    ws_tile = ws_ptr + row_ids.to(tl.int64)[:, None] * N + offs_n[None, :]
    ws_mask = row_mask[:, None] & n_mask[None, :]

    # --- the sum over K -----------------------------------------------------------------------
    if SCALE_COLS:
        # (the host's: scale_cols, a power of two) a constant: every `k // scale_cols` in
        # the K loop is then a shift, not a division by a runtime value (about 15 SASS
        # instructions a step: docs/speed.md, round eleven)
        scale_cols = SCALE_COLS
    if PHASE == _REDUCE:
        acc = _sum_splits(ws_tile, ws_mask, num_splits, stride_ws, BLOCK_M, BLOCK_N)
    else:
        acc = _k_range(
            a_base, a_mask, a_rows, row_mask, b_rows, s_rows, z_rows, g_row, a_scale_ptr,
            sum_rows, K, scale_cols, stride_sk, stride_asm, K_SPLIT, expert.to(tl.int32), tma_n,
            PHASE, WEIGHT, WSCALE, ACT,
            HAS_ZERO, SYM_ZERO, HAS_G_IDX, DOT, COMPUTE, EVEN_K, SWAP_AB, FAST_I4, K_UNROLL, WT_N,
            WT_K, NIB_SPAN, ACC_DOT, SCALE_WORDS, LEAN, CARRY, E4M3_CVT, SCALE_BF16, E8M0_NORMAL,
            E4M3_WORDS, ZERO_SUMS, ONE_DOT, BLOCK_M, BLOCK_N, BLOCK_K, FP6_EXP, TMA_B)
    # --- write-back: the split's partial tile, or the epilogue (FULL and REDUCE) -------------
    # (an else, not a return inside the constexpr branch: Triton versions have differed on
    # code that follows a nested return)
    if PHASE == _PARTIAL:
        tl.store(ws_tile + tl.program_id(2).to(tl.int64) * stride_ws, acc, mask=ws_mask)
    else:
        if (WEIGHT == _W_FP4 and NIB_SPAN and LEAN and WSCALE == _S_E4M3
                and COMPUTE == tl.bfloat16):  # the products' 2^-LEAN_SHIFT, first (exact)
            acc = acc * LEAN_REDO
        if ACC_DOT and (WSCALE == _S_FLOAT):  # one weight scale column: applied once here
            acc = acc * tl.load(s_rows)[None, :]
        if ACT == _A_INT8 or ACT == _A_FP8:
            sa = tl.load(a_scale_ptr + a_rows, mask=row_mask, other=0.0)
            if HAS_GSCALE:
                sa = sa * tl.load(a_gscale_ptr)
            acc = acc * sa[:, None]
        elif HAS_GSCALE:
            acc = acc * tl.load(a_gscale_ptr)
        if HAS_WGSCALE:
            gw = tl.load(b_gscale_ptr + expert * stride_gse + offs_bn // gscale_rows)
            acc = acc * gw[None, :]
        if HAS_BIAS:
            bias = tl.load(bias_ptr + expert * stride_biase + offs_n, mask=n_mask, other=0.0)
            acc = acc + bias[None, :]
        if MUL_ROUTER:
            r = tl.load(router_ptr + row_ids, mask=row_mask, other=0.0)
            acc = acc * r[:, None]
        offs_c = offs_n
        c_mask = ws_mask
        if EPI_ACT >= 0:
            # h as the unfused GEMM1 stores it (rounded to c's dtype), then the activation
            # kernel's own math on it: the same bits, with no h in memory
            if FIX_BF16:
                acc = rne_bf16(acc)
            acc = acc.to(c_ptr.dtype.element_ty).to(tl.float32)
            if EPI_ACT == RELU2:  # no gate, one output column per tile column
                acc = act_values(acc, acc, EPI_ACT, ALPHA, LIMIT)
            else:
                if HALVES and not PAIR_ADJACENT:  # [gate | up] -> pairs
                    acc = tl.permute(tl.reshape(acc, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1))
                else:
                    acc = tl.reshape(acc, (BLOCK_M, BLOCK_N // 2, 2))
                gate, up = tl.split(acc)
                acc = act_values(gate, up, EPI_ACT, ALPHA, LIMIT)
                offs_c = pid_n * (BLOCK_N // 2) + tl.arange(0, BLOCK_N // 2)
                c_mask = row_mask[:, None] & (offs_c < N // 2)[None, :]
        if FIX_BF16:
            acc = rne_bf16(acc)
        c_ptrs = c_ptr + row_ids.to(tl.int64)[:, None] * stride_cm + offs_c[None, :]
        tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=c_mask)


@triton.jit
def moe_gemm_kernel(
    # pointers
    a_ptr, a_scale_ptr, a_gscale_ptr,
    b_ptr, b_scale_ptr, b_zero_ptr, g_idx_ptr, bias_ptr, b_gscale_ptr,
    c_ptr, sorted_ids_ptr, block_expert_ptr, num_padded_ptr, router_ptr, ws_ptr,
    # dimensions
    N, K, num_rows, scale_rows, scale_cols, gscale_rows, num_splits, K_SPLIT,
    # strides (elements; the last dimension of every tensor is contiguous)
    stride_am, stride_asm, stride_be, stride_bn, stride_se, stride_sn, stride_sk, stride_ze,
    stride_zn,
    stride_ge, stride_biase, stride_gse, stride_cm, stride_ws,
    # meta-parameters
    PHASE: tl.constexpr,
    A_ROW_DIV: tl.constexpr, WEIGHT: tl.constexpr, WSCALE: tl.constexpr, ACT: tl.constexpr,
    HAS_ZERO: tl.constexpr, SYM_ZERO: tl.constexpr, HAS_G_IDX: tl.constexpr,
    HAS_BIAS: tl.constexpr, HAS_GSCALE: tl.constexpr, HAS_WGSCALE: tl.constexpr,
    MUL_ROUTER: tl.constexpr,
    DOT: tl.constexpr, COMPUTE: tl.constexpr, FIX_BF16: tl.constexpr,
    EVEN_K: tl.constexpr, EVEN_N: tl.constexpr, SWAP_AB: tl.constexpr, FAST_I4: tl.constexpr,
    K_UNROLL: tl.constexpr, WT_N: tl.constexpr, WT_K: tl.constexpr, NIB_SPAN: tl.constexpr,
    ACC_DOT: tl.constexpr, GROUP_M: tl.constexpr, SCALE_WORDS: tl.constexpr,
    LEAN: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    CARRY: tl.constexpr = False, E4M3_CVT: tl.constexpr = False,
    SCALE_BF16: tl.constexpr = False,
    EPI_ACT: tl.constexpr = -1, ALPHA: tl.constexpr = 0.0, LIMIT: tl.constexpr = 0.0,
    PAIR_ADJACENT: tl.constexpr = False, SCALE_RUNS: tl.constexpr = False,
    SCALE_COLS: tl.constexpr = 0, E8M0_NORMAL: tl.constexpr = False,
    E4M3_WORDS: tl.constexpr = E4M3_BYTES, ZERO_SUMS: tl.constexpr = False,
    FP6_EXP: tl.constexpr = 0, TAIL_M: tl.constexpr = 0, ONE_DOT: tl.constexpr = False,
    TMA_B: tl.constexpr = 0,
):
    # --- program ids: one (row block, column block) tile; PARTIAL: axis 2 is the split ----
    # row blocks run fastest: the row blocks of one expert read the same weight tile at
    # about the same time, so it comes from DRAM once and from L2 after
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    if GROUP_M > 1:
        # GROUP_M row blocks at a time, all column blocks, in launch order: the programs
        # of a wave share a few row blocks' activations (from L2) instead of streaming
        # every row block once per column block (prefill: the activations outgrow the L2)
        num_m = tl.num_programs(0)
        width = GROUP_M * tl.num_programs(1)
        pid = pid_m + pid_n * num_m
        first = (pid // width) * GROUP_M
        size = tl.minimum(num_m - first, GROUP_M)
        pid_m = first + (pid % width) % size
        pid_n = (pid % width) // size
    # the three loads side by side, before the test that needs one of them (one memory
    # round trip instead of two before the K loop can start); a block past num_padded reads
    # unwritten entries of the buffers and returns before using them
    num_padded = tl.load(num_padded_ptr)
    first_row = pid_m * BLOCK_M
    expert = tl.load(block_expert_ptr + pid_m).to(tl.int64)
    row_ids = tl.load(sorted_ids_ptr + first_row + tl.arange(0, BLOCK_M))
    if first_row >= num_padded:
        return
    if TAIL_M == 0:
        _tile(row_ids, expert, pid_n, a_ptr, a_scale_ptr, a_gscale_ptr, b_ptr, b_scale_ptr,
              b_zero_ptr, g_idx_ptr, bias_ptr, b_gscale_ptr, c_ptr, router_ptr, ws_ptr, N, K,
              num_rows, scale_rows, scale_cols, gscale_rows, num_splits, K_SPLIT, stride_am,
              stride_asm, stride_be, stride_bn, stride_se, stride_sn, stride_sk, stride_ze,
              stride_zn, stride_ge, stride_biase, stride_gse, stride_cm, stride_ws, PHASE,
              A_ROW_DIV, WEIGHT, WSCALE, ACT, HAS_ZERO, SYM_ZERO, HAS_G_IDX, HAS_BIAS, HAS_GSCALE,
              HAS_WGSCALE, MUL_ROUTER, DOT, COMPUTE, FIX_BF16, EVEN_K, EVEN_N, SWAP_AB, FAST_I4,
              K_UNROLL, WT_N, WT_K, NIB_SPAN, ACC_DOT, SCALE_WORDS, LEAN, BLOCK_M, BLOCK_N,
              BLOCK_K, CARRY, E4M3_CVT, SCALE_BF16, EPI_ACT, ALPHA, LIMIT, PAIR_ADJACENT,
              SCALE_RUNS, SCALE_COLS, E8M0_NORMAL, E4M3_WORDS, ZERO_SUMS, ONE_DOT, FP6_EXP,
              TMA_B)
    else:
        # TAIL_M (the host's: BLOCK_M / 2 or / 4): an expert's last block holds the rest of
        # its rows, then the sentinel; its MMAs run on the smallest of BLOCK_M, BLOCK_M / 2
        # ... TAIL_M rows that holds them, not on the padding (the prefill tile's 128 rows
        # padded a Mixtral-8x7B expert's 256 +- 15 rows at M 1024 to 384 half the time:
        # docs/speed.md, round sixteen)
        live = tl.sum((row_ids < num_rows).to(tl.int32))
        # (BLOCK_M >> level, not a named constexpr: a static_range body may not rebind one)
        for level in tl.static_range(3):
            if (BLOCK_M >> level) >= TAIL_M:
                if (BLOCK_M >> level) // 2 >= TAIL_M:  # this level, or a smaller one
                    here = (live > (BLOCK_M >> level) // 2) & (live <= (BLOCK_M >> level))
                else:  # the smallest
                    here = live <= (BLOCK_M >> level)
                if here:  # (the rows loaded in the call: a name may not change shape)
                    _tile(tl.load(sorted_ids_ptr + first_row + tl.arange(0, BLOCK_M >> level)),
                          expert, pid_n, a_ptr, a_scale_ptr, a_gscale_ptr, b_ptr,
                          b_scale_ptr, b_zero_ptr, g_idx_ptr, bias_ptr, b_gscale_ptr, c_ptr,
                          router_ptr, ws_ptr, N, K, num_rows, scale_rows, scale_cols, gscale_rows,
                          num_splits, K_SPLIT, stride_am, stride_asm, stride_be, stride_bn,
                          stride_se, stride_sn, stride_sk, stride_ze, stride_zn, stride_ge,
                          stride_biase, stride_gse, stride_cm, stride_ws, PHASE, A_ROW_DIV, WEIGHT,
                          WSCALE, ACT, HAS_ZERO, SYM_ZERO, HAS_G_IDX, HAS_BIAS, HAS_GSCALE,
                          HAS_WGSCALE, MUL_ROUTER, DOT, COMPUTE, FIX_BF16, EVEN_K, EVEN_N, SWAP_AB,
                          FAST_I4, K_UNROLL, WT_N, WT_K, NIB_SPAN, ACC_DOT, SCALE_WORDS, LEAN,
                          BLOCK_M >> level, BLOCK_N, BLOCK_K, CARRY, E4M3_CVT, SCALE_BF16, EPI_ACT,
                          ALPHA, LIMIT, PAIR_ADJACENT, SCALE_RUNS, SCALE_COLS, E8M0_NORMAL,
                          E4M3_WORDS, ZERO_SUMS, ONE_DOT, FP6_EXP, TMA_B)

