"""`GroupedBackend`: the MoE layer on PyTorch's own grouped GEMM, `torch._grouped_mm` (CUTLASS
on sm90 / sm100 in bf16; elsewhere, and for fp16, torch's fallback: one mm per group).

Weights are dequantized once, at processing, to the activation dtype (the prefill path for
int4 / int8 / fp8 / mxfp8 weights: compute-bound at large M, so the wider weights cost little):

    w13_mm  act dtype [E, w13_rows, K']     w2_mm  act dtype [E, K, N']
    K', N': K and N rounded up to 16 bytes of the act dtype (torch._grouped_mm needs 16-byte
    strides), zero columns past K and N; absent where the checkpoint's 16-bit weights already
    are that (the common kernel format's {p}_w, kernels/convert.py, is then read directly).

The forward (the torch backend's routing, kernels/native.py `moe_forward`, around):

    sort the assignments by local expert; offs[e] = assignments of experts <= e (int32)
    h = x[token] @ W13^T (one grouped GEMM, float32 accumulation, rounded to the act dtype);
    + b13 in float32 and rounded again where there is a bias
    a = round(act(h))                 y = a @ W2^T (grouped, rounded) + b2 (float32)
    out[t] = cast(sum over the token's assignments of r * y), in a fixed order

Numerics against the reference: weights rounded to the act dtype once (code * scale computed
in float32 first), the GEMM outputs rounded to the act dtype (h with a bias twice; each
assignment's y before the top-k sum, as vLLM's fused MoE does). 16-bit activations only: int8,
FP8 and MXFP8 activations need a scaled grouped GEMM (torch._scaled_grouped_mm, FP8 row-wise;
not done, it has no CPU kernel to test it on).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
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

def aligned_cols(n: int, dtype: torch.dtype) -> int:
    """`n` rounded up to a whole number of 16-byte units of `dtype`."""
    unit = STRIDE_ALIGN_BYTES // dtype.itemsize
    return -(-n // unit) * unit


def _gemm_weight(layer: MoELayer, p: str) -> torch.Tensor | None:
    """[E, out, in'] in the act dtype, or None where the kernel format's {p}_w is that."""
    dtype = layer.problem.torch_dtype
    n_out, n_in = linear_dims(layer, p)
    cols = aligned_cols(n_in, dtype)
    if layer.has(f"{p}_w") and not layer.has(f"{p}_s"):  # 16-bit weights
        w = layer.get(f"{p}_w")
        if w.dtype == dtype and cols == n_in:
            return None
    E = layer.problem.E
    out = torch.zeros(E, n_out, cols, dtype=dtype, device=layer.device)
    for e in range(E):  # float32 one expert at a time: a DeepSeek-V3 layer never is at once
        out[e, :, :n_in] = dequantize_expert(layer, p, e)
    bad = int((~torch.isfinite(out)).sum())
    if bad:
        raise BackendError(f"{p} weights", f"values that fit {dtype} (the grouped GEMM's "
                           "operand dtype)", f"{bad} dequantized weights beyond its range")
    return out


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

    xs = _pad_cols(x[token], w13.shape[2])
    h = torch._grouped_mm(xs, w13.transpose(1, 2), offs=offs)
    if layer.has("w13_bias"):
        h = (h.to(torch.float32) + layer.get("w13_bias")[expert]).to(dtype)
    a = _pad_cols(apply_activation(h.to(torch.float32), P.activation).to(dtype), w2.shape[2])
    y = torch._grouped_mm(a, w2.transpose(1, 2), offs=offs).to(torch.float32)
    if layer.has("w2_bias"):
        y += layer.get("w2_bias")[expert]
    y *= weight.unsqueeze(1)
    return topk_sum(y, token, x.shape[0], P.topk)


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


def _pad_cols(t: torch.Tensor, cols: int) -> torch.Tensor:
    return t if t.shape[1] == cols else F.pad(t, (0, cols - t.shape[1]))


__all__ = ["GroupedBackend", "aligned_cols", "expert_offsets", "gemm_weight", "grouped_moe",
           "topk_sum"]
