"""Activation quantization between and before the GEMMs, and the activation function.

    int8:   x [rows, K] bf16/fp16 -> codes int8 [rows, K], scale fp32 [rows]
            q = clamp(round_half_even(x / s), -128, 127); s = amax(|row|) / 127 (dynamic
            per token) or one given scale for every row (static or dynamic per tensor)
    mx:     x [rows, K] -> MX element values (e4m3 for MXFP8, e2m1 for MXFP4) held in x's
            dtype [rows, K], E8M0 bytes [rows, K/32] per 32 columns: s = 2^exp (exp by the
            floor / even / ceil / rceil rule and the element's emax), value =
            element_rne(x / s) saturating at the element's largest (448, 6)
    fp8:    x [rows, K] -> codes float8_e4m3fn [rows, K], scales fp32 [rows, units]
            value = e4m3_rne(x / s) saturating at 448; s = amax / 448 of the unit (a row per
            token, or 128 columns of a row per 1x128 group) or one given scale (static)
    act:    h [rows, w13_rows] -> act(h) [rows, N] in h's dtype (computed in fp32)

Quotients that get rounded use div_rn (Triton's `/` on fp32 is an approximate division on
NVIDIA GPUs). Rounding is written out in fp32 arithmetic (the 1.5 * 2^23 trick rounds half
to even for |v| < 2^22) so that the interpreter and every GPU round identically; e4m3 codes
are rounded so too and only then cast to float8_e4m3fn (exact; the interpreter's cast of an
inexact value does not round to nearest).
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl
from moecert.reference.schemes import MX_BLOCK, SWIGLUOAI_ALPHA, SWIGLUOAI_LIMIT
from moecert.reference.schemes.elements import ELEMENTS

# 1.5 * 2^23: v + M - M rounds |v| < 2^22 to an integer, ties to even
RNE_MAGIC = tl.constexpr(12582912.0)
MX_RULES = {"floor": 0, "even": 1, "ceil": 2, "rceil": 3}
ACTIVATIONS = {"silu": 0, "gelu": 1, "swigluoai": 2, "swigluoai-split": 3, "relu2": 4}
# the gated activations whose gate and up rows are w13's two halves (swigluoai: interleaved
# rows; relu2: no gate)
GATE_UP_HALVES = ("silu", "gelu", "swigluoai-split")
RELU2 = tl.constexpr(ACTIVATIONS["relu2"])  # the one activation with no gate
SWIGLU_ALPHA, SWIGLU_LIMIT = SWIGLUOAI_ALPHA, SWIGLUOAI_LIMIT  # passed as constexpr arguments
TINY = tl.constexpr(2.0**-20)
# constexpr mirrors of the element records (schemes/elements.py), values in the comments
_E4M3, _INT8, _E8M0 = ELEMENTS["e4m3"], ELEMENTS["int8"], ELEMENTS["e8m0"]
E4M3_MAX = tl.constexpr(_E4M3.max)  # 448.0
E4M3_EMAX = tl.constexpr(_E4M3.emax)  # 8
E4M3_MIN_EXP = tl.constexpr(_E4M3.min_normal_exp)  # -6
E4M3_MBITS = tl.constexpr(_E4M3.mantissa_bits)  # 3
INT8_MIN = tl.constexpr(float(_INT8.min_code))  # -128.0
INT8_MAX = tl.constexpr(_INT8.max)  # 127.0
E8M0_BIAS = tl.constexpr(_E8M0.exp_bias)  # 127
MX_COLS = tl.constexpr(MX_BLOCK)  # 32


@triton.jit
def _rne(v):
    return (v + RNE_MAGIC) - RNE_MAGIC


@triton.jit
def rne_bf16(v):
    """v rounded to bf16 (ties to even), still fp32. The interpreter's fp32 -> bf16 cast
    truncates; a value already on the bf16 grid converts exactly either way."""
    bits = v.to(tl.uint32, bitcast=True)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _pow2(e):
    """2^e as fp32 for integer e in [-127, 127] (2^-127 is the subnormal 0x00400000)."""
    normal = ((e + 127) << 23).to(tl.float32, bitcast=True)
    return tl.where(e < -126, tl.full(e.shape, 0x00400000, tl.int32).to(tl.float32,
                                                                       bitcast=True), normal)


@triton.jit
def _floor_log2(v):
    """floor(log2 v) of positive normal fp32 v, from its exponent bits."""
    return ((v.to(tl.int32, bitcast=True) >> 23) & 0xFF) - 127


@triton.jit
def _round_float(v, MAX: tl.constexpr, MIN_EXP: tl.constexpr, MBITS: tl.constexpr):
    """v rounded to a float element's grid (ties to even), saturating at +-MAX, still fp32:
    the spacing around |v| is 2^(max(floor(log2|v|), MIN_EXP) - MBITS) (e4m3: -6 and 3,
    e2m1: 0 and 1)."""
    mag = tl.minimum(tl.abs(v), MAX)
    ea = tl.maximum(_floor_log2(tl.maximum(mag, TINY)), MIN_EXP)
    ulp = _pow2(ea - MBITS)
    r = tl.minimum(_rne(tl.math.div_rn(mag, ulp)) * ulp, MAX)
    return tl.where(v < 0, -r, r)


@triton.jit
def _round_e4m3(v):
    """v rounded to the e4m3 grid (ties to even), saturating at +-448."""
    return _round_float(v, E4M3_MAX, E4M3_MIN_EXP, E4M3_MBITS)


@triton.jit
def row_amax_kernel(x_ptr, amax_ptr, K, stride_x, BLOCK_K: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK_K)
    amax = tl.zeros((BLOCK_K,), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        x = tl.load(x_ptr + row * stride_x + k0 + offs, mask=k0 + offs < K, other=0.0)
        amax = tl.maximum(amax, tl.abs(x.to(tl.float32)))
    tl.store(amax_ptr + row, tl.max(amax, axis=0))


@triton.jit
def int8_quant_kernel(x_ptr, q_ptr, scale_ptr, given_ptr, K, stride_x, stride_q,
                      MODE: tl.constexpr, BLOCK_K: tl.constexpr):
    """MODE 0: amax of the row; 1: amax given; 2: scale given. With an amax the quotient is
    x * 127 / amax, one rounding of the exact ratio: x = amax / 2 is a true tie (63.5) and
    must round to even, which x / fl(amax / 127) misses."""
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK_K)
    if MODE == 0:
        amax = tl.zeros((BLOCK_K,), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            x = tl.load(x_ptr + row * stride_x + k0 + offs, mask=k0 + offs < K, other=0.0)
            amax = tl.maximum(amax, tl.abs(x.to(tl.float32)))
        amax = tl.max(amax, axis=0)
        num, den = INT8_MAX, amax
    elif MODE == 1:
        amax = tl.load(given_ptr)
        num, den = INT8_MAX, amax
    else:
        num, den = 1.0, tl.load(given_ptr)
    s = tl.math.div_rn(den, num)
    safe = tl.where(den > 0, den, 1.0)
    for k0 in range(0, K, BLOCK_K):
        mask = k0 + offs < K
        x = tl.load(x_ptr + row * stride_x + k0 + offs, mask=mask, other=0.0).to(tl.float32)
        v = tl.minimum(tl.maximum(tl.math.div_rn(x * num, safe), INT8_MIN), INT8_MAX)
        q = tl.where(den > 0, _rne(v), 0.0)
        tl.store(q_ptr + row * stride_q + k0 + offs, q.to(q_ptr.dtype.element_ty), mask=mask)
    tl.store(scale_ptr + row, s)


@triton.jit
def mx_quant_kernel(x_ptr, q_ptr, scale_ptr, K, stride_x, stride_q, stride_s,
                    RULE: tl.constexpr, BLOCKS: tl.constexpr, EL_MAX: tl.constexpr,
                    EL_EMAX: tl.constexpr, EL_MIN_EXP: tl.constexpr, EL_MBITS: tl.constexpr):
    """MX blocks of 32 columns of an element with largest value EL_MAX = 1.x * 2^EL_EMAX,
    smallest normal exponent EL_MIN_EXP and EL_MBITS mantissa bits (`_mx_element`)."""
    # fp32 bits below the element's mantissa, and the round-half-to-even increment there
    DROP: tl.constexpr = 23 - EL_MBITS
    HALF: tl.constexpr = (1 << (22 - EL_MBITS)) - 1
    row = tl.program_id(0).to(tl.int64)
    offs_b = tl.program_id(1) * BLOCKS + tl.arange(0, BLOCKS)
    offs = offs_b[:, None] * MX_COLS + tl.arange(0, MX_COLS)[None, :]
    mask = offs < K
    x = tl.load(x_ptr + row * stride_x + offs, mask=mask, other=0.0).to(tl.float32)
    amax = tl.max(tl.abs(x), axis=1)
    bits = amax.to(tl.int32, bitcast=True)
    e = ((bits >> 23) & 0xFF) - 127
    inexact = (bits & 0x7FFFFF) != 0
    if RULE == 0:  # floor(log2 amax) - emax (OCP; e4m3 emax 8, e2m1 2)
        exp = e - EL_EMAX
    elif RULE == 1:  # amax rounded to the element's mantissa bits (ties to even), then floor
        rounded = bits + HALF + ((bits >> DROP) & 1)
        exp = ((rounded >> 23) & 0xFF) - 127 - EL_EMAX
    elif RULE == 2:  # ceil(log2 amax) - emax
        exp = e + inexact.to(tl.int32) - EL_EMAX
    else:  # ceil(log2(amax / max))
        qb = tl.math.div_rn(amax, EL_MAX).to(tl.int32, bitcast=True)
        exp = ((qb >> 23) & 0xFF) - 127 + ((qb & 0x7FFFFF) != 0).to(tl.int32)
    exp = tl.where(amax == 0, -E8M0_BIAS, exp)
    exp = tl.minimum(tl.maximum(exp, -E8M0_BIAS), E8M0_BIAS)
    r = _round_float(tl.math.div_rn(x, _pow2(exp)[:, None]), EL_MAX, EL_MIN_EXP, EL_MBITS)
    tl.store(q_ptr + row * stride_q + offs, r.to(q_ptr.dtype.element_ty), mask=mask)
    tl.store(scale_ptr + row * stride_s + offs_b, (exp + E8M0_BIAS).to(tl.uint8),
             mask=offs_b * MX_COLS < K)


@triton.jit
def fp8_quant_kernel(x_ptr, q_ptr, scale_ptr, given_ptr, K, SPAN, stride_x, stride_q,
                     stride_s, DYNAMIC: tl.constexpr, GIVEN_AMAX: tl.constexpr,
                     BLOCK_K: tl.constexpr):
    """Program (row, u) quantizes columns [u * SPAN, (u + 1) * SPAN) of the row, one unit
    (SPAN = K: the whole row; 128: a 1x128 group): s = amax / 448 of the unit (DYNAMIC), of
    the given amax (GIVEN_AMAX: the whole tensor's), or the given scale; codes
    e4m3_rne(x * 448 / amax) (one rounding of the exact ratio: the tie x = 3/8 amax goes to
    even) or e4m3_rne(x / s), 0 where s = 0."""
    row = tl.program_id(0).to(tl.int64)
    unit = tl.program_id(1)
    start = unit * SPAN
    end = tl.minimum(start + SPAN, K)
    offs = tl.arange(0, BLOCK_K)
    if DYNAMIC:
        amax = tl.zeros((BLOCK_K,), dtype=tl.float32)
        for k0 in range(start, end, BLOCK_K):
            x = tl.load(x_ptr + row * stride_x + k0 + offs, mask=k0 + offs < end, other=0.0)
            amax = tl.maximum(amax, tl.abs(x.to(tl.float32)))
        num, den = E4M3_MAX, tl.max(amax, axis=0)
    elif GIVEN_AMAX:
        num, den = E4M3_MAX, tl.load(given_ptr)
    else:
        num, den = 1.0, tl.load(given_ptr)
    s = tl.math.div_rn(den, num)
    safe = tl.where(den > 0, den, 1.0)
    for k0 in range(start, end, BLOCK_K):
        mask = k0 + offs < end
        x = tl.load(x_ptr + row * stride_x + k0 + offs, mask=mask, other=0.0).to(tl.float32)
        # x * 448 is exact for bf16/fp16 x: one rounding of the exact ratio x * 448 / amax
        r = tl.where(den > 0, _round_e4m3(tl.math.div_rn(x * num, safe)), 0.0)
        tl.store(q_ptr + row * stride_q + k0 + offs, r.to(q_ptr.dtype.element_ty), mask=mask)
    tl.store(scale_ptr + row * stride_s + unit, s)


@triton.jit
def act_values(gate, up, ACT: tl.constexpr, ALPHA: tl.constexpr, LIMIT: tl.constexpr):
    """act(gate, up) in fp32 for ACTIVATIONS[name] = ACT; relu2 reads `gate` only. One
    definition for the activation kernel and GEMM1's fused epilogue (gemm_kernel's EPI_ACT),
    so both give the same bits."""
    if ACT == RELU2:  # relu2: no gate
        y = tl.maximum(gate, 0.0)
        y = y * y
    elif ACT == 0:
        y = gate / (1.0 + tl.exp(-gate)) * up
    elif ACT == 1:
        y = 0.5 * gate * (1.0 + tl.erf(gate * 0.7071067811865476)) * up
    else:
        g = tl.minimum(gate, LIMIT)
        u = tl.minimum(tl.maximum(up, -LIMIT), LIMIT)
        y = (u + 1.0) * g / (1.0 + tl.exp(-ALPHA * g))
    return y


@triton.jit
def activation_kernel(h_ptr, out_ptr, N, stride_h, stride_o, ACT: tl.constexpr,
                      FIX_BF16: tl.constexpr, ALPHA: tl.constexpr, LIMIT: tl.constexpr,
                      BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = offs < N
    h_row = h_ptr + row * stride_h
    if ACT == RELU2:  # relu2: N rows, no gate
        gate = tl.load(h_row + offs, mask=mask, other=0.0).to(tl.float32)
        up = gate
    elif ACT == 2:  # gpt-oss interleaved gate/up
        gate = tl.load(h_row + 2 * offs, mask=mask, other=0.0).to(tl.float32)
        up = tl.load(h_row + 2 * offs + 1, mask=mask, other=0.0).to(tl.float32)
    else:
        gate = tl.load(h_row + offs, mask=mask, other=0.0).to(tl.float32)
        up = tl.load(h_row + N + offs, mask=mask, other=0.0).to(tl.float32)
    y = act_values(gate, up, ACT, ALPHA, LIMIT)
    if FIX_BF16:
        y = rne_bf16(y)
    tl.store(out_ptr + row * stride_o + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def routed_sum_kernel(y_ptr, out_ptr, K, stride_o, TOPK: tl.constexpr, FIX_BF16: tl.constexpr,
                      BLOCK_K: tl.constexpr):
    """out[t] = the fp32 sum of y's rows t * TOPK ... t * TOPK + TOPK - 1 in that order,
    rounded once to out's dtype."""
    row = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)
    mask = offs < K
    acc = tl.load(y_ptr + row * TOPK * K + offs, mask=mask, other=0.0)
    for j in tl.static_range(1, TOPK):
        acc += tl.load(y_ptr + (row * TOPK + j) * K + offs, mask=mask, other=0.0)
    if FIX_BF16:
        acc = rne_bf16(acc)
    tl.store(out_ptr + row * stride_o + offs, acc.to(out_ptr.dtype.element_ty), mask=mask)


