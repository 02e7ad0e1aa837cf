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

The forward (the torch backend's routing, kernels/native.py `moe_forward`, around):

    sort the assignments by local expert; offs[e] = assignments of experts <= e (int32)
    h = [x[token], 1, 1, 1] @ W13'^T     one grouped GEMM (float32 accumulation, one rounding)
    a = round(act(h))                    y = [a, 1, 1, 1] @ W2'^T (the same)
    out[t] = cast(sum over the token's assignments of r * y), in a fixed order

Numerics against the reference: weights rounded to the act dtype once (code * scale computed
in float32 first, as the legitimate twin conformance/mutants/legit.py does); each assignment's
y rounded to the act dtype before the top-k sum, as vLLM's fused MoE does. That rounding is
not in the reference, and the exact tier's structured inputs are not exact under it when a
bias feeds a top-k > 1 sum (tests/kernels/test_grouped_backend.py shows which); the harness
runs the exact tier on unbiased cases, where this backend is bit for bit the reference.
16-bit activations only: int8, FP8 and MXFP8 activations need a scaled grouped GEMM
(torch._scaled_grouped_mm, FP8 row-wise; not done, it has no CPU kernel to test it on).
"""

from __future__ import annotations

import torch
from moecert.reference.schemes import ACT_NONE

from .activations import apply_activation
from .base import BaseBackend
from .convert import PREFIXES, convert_to_kernel_format, export_canonical, linear_dims
from .errors import BackendError
from .layer import MoELayer
from .native import dequantize_expert, moe_forward
from .platform import Platform
from .quant_config import QuantConfig

# torch._grouped_mm checks that every operand's leading stride is a multiple of 16 bytes
# (aten/src/ATen/native/GroupedMMUtils.h, check_valid_strides_and_return_transposed).
STRIDE_ALIGN_BYTES = 16
# act-dtype parts of a float32 bias: 3 x 8 significant bits hold bf16's 24 exactly
BIAS_PARTS = 3


class GroupedBackend(BaseBackend):
    name = "grouped"
    version = "1"

    def available(self) -> str | None:
        if not hasattr(torch, "_grouped_mm"):
            return f"torch {torch.__version__} has no torch._grouped_mm (torch >= 2.8 has)"
        return None

    def claims(self, quant: QuantConfig, problem, platform: Platform) -> str | None:
        if quant.activation != ACT_NONE:
            return (f"activation quantization {quant.activation} not supported: the grouped "
                    "GEMM takes 16-bit activations (int8 / FP8 / MXFP8 activations need "
                    "torch._scaled_grouped_mm, not done)")
        return None

    def convert(self, layer: MoELayer) -> None:
        convert_to_kernel_format(layer)
        gemm_weights = {p: _gemm_weight(layer, p) for p in PREFIXES}  # every check first
        for p, w in gemm_weights.items():
            if w is not None:
                layer.put(f"{p}_mm", w)

    def canonical_weights(self, layer: MoELayer):
        return export_canonical(layer)  # the common kernel format is kept beside {p}_mm

    def describe(self, layer: MoELayer) -> str:
        dtype = layer.problem.torch_dtype
        path = ("CUTLASS on sm90/sm100, else torch's per-group fallback"
                if dtype == torch.bfloat16 else "torch's per-group fallback on CUDA")
        return f"torch._grouped_mm in {str(dtype).removeprefix('torch.')} ({path})"

    def forward(self, layer: MoELayer, x, topk_weights, topk_ids, out,
                expert_num_tokens) -> None:
        moe_forward(layer, x, topk_weights, topk_ids, out, expert_num_tokens,
                    routed=grouped_moe)


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
    for e in range(E):  # float32 one expert at a time: a DeepSeek-V3 layer never is at once
        out[e, :, :n_in] = dequantize_expert(layer, p, e)
        _check_finite(f"{p} weights of expert {e}", out[e], dtype)
    if bias is not None:
        out[:, :, n_in:n_in + BIAS_PARTS] = split_bias(bias, dtype)
        _check_finite(f"{p}_bias", out[:, :, n_in:n_in + BIAS_PARTS], dtype)
    return out


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
    row token[i] of x (act dtype), both GEMMs grouped over the experts (`RoutedSum`)."""
    P = layer.problem
    dtype = x.dtype
    if token.numel() == 0:  # every assignment on another rank
        return torch.zeros(x.shape[0], P.K, dtype=torch.float32, device=x.device)
    order = torch.argsort(expert, stable=True)
    token, expert, weight = token[order], expert[order], weight[order]
    offs = expert_offsets(expert, P.E)
    w13, w2 = gemm_weight(layer, "w13"), gemm_weight(layer, "w2")

    xs = _operand(x[token], w13.shape[2], layer.has("w13_bias"))
    h = torch._grouped_mm(xs, w13.transpose(1, 2), offs=offs)
    a = apply_activation(h.to(torch.float32), P.activation).to(dtype)
    a = _operand(a, w2.shape[2], layer.has("w2_bias"))
    y = torch._grouped_mm(a, w2.transpose(1, 2), offs=offs).to(torch.float32)
    y *= weight.unsqueeze(1)
    return topk_sum(y, token, x.shape[0], P.topk)


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


__all__ = ["BIAS_PARTS", "GroupedBackend", "expert_offsets", "gemm_weight", "grouped_moe",
           "operand_cols", "split_bias", "topk_sum"]
