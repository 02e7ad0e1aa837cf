"""`GroupedBackend`: the MoE layer on PyTorch's own grouped GEMM, `torch._grouped_mm` (CUTLASS
on sm90 / sm100 in bf16; elsewhere, and for fp16, torch's fallback: one mm per group).

Weights are dequantized once, at processing, to the activation dtype (the prefill path for
int4 / int8 / fp8 / mxfp8 weights: compute-bound at large M, so the wider weights cost little):

    w13_mm  act dtype [E, w13_rows, K']     w2_mm  act dtype [E, K, N']
    K' = K (+ BIAS_PARTS with a bias), N' likewise, rounded up to 16 bytes of the act dtype
    (torch._grouped_mm needs 16-byte strides); zero columns past them. Absent where the
    checkpoint's 16-bit weights already are that (the common kernel format's {p}_w,
    kernels/convert.py, is then read directly).

torch._grouped_mm takes no bias and returns the act dtype, so a bias added afterwards would
round twice (measured: the output error of a biased bf16 layer doubles). Biases ride in the
GEMMs instead: the BIAS_PARTS columns after K (w13) and N (w2) hold the float32 bias split
into act-dtype parts (hi + mid + lo == bias exactly in bf16), the GEMM's left operand holds
ones there, and the float32 accumulator sums product and bias before the one rounding.

The forward (the torch backend's routing, kernels/routing.py, around):

    sort the assignments by local expert; offs[e] = assignments of experts <= e (int32)
    h = [x[token], 1, 1, 1] @ W13'^T     one grouped GEMM (float32 accumulation, one rounding)
    a = round(act(h))                    y = [a, 1, 1, 1] @ W2'^T (the same)
    out[t] = cast(sum over the token's assignments of r * y), in a fixed order

It runs under CUDA graph capture (`moecert bench --mode graph`): no host synchronization and
every shape decided by the input's shapes alone. Every assignment keeps its row, M x topk of
them (batched: E x T); one that computes nothing (an expert of another rank, a batched row
past its expert's count) sorts after all the experts, past offs[E - 1], where the grouped
GEMMs neither read nor write ("elements beyond offs[-1] are ignored": torch/nn/functional.py
`grouped_mm`), and its y is replaced by 0 (masked, not multiplied: that row of the GEMM's
output is uninitialized memory). It takes the top-k slot after the token's real assignments,
where the sum had a 0 before, so the sum is the one it was. Offsets come from
`torch.searchsorted` (`torch.bincount` reads its input's max on the host on CUDA). torch's
per-group fallback (fp16, GPUs other than sm90 / sm100) copies offs to the host itself:
capture fails there, in torch.

Numerics against the reference: weights rounded to the act dtype once (code * scale computed
in float32 first, as the legitimate twin conformance/mutants/legit.py does); each assignment's
y rounded to the act dtype before the top-k sum, as vLLM's fused MoE does. That rounding is
not in the reference, and the exact tier's structured inputs are not exact under it when a
bias feeds a top-k > 1 sum (tests/kernels/test_grouped_backend.py shows which); the harness
runs the exact tier on unbiased cases, where this backend is bit for bit the reference.

FP8 activations (fp8-w8a8 with channel or tensor weight scales and dynamic-token or
static-tensor activations: the row-wise combinations) run on torch._scaled_grouped_mm instead,
weights kept in e4m3:

    w13_mm / w2_mm   e4m3 [E, out', in'], zero rows and columns up to multiples of 16 (absent
                     where the checkpoint's {p}_w already is that)
    {p}_mm_scale     float32 [E, out'] one scale per output channel: a per-tensor scale on all
                     its rows, w13's w1 / w3 shard scales each on its half, 1 on padding rows
    q1 / q2          the torch backend's quantizers (kernels/activations.py `quantize_rows`):
                     e4m3 codes and one float32 scale per row (amax / 448 of each token or
                     assignment, or the static a13 / a2 scale), so codes * scale is exactly
                     what kernels/native.py multiplies in float32
    h = bf16((codes_x @ W13^T) * s_x * s_w13)     one grouped GEMM per linear, as above

The constraints relied on, from torch's source (GroupedBlas.cpp `_scaled_grouped_mm_cuda` and
ScaledGroupMM.cu `f8f8bf16_grouped_gemm_impl_sm90` at pytorch main, torch/_meta_registrations.py
`_meta_grouped_mm_common` in the installed torch 2.13, the 2D x 3D call as in pytorch's
test_matmul_cuda.py `test_scaled_grouped_gemm_2d_3d`):
  - A e4m3 [rows, k] row-major, B e4m3 [G, k, n] column-major (the [E, out', in'] weights
    transposed), k and n multiples of 16 (16-byte strides, "divisible by 16" checks)
  - scale_a float32 [rows] contiguous, scale_b float32 [G, n]; offs int32 [G], cumulative
    group ends (empty groups allowed); fewer than 1024 groups
  - out_dtype bf16 only ("Only bf16 high precision output types"), no bias ("Bias not
    supported yet"); epilogue bf16(acc * scale_a * scale_b) in float32; use_fast_accum=False
    (float32 accumulation with the periodic promotion, not the FP8 fast accumulator)
  - the CUTLASS kernel is built for Sm90 only (the capability check admits 10.0, but the
    kernel's ArchTag is Sm90 and pytorch's test xfails on sm100); no CPU kernel
So the FP8 path claims bf16, unbiased layers on CUDA sm90 only (a bias added to the GEMM's
bf16 output rounds h twice, which moves q2's e4m3 codes: measured 5-14x the torch backend's
error on the CPU emulation). Everywhere else it declines with the reason; there is no
fallback (a CPU run of fp8-w8a8 on this backend is all declined, never a different kernel).
The one call sits in `scaled_grouped_mm`, so that the CPU tests run everything around it
against an emulation of the semantics above (tests/kernels/test_grouped_fp8.py).
Not row-wise, declined: 128x128 block weights, 1x128 group activations (the scheme's
default), int8 activations (no int8 grouped GEMM), MXFP8 / NVFP4 activations.
"""

