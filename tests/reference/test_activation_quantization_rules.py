"""The activation quantization rules of q1 / q2, pinned to their published definitions with
inputs on which the wrong rule gives another answer.

- MXFP8 activations (OCP MX v1.0 §6.3 and the rules the checkpoint's `mx_scale_rule` names):
  the shared exponent of a block of 32 follows the checkpoint's rule, e4m3 elements RNE and
  saturating at 448.
- MXFP4 activations (W4A4: OCP MX v1.0 §6.3 with e2m1's emax 2, and the other rules): e2m1
  elements RNE (ties to the even mantissa) and saturating at 6 (§5.3.3).
- A dynamic per-tensor scale (vLLM's `scaled_int8_quant` / `scaled_fp8_quant` without a scale:
  one amax over the whole GEMM input) spans every expert's rows of q2's input, not one expert's.
- NVFP4 activations in the engines' float32 arithmetic (vLLM / FlashInfer `scaled_fp4_quant`):
  each step one float32 operation, on inputs whose float64 quotient lands elsewhere.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch
from moecert.reference import MoEProblem, dequantize, moe, synthesize
from moecert.reference.moe import quantize_activation
from moecert.reference.quantize import qdq_nvfp4

# --- MXFP8 -------------------------------------------------------------------------------------
# Block A holds 500 and 1.0: floor (OCP): floor(log2 500) - emax(e4m3) 8 = 0, 500 saturates to
# 448; even: 500 to 3 mantissa bits is 512, floor(log2 512) - 8 = 1; ceil: ceil(log2 500) - 8
# = 1; rceil: ceil(log2(500 / 448)) = 1: 500 / 2 = 250 -> e4m3 256 -> 512.
# Block B holds 300 and 1.25 * 2^-9: floor, even (300 -> 288) and rceil (ceil(log2(300 / 448))
# = 0) keep exponent 0 and the small element rounds to the subnormal 2^-9; ceil (ceil(log2 300)
# - 8 = 1) halves it to 0.625 * 2^-9, which rounds to 2^-9, times 2: 2^-8.
SMALL = 1.25 * 2.0 ** -9
MXFP8_KNOWN = {  # rule: (block A's [500, 1.0], block B's [300, SMALL])
    "floor": ([448.0, 1.0], [288.0, 2.0 ** -9]),
    "even": ([512.0, 1.0], [288.0, 2.0 ** -9]),
    "ceil": ([512.0, 1.0], [288.0, 2.0 ** -8]),
    "rceil": ([512.0, 1.0], [288.0, 2.0 ** -9]),
}


@pytest.mark.parametrize("rule", sorted(MXFP8_KNOWN))
def test_mxfp8_activations_follow_the_checkpoints_scale_rule(rule):
    P = MoEProblem(M=1, K=64, N=32, E=1, topk=1)
    ckpt = synthesize("mxfp8", P, seed=0, activation="mxfp8", mx_scale_rule=rule)
    x = torch.zeros(1, 64, dtype=torch.float64)
    x[0, 0], x[0, 1], x[0, 32], x[0, 33] = 500.0, 1.0, 300.0, SMALL
    got = quantize_activation(ckpt, x, "w13")
    a, b = MXFP8_KNOWN[rule]
    assert [got[0, 0].item(), got[0, 1].item()] == a
    assert [got[0, 32].item(), got[0, 33].item()] == b
    assert not got[0, 2:32].any() and not got[0, 34:].any()


# --- MXFP4 (W4A4) ----------------------------------------------------------------------------
# e2m1 values 0, 0.5, 1, 1.5, 2, 3, 4, 6 (emax 2: 6 = 1.5 * 2^2); a tie goes to the value with
# mantissa bit 0 (0.25 -> 0, 0.75 -> 1, 1.25 -> 1, 2.5 -> 2, 3.5 -> 4, 5 -> 4).
# Block A holds 7, 5, 0.75, 0.25, 1.25, 2.5: floor (OCP): floor(log2 7) - 2 = 0, scale 1, 7
# saturates to 6; even: 7 = 1.75 * 4 to one mantissa bit is a tie, to 8: exponent 1; ceil:
# ceil(log2 7) - 2 = 1; rceil: ceil(log2(7 / 6)) = 1; at scale 2 7 -> 3.5 -> 4 -> 8.
# Block B holds 5 and 1.5: floor, even (5 = 1.25 * 4 ties down to 4) and rceil (ceil(log2(5 /
# 6)) = 0) keep scale 1, 1.5 stays; ceil (ceil(log2 5) - 2 = 1): 1.5 / 2 = 0.75 -> 1 -> 2.
# Block C holds 12.5 and 1: floor (floor(log2 12.5) - 2 = 1) and even (12.5 = 1.5625 * 8 to
# 1.5 * 8, exponent 1) scale 2: 1 -> 0.5 stays 0.5 -> 1; ceil (ceil(log2 12.5) - 2 = 2) and
# rceil (ceil(log2(12.5 / 6)) = 2) scale 4: 1 -> 0.25, a tie, -> 0; 12.5 -> 12 either way.
MXFP4_BLOCKS = ([7.0, 5.0, 0.75, 0.25, 1.25, 2.5], [5.0, 1.5], [12.5, 1.0])
MXFP4_KNOWN = {  # rule: each block's values after q
    "floor": ([6.0, 4.0, 1.0, 0.0, 1.0, 2.0], [4.0, 1.5], [12.0, 1.0]),
    "even": ([8.0, 4.0, 1.0, 0.0, 1.0, 2.0], [4.0, 1.5], [12.0, 1.0]),
    "ceil": ([8.0, 4.0, 1.0, 0.0, 1.0, 2.0], [4.0, 2.0], [12.0, 0.0]),
    "rceil": ([8.0, 4.0, 1.0, 0.0, 1.0, 2.0], [4.0, 1.5], [12.0, 0.0]),
}


@pytest.mark.parametrize("rule", sorted(MXFP4_KNOWN))
def test_mxfp4_activations_follow_the_scale_rule_with_e2m1s_emax(rule):
    """W4A4: q1 rounds to e2m1 per 32 (signs kept: block C negated), the exponent from the
    variant's rule; MXFP8's emax (8) or e4m3 elements give other numbers on every block."""
    P = MoEProblem(M=1, K=96, N=32, E=1, topk=1)
    ckpt = synthesize("mxfp4", P, seed=0, activation="mxfp4", mx_scale_rule=rule)
    x = torch.zeros(1, 96, dtype=torch.float64)
    for b, values in enumerate(MXFP4_BLOCKS):
        sign = -1.0 if b == 2 else 1.0
        x[0, 32 * b:32 * b + len(values)] = sign * torch.tensor(values, dtype=torch.float64)
    got = quantize_activation(ckpt, x, "w13")
    for b, want in enumerate(MXFP4_KNOWN[rule]):
        sign = -1.0 if b == 2 else 1.0
        block = got[0, 32 * b:32 * (b + 1)]
        assert block[:len(want)].tolist() == [sign * v + 0.0 for v in want], (rule, b)
        assert not block[len(want):].any()


# --- q2's dynamic per-tensor scale -------------------------------------------------------------

def test_dynamic_per_tensor_scale_spans_every_experts_rows():
    """int8 W8A8 with dynamic per-tensor activations, two tokens on two experts whose
    intermediates differ tenfold: q2's one scale is max|a| over both / 127, so the small
    expert's intermediate is quantized coarsely. Written from the definition:
        xq = qdq(x); h_t = bf16(xq_t W13_e^T); a_t = bf16(silu(h_t[:N]) * h_t[N:])
        aq = qdq(a over all t); y_t = r_t * aq_t W2_e^T
    with qdq(t) = round(t / s) * s, s = max|t| / 127 (ties to even, as nearbyint)."""
    P = MoEProblem(M=2, K=32, N=16, E=2, topk=1)
    ckpt = synthesize("int8-w8a8", P, seed=3, weight_strategy="tensor",
                      activation="dynamic-tensor")
    scale = ckpt.tensors["w13_weight_scale"].clone()
    scale[1] *= 10  # expert 1's intermediate about ten times expert 0's
    ckpt = replace(ckpt, tensors={**ckpt.tensors, "w13_weight_scale": scale})
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(2, 32, generator=gen).bfloat16().double()
    ids = torch.tensor([[0], [1]])
    r = torch.tensor([[0.75], [1.0]], dtype=torch.float64)
    got = moe(ckpt, x, r, ids, P)

    w = dequantize(ckpt)

    def qdq(t, s):
        return torch.round(t / s).clamp(-128, 127) * s

    def bf16(t):
        return t.to(torch.bfloat16).double()

    xq = qdq(x, x.abs().max() / 127)
    a = []
    for t in range(2):
        h = bf16(xq[t] @ w["w13"][t].T)
        a.append(bf16(h[:16] * torch.sigmoid(h[:16]) * h[16:]))
    a = torch.stack(a)
    aq = qdq(a, a.abs().max() / 127)
    want = torch.stack([r[t, 0] * (aq[t] @ w["w2"][t].T) for t in range(2)])
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    # one scale per expert would give another answer: the input tells the two apart
    per_expert = torch.stack([r[t, 0] * (qdq(a[t], a[t].abs().max() / 127) @ w["w2"][t].T)
                              for t in range(2)])
    assert (per_expert - want).abs().max() > 1e-3 * want.abs().max()


# --- NVFP4 activations in float32 --------------------------------------------------------------
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)  # OCP MX v1.0 §5.3.3, codes 0..7


def _e2m1_rne(v: float) -> float:
    """The E2M1 value nearest v, ties to the even code, saturating at 6."""
    m = min(abs(v), 6.0)
    dist = [abs(m - e) for e in E2M1_VALUES]
    best = min(dist)
    code = [c for c, d in enumerate(dist) if d == best]
    code = code[0] if len(code) == 1 else next(c for c in code if c % 2 == 0)
    return math.copysign(E2M1_VALUES[code], v)


def engine_nvfp4(x: torch.Tensor, g: float, alpha: float) -> tuple[torch.Tensor, float]:
    """vLLM's `scaled_fp4_quant` (cvt_warp_fp16_to_fp4) on one block of 16, written in
    torch float32 operations: SFValue = g * (vecMax * (1 / 6)); the e4m3 block scale
    (RNE, saturating); outputScale = 1 / (SFValue * (1 / g)); codes e2m1(x * outputScale);
    the GEMM's result times alpha. Returns the values and the block scale."""
    x32 = x.float()
    g32 = torch.tensor(g, dtype=torch.float32)
    sf = g32 * (x32.abs().max() * (torch.tensor(1.0, dtype=torch.float32) / 6.0))
    bs = sf.clamp(max=448.0).to(torch.float8_e4m3fn).float()
    out_scale = 1.0 / (bs * (1.0 / g32))
    codes = [_e2m1_rne(float(v)) for v in (x32 * out_scale).flatten()]
    return torch.tensor(codes, dtype=torch.float64).reshape(x.shape) * float(bs) * alpha, \
        float(bs)


# (calibrated amax, block maximum, the element on a tie): ModelOpt's input_scale is the
# float32 rounding of amax / (6 * 448), found with a storage error; x * g / bs is then an
# e2m1 tie in float32 and off it in float64
NVFP4_TIES = [(0.625, 0.515625, 0.15625), (0.640625, 0.75, 0.080078125),
              (0.703125, 1.0, 0.029296875), (0.75, 0.75, 0.4375)]


@pytest.mark.parametrize(("amax", "block_max", "x"), NVFP4_TIES)
def test_nvfp4_activations_in_the_engines_float32_steps(amax, block_max, x):
    s = float(torch.tensor(amax / 2688, dtype=torch.float32))
    g = float(torch.tensor(1 / s, dtype=torch.float32))
    block = torch.full((1, 16), 0.0078125, dtype=torch.float64)
    block[0, 0], block[0, 1] = block_max, x
    want, bs = engine_nvfp4(block, g, s)
    got = qdq_nvfp4(block, g, s)
    assert torch.equal(got, want)
    # the float64 quotient x * g / bs rounds the element the other way
    assert _e2m1_rne(x * g / bs) * bs * s != want[0, 1].item()
