"""E2M1 weights (MXFP4, NVFP4) dequantized to the compute dtype per call: the prefill path of
the Triton backend (heuristics.dequantizes says when). At prefill sizes the fused kernel's
FP4 tile runs at 16-24% of the bf16 GEMM rate on an H200 where the W16 prefill tile runs at
57-65% (docs/speed.md, issue 44): the decode sits inside the MMA loop. So above the
threshold each linear is decoded once into a workspace [E, N, K] of the compute dtype and
the same grouped GEMM runs its W16 tile on it; the workspace is reused by both linears
(GEMM1 has finished reading it when w2 is written over it: one stream).

Exactness: the decoded weight is the e2m1 value times its block scale, exactly representable
in the compute dtype where `exact_in` says so (NVFP4: <= 6 significant bits inside fp16's and
bf16's normal range, gemm_kernel's S_E4M3 note; MXFP4 in bf16 where every E8M0 byte folds,
fused_moe.e8m0_folds), so the GEMM multiplies the fused kernel's own products and only the
fp32 summation order differs (as between two tile configs). NVFP4's global multiplier stays
in the epilogue in fp32, as in the fused kernel. Nothing else takes this path.

The decode is the fused kernel's own (gemm_kernel's `_fp4_planes_scaled` in PTX on CUDA
sm80+, else its bit-field `_decode_e2m1` / `_decode_e4m3` / `_decode_e8m0`), reading the
weights in the layout the backend stores (`plane_nibbles` over FP4_SPAN columns, tiled
FP4_TILE where it divides): word j of a span holds columns j + p * SPAN / 4 in nibble p,
or, CARRY, plane p's bits where `layout.carry_bits` puts them (`_fp4_carry`, `_nibble`); the
scales as bytes, words or, SCALE_BF16, the bf16 values stored at load (layout.scale_bf16).

Int4 in nibble planes (GPTQ, AWQ and the other W4A16 layers the device's tuned file stores
in planes; issue 44, round nineteen) takes the same dispatch with the decode of the fused
kernel's one-dot tile (`gemm_kernel.int4_planes_rounded`): each weight (q - zero) * s with
s rounded to the compute dtype and the product rounded once, as Marlin's decode and the
tolerance table's error model (2) have it. That one is not exact: `rounds` says so, and
`backend_detail` declares it.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .gemm_kernel import (
    _CE0,
    _CE1,
    _CE2,
    _CE3,
    _CS0,
    _CS1,
    _CS2,
    _CS3,
    _decode_e2m1,
    _decode_e4m3,
    _decode_e8m0,
    _fp4_carry,
    _fp4_planes_scaled,
    _nibble,
    int4_planes_rounded,
)
from .kinds import I4_OFF, I4_PAIRS, S_E4M3, S_E8M0, S_FLOAT, W16, W_FP4, W_INT4
from .layout import FP4_SPAN

_S_E4M3 = tl.constexpr(S_E4M3)
# rows of one program's tile and spans it decodes: 64 rows x 4 spans = 8 KiB of codes in,
# 32 KiB of bf16 out (a streaming kernel: any tile that fills the GPU is as good; not tuned)
BLOCK_N = 64
SPANS = 4


@triton.jit
def _plane_scales(s_rows, k, scale_cols, stride_sk, WSCALE: tl.constexpr,
                  SCALE_WORDS: tl.constexpr, SPAN: tl.constexpr, SCALE_BF16: tl.constexpr,
                  SCALE_UNDO: tl.constexpr):
    """Every row's scale of the plane at column k (a byte per block, or byte p of the
    span's word: layout.scale_words), fp32; SCALE_BF16: the bf16 stored at load for the
    plane's block (layout.scale_bf16, its fold taken back off by SCALE_UNDO, exact)."""
    if SCALE_BF16:
        block = (k % SPAN) // scale_cols  # the span's block j: half j of the bf16 run
        return tl.load(s_rows + (k // SPAN) * stride_sk + block).to(tl.float32) * SCALE_UNDO
    if SCALE_WORDS:
        word = tl.load((s_rows + (k // SPAN) * stride_sk).to(tl.pointer_type(tl.int32),
                                                               bitcast=True))
        b = (word >> (8 * ((k % SPAN) // (SPAN // 4)))) & 0xFF
    else:
        b = tl.load(s_rows + (k // scale_cols) * stride_sk)
    if WSCALE == _S_E4M3:
        return _decode_e4m3(b)
    return _decode_e8m0(b)


@triton.jit
def fp4_dequant_kernel(q_ptr, s_ptr, out_ptr, N, num_spans, scale_rows, scale_cols,
                       stride_qe, stride_qn, stride_se, stride_sn, stride_sk, stride_oe,
                       stride_on, WSCALE: tl.constexpr, COMPUTE: tl.constexpr,
                       FAST: tl.constexpr, WT_N: tl.constexpr, WT_K: tl.constexpr,
                       SCALE_WORDS: tl.constexpr, SPAN: tl.constexpr, SPANS: tl.constexpr,
                       BLOCK_N: tl.constexpr, CARRY: tl.constexpr,
                       SCALE_BF16: tl.constexpr = False, SCALE_UNDO: tl.constexpr = 1.0):
    """out[e, n, k] = e2m1(code) * scale for rows [pid0 * BLOCK_N, +BLOCK_N) of expert pid2
    and spans [pid1 * SPANS, +SPANS) (the last program's extra spans masked)."""
    Q: tl.constexpr = SPAN // 4  # columns of a plane = words of a span per row
    e = tl.program_id(2).to(tl.int64)
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    n_mask = offs_n < N
    rows = tl.minimum(offs_n, N - 1).to(tl.int64)
    if WT_K == 0:  # [E, N, K / 2] bytes
        q_rows = q_ptr + e * stride_qe + rows * stride_qn
    else:  # tiles [E, N / WT_N, K / 2 / WT_K, WT_N, WT_K]: stride_qn steps a tile row block
        q_rows = q_ptr + e * stride_qe + (rows // WT_N) * stride_qn + (rows % WT_N) * WT_K
    words = q_rows.to(tl.pointer_type(tl.uint16), bitcast=True)
    s_rows = s_ptr + e * stride_se + (rows // scale_rows) * stride_sn
    o_rows = out_ptr + e * stride_oe + rows * stride_on
    j = tl.arange(0, Q)
    for i in tl.static_range(SPANS):
        span = tl.program_id(1) * SPANS + i
        mask = n_mask[:, None] & (span * Q + j < num_spans * Q)[None, :]
        span = tl.minimum(span, num_spans - 1)  # a masked span reads the last one's scales
        k0 = span * SPAN
        w = span * Q + j  # the row's words
        if WT_K != 0:  # WT_K / 2 words per tile row, WT_N tile rows per tile
            w = w // (WT_K // 2) * (WT_N * (WT_K // 2)) + w % (WT_K // 2)
        bq = tl.load(words[:, None] + w[None, :], mask=mask, other=0)
        s0 = _plane_scales(s_rows, k0, scale_cols, stride_sk, WSCALE, SCALE_WORDS,
                           SPAN, SCALE_BF16, SCALE_UNDO)
        s1 = _plane_scales(s_rows, k0 + Q, scale_cols, stride_sk, WSCALE, SCALE_WORDS,
                           SPAN, SCALE_BF16, SCALE_UNDO)
        s2 = _plane_scales(s_rows, k0 + 2 * Q, scale_cols, stride_sk, WSCALE, SCALE_WORDS,
                           SPAN, SCALE_BF16, SCALE_UNDO)
        s3 = _plane_scales(s_rows, k0 + 3 * Q, scale_cols, stride_sk, WSCALE, SCALE_WORDS,
                           SPAN, SCALE_BF16, SCALE_UNDO)
        if FAST and CARRY:
            b0, b1, b2, b3 = _fp4_carry(
                bq, tl.broadcast_to(s0.to(COMPUTE)[:, None], bq.shape),
                tl.broadcast_to(s1.to(COMPUTE)[:, None], bq.shape),
                tl.broadcast_to(s2.to(COMPUTE)[:, None], bq.shape),
                tl.broadcast_to(s3.to(COMPUTE)[:, None], bq.shape), False)
        elif FAST:
            b0, b1, b2, b3 = _fp4_planes_scaled(
                bq, tl.broadcast_to(s0.to(COMPUTE)[:, None], bq.shape),
                tl.broadcast_to(s1.to(COMPUTE)[:, None], bq.shape),
                tl.broadcast_to(s2.to(COMPUTE)[:, None], bq.shape),
                tl.broadcast_to(s3.to(COMPUTE)[:, None], bq.shape), COMPUTE)
        else:
            raw = bq.to(tl.int32)
            b0 = (_decode_e2m1(_nibble(raw, 0, _CE0, _CS0, CARRY)) * s0[:, None]).to(COMPUTE)
            b1 = (_decode_e2m1(_nibble(raw, 1, _CE1, _CS1, CARRY)) * s1[:, None]).to(COMPUTE)
            b2 = (_decode_e2m1(_nibble(raw, 2, _CE2, _CS2, CARRY)) * s2[:, None]).to(COMPUTE)
            b3 = (_decode_e2m1(_nibble(raw, 3, _CE3, _CS3, CARRY)) * s3[:, None]).to(COMPUTE)
        cols = k0 + j
        tl.store(o_rows[:, None] + cols[None, :], b0, mask=mask)
        tl.store(o_rows[:, None] + (cols + Q)[None, :], b1, mask=mask)
        tl.store(o_rows[:, None] + (cols + 2 * Q)[None, :], b2, mask=mask)
        tl.store(o_rows[:, None] + (cols + 3 * Q)[None, :], b3, mask=mask)


@triton.jit
def int4_dequant_kernel(q_ptr, s_ptr, z_ptr, out_ptr, N, num_spans, scale_rows, scale_cols,
                        stride_qe, stride_qn, stride_se, stride_sn, stride_sk, stride_ze,
                        stride_zn, stride_oe, stride_on, HAS_ZERO: tl.constexpr,
                        SYM_ZERO: tl.constexpr, COMPUTE: tl.constexpr, FAST_I4: tl.constexpr,
                        WT_N: tl.constexpr, WT_K: tl.constexpr, SPAN: tl.constexpr,
                        SPANS: tl.constexpr, BLOCK_N: tl.constexpr):
    """out[e, n, k] = (code - zero) * scale rounded to the compute dtype (the one-dot tile's
    decode) for rows [pid0 * BLOCK_N, +BLOCK_N) of expert pid2 and spans [pid1 * SPANS,
    +SPANS), the last program's extra spans masked. Tiles are [span words, rows], as the
    fused kernel holds them (each span inside one scale group: layout.nib_span_fits)."""
    Q: tl.constexpr = SPAN // 4  # columns of a plane = words of a span per row
    e = tl.program_id(2).to(tl.int64)
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    n_mask = offs_n < N
    rows = tl.minimum(offs_n, N - 1).to(tl.int64)
    # tiles [E, N / WT_N, K / 2 / WT_K, WT_N, WT_K] (int4 planes are stored tiled only):
    # stride_qn steps a tile row block
    q_rows = q_ptr + e * stride_qe + (rows // WT_N) * stride_qn + (rows % WT_N) * WT_K
    words = q_rows.to(tl.pointer_type(tl.uint16), bitcast=True)
    s_rows = s_ptr + e * stride_se + (rows // scale_rows) * stride_sn
    z_rows = z_ptr + e * stride_ze + rows * stride_zn
    o_rows = out_ptr + e * stride_oe + rows * stride_on
    j = tl.arange(0, Q)
    for i in tl.static_range(SPANS):
        span = tl.program_id(1) * SPANS + i
        mask = (span * Q + j < num_spans * Q)[:, None] & n_mask[None, :]
        span = tl.minimum(span, num_spans - 1)  # a masked span reads the last one's scales
        k0 = span * SPAN
        w = span * Q + j  # the row's words: WT_K / 2 per tile row, WT_N tile rows per tile
        w = w // (WT_K // 2) * (WT_N * (WT_K // 2)) + w % (WT_K // 2)
        bq = tl.load(words[None, :] + w[:, None], mask=mask, other=0)
        col = k0 // scale_cols
        s = tl.load(s_rows + col * stride_sk)
        z = col  # (a placeholder without zero points)
        if HAS_ZERO:
            z = tl.load(z_rows + col).to(tl.int32)
        b0, b1, b2, b3 = int4_planes_rounded(bq, s, z, HAS_ZERO, SYM_ZERO, FAST_I4, COMPUTE)
        cols = k0 + j
        tl.store(o_rows[None, :] + cols[:, None], b0, mask=mask)
        tl.store(o_rows[None, :] + (cols + Q)[:, None], b1, mask=mask)
        tl.store(o_rows[None, :] + (cols + 2 * Q)[:, None], b2, mask=mask)
        tl.store(o_rows[None, :] + (cols + 3 * Q)[:, None], b3, mask=mask)


def int4_planes_in(weights: dict) -> bool:
    """Whether linear `weights` (describe_weights) is int4 in nibble planes (tiled, as the
    backend stores them) with one float scale per group (no act order) and a 16-bit compute
    dtype: the codes the one-dot decode reads (`int4_dequant_kernel`)."""
    c = weights["constexprs"]
    return (weights["kind"] == W_INT4 and bool(c["NIB_SPAN"]) and bool(c["WT_K"])
            and not c["HAS_G_IDX"]
            and c["WSCALE"] == S_FLOAT and weights["compute"] in (torch.bfloat16,
                                                                  torch.float16))


def decodes(weights: dict) -> bool:
    """Whether linear `weights` takes the prefill dispatch's decode: e2m1 where it is exact
    (`exact_in`), int4 in planes (`int4_planes_in`, rounded)."""
    return exact_in(weights) or int4_planes_in(weights)


def rounds(weights: dict) -> bool:
    """Whether the decode rounds the weights to the compute dtype (int4: (q - zero) * s)."""
    return int4_planes_in(weights)


def exact_in(weights: dict) -> bool:
    """Whether linear `weights` (describe_weights) decodes exactly into its compute dtype
    here: e2m1 codes in planes, NVFP4's e4m3 block scales (any 16-bit dtype), or MXFP4's
    E8M0 scales where they fold into bf16 (`e8m0_fold`, read once per layer)."""
    c = weights["constexprs"]
    if weights["kind"] != W_FP4 or c["NIB_SPAN"] != FP4_SPAN or c["HAS_G_IDX"]:
        return False
    return c["WSCALE"] == S_E4M3 or (c["WSCALE"] == S_E8M0 and weights["e8m0_fold"])


def dense_shape(weights: dict) -> tuple[int, int, int]:
    """[E, N, K] of the decoded linear."""
    q = weights["q"]
    k = 2 * (q.shape[2] * q.shape[4] if q.dim() == 5 else q.shape[2])
    return q.shape[0], weights["N"], k


def dequantize(weights: dict, out: torch.Tensor, fast: bool) -> dict:
    """Decode linear `weights` (`decodes`) into `out` (the compute dtype, at least its
    dense_shape's elements; a prefix is used) and return the W16 description of the result
    with the linear's bias and global multipliers (the fused kernel's epilogue)."""
    from .fused_moe import describe_weights

    E, N, K = dense_shape(weights)
    dense = out.view(-1)[:E * N * K].view(E, N, K)
    q, s, zp, _, bias, gscale = weights["args"]
    c = weights["constexprs"]
    st = weights["strides"]
    if int4_planes_in(weights):
        spans = K // c["NIB_SPAN"]
        grid = (triton.cdiv(N, BLOCK_N), triton.cdiv(spans, SPANS), E)
        int4_dequant_kernel[grid](
            q, s, zp, dense, N, spans, weights["scale_rows"], weights["scale_cols"] or K,
            st[0], st[1], st[2], st[3], st[4], st[5], st[6], dense.stride(0), dense.stride(1),
            HAS_ZERO=c["HAS_ZERO"], SYM_ZERO=c["SYM_ZERO"], COMPUTE=c["COMPUTE"],
            FAST_I4=I4_PAIRS if fast else I4_OFF, WT_N=c["WT_N"], WT_K=c["WT_K"],
            SPAN=c["NIB_SPAN"], SPANS=SPANS, BLOCK_N=BLOCK_N, num_warps=4)
    else:
        spans = K // FP4_SPAN
        grid = (triton.cdiv(N, BLOCK_N), triton.cdiv(spans, SPANS), E)
        fp4_dequant_kernel[grid](
            q, s, dense, N, spans, weights["scale_rows"], weights["scale_cols"],
            st[0], st[1], st[2], st[3], st[4], dense.stride(0), dense.stride(1),
            WSCALE=c["WSCALE"], COMPUTE=c["COMPUTE"], FAST=fast, WT_N=c["WT_N"],
            WT_K=c["WT_K"], SCALE_WORDS=c["SCALE_WORDS"], SPAN=FP4_SPAN, SPANS=SPANS,
            BLOCK_N=BLOCK_N, CARRY=c["CARRY"], SCALE_BF16=c["SCALE_BF16"],
            SCALE_UNDO=2.0 ** -weights["scale_fold"], num_warps=4)
    return describe_weights(W16, dense, weights["compute"],
                            bias=bias if c["HAS_BIAS"] else None,
                            gscale=gscale if c["HAS_WGSCALE"] else None)