from __future__ import annotations

import torch
from moecert.reference.schemes import (
    ACT_DYNAMIC_TOKEN,
    ACT_NONE,
    ACT_STATIC_TENSOR,
    STRATEGY_CHANNEL,
    STRATEGY_TENSOR,
)
from moecert.reference.schemes.tensors import tensor_name

from .activations import apply_activation, quantize_rows
from .base import BaseBackend
from .codecs import dequantize_expert
from .convert import PREFIXES, convert_to_kernel_format, export_canonical, linear_dims
from .errors import BackendError
from .layer import MoELayer
from .platform import Platform
from .quant_config import Variant
from .routing import routing

# torch._grouped_mm checks that every operand's leading stride is a multiple of 16 bytes
# (aten/src/ATen/native/GroupedMMUtils.h, check_valid_strides_and_return_transposed).
STRIDE_ALIGN_BYTES = 16
# act-dtype parts of a float32 bias: 3 x 8 significant bits hold bf16's 24 exactly
BIAS_PARTS = 3
# The FP8 path (torch._scaled_grouped_mm; the module docstring cites each):
ROWWISE_WEIGHTS = (STRATEGY_CHANNEL, STRATEGY_TENSOR)  # one scale per output channel
ROWWISE_ACTIVATIONS = (ACT_DYNAMIC_TOKEN, ACT_STATIC_TENSOR)  # one scale per row of A
SCALED_OUT_DTYPE = torch.bfloat16  # the only out_dtype it takes
SCALED_CAPABILITY = (9, 0)  # its CUTLASS kernel is built for Sm90 only
SCALED_MAX_GROUPS = 1023  # "Can't process more than 1024 groups" (group_count < 1024)
FP8_DIM_ALIGN = 16  # every operand dimension a multiple of 16 (K of A, K and N of B)