# --- host wrappers: check, allocate, launch -------------------------------------------------

def fix_bf16(dtype: torch.dtype) -> bool:
    """Whether stores to `dtype` need the explicit bf16 rounding (interpreter only)."""
    return os.environ.get("TRITON_INTERPRET") == "1" and dtype == torch.bfloat16


def tensor_amax(x: torch.Tensor, valid_rows: torch.Tensor | None = None) -> torch.Tensor:
    """fp32 [1]: amax(|x|) over the rows marked in `valid_rows` (all if None)."""
    rows, K = x.shape
    amax = torch.zeros(max(rows, 1), dtype=torch.float32, device=x.device)
    if rows:
        row_amax_kernel[(rows,)](x, amax, K, x.stride(0),
                                 BLOCK_K=min(1024, triton.next_power_of_2(max(K, 16))))
    if valid_rows is not None and rows:
        amax = torch.where(valid_rows, amax, 0.0)
    return amax.amax().reshape(1)


def quantize_int8(x: torch.Tensor, mode: str, given: torch.Tensor | None = None,
                  valid_rows: torch.Tensor | None = None, dtype: torch.dtype = torch.int8):
    """(codes [rows, K] in `dtype`: int8, or a float dtype that holds them exactly, scales
    fp32 [rows]). mode: "token" (amax per row), "static" (`given` [1]) or "tensor" (amax
    over the rows marked in `valid_rows`, all if None)."""
    assert x.dim() == 2 and x.is_contiguous()
    assert dtype in (torch.int8, torch.bfloat16, torch.float16, torch.float32), dtype
    rows, K = x.shape
    codes = torch.empty(rows, K, dtype=dtype, device=x.device)
    scales = torch.empty(rows, dtype=torch.float32, device=x.device)
    bk = min(1024, triton.next_power_of_2(max(K, 16)))
    if mode == "tensor":
        given = tensor_amax(x, valid_rows)
    elif mode == "static":
        assert given is not None and given.numel() == 1
    int8_quant_kernel[(rows,)](x, codes, scales, given if given is not None else scales, K,
                               x.stride(0), codes.stride(0),
                               MODE={"token": 0, "tensor": 1, "static": 2}[mode], BLOCK_K=bk)
    return codes, scales