class GroupedBackend(BaseBackend):
    name = "grouped"
    version = "2"

    def available(self) -> str | None:
        if not hasattr(torch, "_grouped_mm"):
            return f"torch {torch.__version__} has no torch._grouped_mm (torch >= 2.8 has)"
        return None

    def claims(self, variant: Variant, problem, platform: Platform) -> str | None:
        if tensor_name(variant, "w13", "pre_quant_scale"):
            return "pre_quant_scale (a multiplier per input column of each GEMM) not applied"
        if variant.activation == ACT_NONE:
            return None
        return scaled_claims(variant, problem, platform)

    def convert(self, layer: MoELayer) -> None:
        convert_to_kernel_format(layer)
        expert_map(layer)  # on the device now, not in a captured forward
        if scaled(layer):
            operands = {p: _scaled_gemm_weight(layer, p) for p in PREFIXES}
            for p, (w, scale) in operands.items():
                if w is not None:
                    layer.put(f"{p}_mm", w)
                layer.put(f"{p}_mm_scale", scale)
            return
        gemm_weights = {p: _gemm_weight(layer, p) for p in PREFIXES}  # every check first
        for p, w in gemm_weights.items():
            if w is not None:
                layer.put(f"{p}_mm", w)

    def canonical_weights(self, layer: MoELayer):
        return export_canonical(layer)  # the common kernel format is kept beside {p}_mm

    def describe(self, layer: MoELayer) -> str:
        if scaled(layer):
            return ("torch._scaled_grouped_mm, FP8 e4m3 row-wise scales, bf16 out (CUTLASS "
                    "sm90)")
        dtype = layer.problem.torch_dtype
        path = ("CUTLASS on sm90/sm100, else torch's per-group fallback"
                if dtype == torch.bfloat16 else "torch's per-group fallback on CUDA")
        return f"torch._grouped_mm in {str(dtype).removeprefix('torch.')} ({path})"

    def forward(self, layer: MoELayer, x, topk_weights, topk_ids, out,
                expert_num_tokens) -> None:
        P = layer.problem
        if P.activation_format == "batched":
            E, T, K = x.shape
            # row e * T + t is expert e's t-th; rows past the expert's count compute nothing
            row = torch.arange(E * T, device=x.device)
            counts = expert_num_tokens.to(device=x.device, dtype=torch.int64)
            expert = torch.where(row % T < counts[row // T], row // T, -1)
            weight = torch.ones(E * T, dtype=torch.float32, device=x.device)
            y = grouped_moe(layer, x.view(E * T, K), row, expert, weight)
        else:
            y = grouped_moe(layer, *routing(P, x, topk_weights, topk_ids, expert_map(layer)))
        out.copy_(y.view(out.shape))  # batched rows past the counts: 0, as the sum gives them


def expert_map(layer: MoELayer) -> torch.Tensor | None:
    """The problem's expert map as int64 on the layer's device (None without one), made once:
    a tensor made from a list in a captured forward would copy from pageable host memory."""
    if layer.problem.expert_map is None:
        return None
    if "grouped_expert_map" not in layer.meta:
        layer.meta["grouped_expert_map"] = torch.tensor(
            layer.problem.expert_map, dtype=torch.int64, device=layer.device)
    return layer.meta["grouped_expert_map"]


def scaled(layer: MoELayer) -> bool:
    """Whether the layer runs on the FP8 grouped GEMM (quantized activations, claimed only
    where row-wise: `scaled_claims`)."""
    return layer.quant.activation != ACT_NONE


def scaled_claims(quant: Variant, problem, platform: Platform) -> str | None:
    """None where torch._scaled_grouped_mm's FP8 row-wise GEMM runs the layer, else why not
    (the module docstring says where each constraint comes from)."""
    mode = quant.activation
    element = quant.info.activation_element
    if element != "e4m3":
        what = ("no int8 grouped GEMM" if element == "int8" else
                "its MX / NVFP4 block-scaled recipes are not done")
        return (f"activation quantization {mode} not supported: the grouped backend's scaled "
                f"GEMM is torch._scaled_grouped_mm's FP8 e4m3 row-wise one ({what})")
    if mode not in ROWWISE_ACTIVATIONS:
        return (f"activation quantization {mode} not supported: torch._scaled_grouped_mm "
                f"scales each row of A once ({' or '.join(ROWWISE_ACTIVATIONS)} activations)")
    if quant.weight_strategy not in ROWWISE_WEIGHTS:
        return (f"weight_strategy {quant.weight_strategy} not supported with {mode} FP8 "
                "activations: torch._scaled_grouped_mm scales each output channel once "
                f"({' or '.join(ROWWISE_WEIGHTS)} weight scales)")
    if problem.bias:
        return ("bias not supported with FP8 activations: torch._scaled_grouped_mm takes no "
                "bias, and one added to its bf16 output rounds h twice, which moves q2's e4m3 "
                "codes (measured: 5-14x the torch backend's error)")
    if problem.torch_dtype != SCALED_OUT_DTYPE:
        return (f"dtype {problem.dtype} not supported with FP8 activations: "
                "torch._scaled_grouped_mm writes bf16 only (an fp16 layer would round twice)")
    if not hasattr(torch, "_scaled_grouped_mm"):
        return f"torch {torch.__version__} has no torch._scaled_grouped_mm (torch >= 2.8 has)"
    if platform.kind != "cuda" or platform.capability != SCALED_CAPABILITY:
        return (f"FP8 activations need torch._scaled_grouped_mm's row-wise kernel: CUTLASS "
                f"sm{''.join(map(str, SCALED_CAPABILITY))} only, no CPU kernel; platform is "
                f"{platform}")
    if problem.E > SCALED_MAX_GROUPS:
        return (f"E = {problem.E} local experts: torch._scaled_grouped_mm takes at most "
                f"{SCALED_MAX_GROUPS} groups")
    return None


# --- weights -------------------------------------------------------------------------------

def _gemm_weight(layer: MoELayer, p: str) -> torch.Tensor | None:
    """[E, out, in'] in the act dtype, or None where the kernel format's {p}_w is that."""
    dtype = layer.problem.torch_dtype
    n_out, n_in = linear_dims(layer, p)
    bias = layer.get(f"{p}_bias") if layer.has(f"{p}_bias") else None
    cols = operand_cols(n_in, bias is not None, dtype)
    if layer.has(f"{p}_w") and not layer.has(f"{p}_s"):  # 16-bit weights
        w = layer.get(f"{p}_w")
        if w.dtype == dtype and cols == n_in:
            return None
    E = layer.problem.E
    out = torch.zeros(E, n_out, cols, dtype=dtype, device=layer.device)
    # whether every expert's values fit, kept on the device and read once: a read per expert
    # (512 host syncs for DeepSeek-V3's two linears) waits each time for this process's turn
    # on a GPU that certify's workers share (issue 43: grouped's claims 2-14 s a DeepSeek-V3
    # case on one H200, 2026-11-30)
    finite = torch.ones((), dtype=torch.bool, device=layer.device)
    for e in range(E):  # float32 one expert at a time: a DeepSeek-V3 layer never is at once
        out[e, :, :n_in] = dequantize_expert(layer, p, e)
        finite &= torch.isfinite(out[e]).all()
    if not bool(finite):
        e = next(e for e in range(E) if not bool(torch.isfinite(out[e]).all()))
        _check_finite(f"{p} weights of expert {e}", out[e], dtype)
    if bias is not None:
        out[:, :, n_in:n_in + BIAS_PARTS] = split_bias(bias, dtype)
        _check_finite(f"{p}_bias", out[:, :, n_in:n_in + BIAS_PARTS], dtype)
    return out


def _scaled_gemm_weight(layer: MoELayer, p: str) -> tuple[torch.Tensor | None, torch.Tensor]:
    """The FP8 GEMM's operands for linear `p`: the e4m3 weights [E, out', in'] (zero rows and
    columns up to multiples of 16; None where {p}_w already is that) and float32 scales
    [E, out'] (one per output channel: a per-tensor scale on each of its rows, w13's w1 / w3
    shard scales on their halves; 1 on the padding rows)."""
    n_out, n_in = linear_dims(layer, p)
    rows, cols = layer.meta[f"{p}_block"]
    if cols != n_in:  # claims() admits channel and tensor scales only: never reached
        raise BackendError(f"{p}_weight_scale", "one scale per output channel (FP8 row-wise)",
                           f"scale blocks of {rows} x {cols}")
    w = layer.get(f"{p}_w")
    out_rows, in_cols = _round_up(n_out, FP8_DIM_ALIGN), _round_up(n_in, FP8_DIM_ALIGN)
    scale = layer.get(f"{p}_s")[:, :, 0].repeat_interleave(rows, dim=1)[:, :n_out]
    scale = torch.nn.functional.pad(scale, (0, out_rows - n_out), value=1.0).contiguous()
    if (out_rows, in_cols) == (n_out, n_in) and w.is_contiguous():
        return None, scale
    # the zero byte is e4m3's +0; pad works on the bytes
    padded = torch.nn.functional.pad(w.view(torch.uint8), (0, in_cols - n_in, 0, out_rows - n_out))
    return padded.view(torch.float8_e4m3fn), scale


def scaled_gemm_weight(layer: MoELayer, p: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The processed layer's e4m3 [E, out', in'] operand and float32 [E, out'] scales."""
    w = layer.get(f"{p}_mm") if layer.has(f"{p}_mm") else layer.get(f"{p}_w")
    return w, layer.get(f"{p}_mm_scale")


def _round_up(n: int, unit: int) -> int:
    return -(-n // unit) * unit


def _check_finite(what: str, t: torch.Tensor, dtype: torch.dtype) -> None:
    # all() reduces in bool; sum() of a bool tensor would make an int64 copy (56 GiB for
    # DeepSeek-V3's w13 on an H100)
    if not bool(torch.isfinite(t).all()):
        raise BackendError(what, f"values that fit {dtype} (the grouped GEMM's operand dtype)",
                           "values beyond its range")


def operand_cols(n_in: int, bias: bool, dtype: torch.dtype) -> int:
    """Columns of a GEMM operand along its input dimension: the inputs, the bias parts, and
    zeros up to a whole number of 16-byte units."""
    unit = STRIDE_ALIGN_BYTES // dtype.itemsize
    return -(-(n_in + (BIAS_PARTS if bias else 0)) // unit) * unit


def split_bias(bias: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """[..., BIAS_PARTS] in `dtype` summing to float32 `bias`: each part the rounding of what
    the previous ones left (a rounding error is exact in float32)."""
    parts, rest = [], bias
    for _ in range(BIAS_PARTS):
        parts.append(rest.to(dtype))
        rest = rest - parts[-1].to(torch.float32)
    return torch.stack(parts, dim=-1)


def gemm_weight(layer: MoELayer, p: str) -> torch.Tensor:
    """The processed layer's [E, out, in'] operand for linear `p`."""
    return layer.get(f"{p}_mm") if layer.has(f"{p}_mm") else layer.get(f"{p}_w")


# --- the routed sum ------------------------------------------------------------------------

def expert_offsets(expert_sorted: torch.Tensor, E: int) -> torch.Tensor:
    """int32 [E]: offs[e] = number of assignments to experts <= e (end of e's rows), for
    assignments sorted by expert; no host synchronization."""
    bounds = torch.arange(1, E + 1, device=expert_sorted.device, dtype=expert_sorted.dtype)
    return torch.searchsorted(expert_sorted, bounds).to(torch.int32)


def grouped_moe(layer: MoELayer, x: torch.Tensor, token: torch.Tensor, expert: torch.Tensor,
                weight: torch.Tensor) -> torch.Tensor:
    """float32 [rows of x, K]: sum over assignments i of weight[i] * expert[i]'s output for
    row token[i] of x (act dtype), both GEMMs grouped over the experts; expert[i] = -1: the
    assignment adds nothing (and costs no GEMM rows). Fixed shapes, no host synchronization."""
    P = layer.problem
    if token.numel() == 0:  # no rows at all (M = 0): a shape, not a value
        return torch.zeros(x.shape[0], P.K, dtype=torch.float32, device=x.device)
    kept = expert >= 0
    key = torch.where(kept, expert, P.E)  # after every local expert: outside all groups
    order = torch.argsort(key, stable=True)
    token, key, weight, kept = token[order], key[order], weight[order], kept[order]
    offs = expert_offsets(key, P.E)
    outputs = _scaled_expert_outputs if scaled(layer) else _expert_outputs
    y = outputs(layer, x, token, offs)
    y *= weight.unsqueeze(1)
    y.masked_fill_(~kept.unsqueeze(1), 0.0)  # rows past offs[-1]: uninitialized
    return topk_sum(y, token, x.shape[0], P.topk)


def _expert_outputs(layer: MoELayer, x: torch.Tensor, token: torch.Tensor,
                    offs: torch.Tensor) -> torch.Tensor:
    """float32 [assignments, K]: each assignment's expert output, in 16 bits (biases in the
    GEMMs, y rounded to the act dtype)."""
    dtype = x.dtype
    w13, w2 = gemm_weight(layer, "w13"), gemm_weight(layer, "w2")
    xs = _operand(x[token], w13.shape[2], layer.has("w13_bias"))
    h = torch._grouped_mm(xs, w13.transpose(1, 2), offs=offs)
    a = apply_activation(h.to(torch.float32), layer.problem.activation).to(dtype)
    a = _operand(a, w2.shape[2], layer.has("w2_bias"))
    return torch._grouped_mm(a, w2.transpose(1, 2), offs=offs).to(torch.float32)


def _scaled_expert_outputs(layer: MoELayer, x: torch.Tensor, token: torch.Tensor,
                           offs: torch.Tensor) -> torch.Tensor:
    """float32 [assignments, K]: each assignment's expert output (unbiased: `scaled_claims`)
    on the FP8 GEMM, q1 and q2 by the torch backend's quantizers (kernels/activations.py)."""
    P, quant = layer.problem, layer.quant
    dtype = x.dtype
    element = quant.info.activation_element
    a13 = layer.get("a13_scale") if layer.has("a13_scale") else None
    a2 = layer.get("a2_scale") if layer.has("a2_scale") else None
    # per token or one static scale: quantizing x's rows, then gathering, is q1 of x[token]
    codes, scale = quantize_rows(x.to(torch.float32), quant.activation, a13, element)
    h = _scaled_linear(layer, "w13", codes[token], scale[token], offs)
    a = apply_activation(h.to(torch.float32), P.activation).to(dtype)
    codes, scale = quantize_rows(a.to(torch.float32), quant.activation, a2, element)
    return _scaled_linear(layer, "w2", codes, scale, offs).to(torch.float32)


def _scaled_linear(layer: MoELayer, p: str, codes: torch.Tensor, scale: torch.Tensor,
                   offs: torch.Tensor) -> torch.Tensor:
    """bf16 [rows, out]: row i of the e4m3 `codes` (float32 values) times its expert's `p`,
    scaled by scale[i] and the output channels' scales."""
    w, w_scale = scaled_gemm_weight(layer, p)
    a = torch.nn.functional.pad(codes, (0, w.shape[2] - codes.shape[1]))
    out = scaled_grouped_mm(a.to(torch.float8_e4m3fn), w.transpose(1, 2), scale.contiguous(),
                            w_scale, offs)
    return out[:, :linear_dims(layer, p)[0]]


def scaled_grouped_mm(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor,
                      scale_b: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    """The backend's one call of torch's FP8 row-wise grouped GEMM (a seam: the CPU tests put
    an emulation of its documented semantics here). bf16 [rows, n]:
    out[i, j] = bf16((sum_k a[i, k] * b[g, k, j]) * scale_a[i] * scale_b[g, j]), g the group
    holding row i (rows offs[g - 1] to offs[g]); a e4m3 [rows, k] row-major, b e4m3 [G, k, n]
    column-major, scale_a float32 [rows], scale_b float32 [G, n], offs int32 [G]."""
    return torch._scaled_grouped_mm(a, b, scale_a, scale_b, offs=offs,
                                    out_dtype=SCALED_OUT_DTYPE, use_fast_accum=False)


def _operand(t: torch.Tensor, cols: int, bias: bool) -> torch.Tensor:
    """A GEMM's left operand: `t`, ones against the bias parts, zeros up to `cols`."""
    out = t.new_zeros(t.shape[0], cols)
    out[:, :t.shape[1]] = t
    if bias:
        out[:, t.shape[1]:t.shape[1] + BIAS_PARTS] = 1
    return out


def topk_sum(y: torch.Tensor, token: torch.Tensor, rows: int, slots: int) -> torch.Tensor:
    """float32 [rows, K]: out[t] = sum of y[i] over the i with token[i] == t (at most `slots`
    of them), in a fixed order: bit for bit the same on every run (index_add_ on a GPU adds
    a token's assignments in whatever order its atomics land)."""
    by_token = torch.argsort(token, stable=True)
    t = token[by_token]
    slot = torch.arange(t.numel(), device=t.device) - torch.searchsorted(t, t)
    buf = torch.zeros(rows, slots, y.shape[1], dtype=y.dtype, device=y.device)
    buf[t, slot] = y[by_token]
    return buf.sum(1)


__all__ = ["BIAS_PARTS", "GroupedBackend", "expert_map", "expert_offsets", "gemm_weight",
           "grouped_moe", "operand_cols", "scaled_claims", "scaled_gemm_weight",
           "scaled_grouped_mm", "split_bias", "topk_sum"]