def _mx_element(element: str) -> dict:
    """The element record's fields `mx_quant_kernel` takes as constexprs."""
    el = ELEMENTS[element]
    return {"EL_MAX": float(el.max), "EL_EMAX": el.emax, "EL_MIN_EXP": el.min_normal_exp,
            "EL_MBITS": el.mantissa_bits}


def quantize_mx(x: torch.Tensor, rule: str, element: str):
    """(MX `element` values (e4m3: MXFP8, e2m1: MXFP4) in x's dtype [rows, K], E8M0 bytes
    uint8 [rows, K/32]); every element value is exact in bf16 and fp16."""
    assert x.dim() == 2 and x.is_contiguous() and x.shape[1] % MX_BLOCK == 0
    rows, K = x.shape
    values = torch.empty_like(x)
    scales = torch.empty(rows, K // MX_BLOCK, dtype=torch.uint8, device=x.device)
    blocks = min(32, triton.next_power_of_2(K // MX_BLOCK))
    grid = (rows, triton.cdiv(K // MX_BLOCK, blocks))
    mx_quant_kernel[grid](x, values, scales, K, x.stride(0), values.stride(0),
                          scales.stride(0), RULE=MX_RULES[rule], BLOCKS=blocks,
                          **_mx_element(element))
    return values, scales


def quantize_fp8(x: torch.Tensor, mode: str, group: int, given: torch.Tensor | None = None,
                 valid_rows: torch.Tensor | None = None):
    """(codes float8_e4m3fn [rows, K], scales fp32 [rows] or [rows, ceil(K / group)]).
    mode: "token" (amax per row), "group" (amax per row and `group` columns), "tensor" (one
    amax over the rows marked in `valid_rows`, all if None) or "static" (`given` [1] for
    every row)."""
    assert x.dim() == 2 and x.is_contiguous()
    rows, K = x.shape
    span = group if mode == "group" else K
    units = triton.cdiv(K, span) if K else 1
    codes = torch.empty(rows, K, dtype=torch.float8_e4m3fn, device=x.device)
    scales = torch.empty(rows, units, dtype=torch.float32, device=x.device)
    if mode == "static":
        assert given is not None and given.numel() == 1
    elif mode == "tensor":
        given = tensor_amax(x, valid_rows)
    if rows:
        fp8_quant_kernel[(rows, units)](
            x, codes, scales, given if given is not None else scales, K, span, x.stride(0),
            codes.stride(0), scales.stride(0), DYNAMIC=mode in ("token", "group"),
            GIVEN_AMAX=mode == "tensor",
            BLOCK_K=min(1024, triton.next_power_of_2(max(min(span, K), 16))))
    return codes, scales if mode == "group" else scales.view(rows)


def activation(h: torch.Tensor, name: str, N: int) -> torch.Tensor:
    """act(h) [rows, N] in h's dtype."""
    assert h.dim() == 2 and h.is_contiguous()
    rows = h.shape[0]
    out = torch.empty(rows, N, dtype=h.dtype, device=h.device)
    if rows == 0:
        return out
    bn = min(1024, triton.next_power_of_2(N))
    activation_kernel[(rows, triton.cdiv(N, bn))](h, out, N, h.stride(0), out.stride(0),
                                                  ACT=ACTIVATIONS[name],
                                                  FIX_BF16=fix_bf16(h.dtype),
                                                  ALPHA=SWIGLU_ALPHA, LIMIT=SWIGLU_LIMIT,
                                                  BLOCK_N=bn)
    return out


def routed_sum(y: torch.Tensor, out: torch.Tensor, topk: int) -> None:
    """out [tokens, K] (any shape of that many elements) = the sum of each token's topk
    consecutive rows of y fp32 [tokens * topk, K], in row order, cast once: one launch
    instead of a reduction and a cast."""
    assert y.dim() == 2 and y.is_contiguous() and y.dtype == torch.float32
    rows, K = y.shape[0] // topk, y.shape[1]
    direct = out.is_contiguous()
    target = out.view(rows, K) if direct else torch.empty(rows, K, dtype=out.dtype,
                                                           device=out.device)
    if rows:
        bk = min(1024, triton.next_power_of_2(max(K, 16)))
        routed_sum_kernel[(rows, triton.cdiv(K, bk))](y, target, K, target.stride(0), TOPK=topk,
                                                      FIX_BF16=fix_bf16(out.dtype),
                                                      BLOCK_K=bk)
    if not direct:
        out.copy_(target.view(out.shape))
