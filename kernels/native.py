"""`TorchBackend`: the production fallback in plain torch, on any device torch runs on (CPU,
CUDA, ROCm, XPU), for every scheme of the vocabulary.

Weights stay in the common kernel format (kernels/convert.py); `forward` dequantizes one
expert at a time to float32 (a DeepSeek-V3 layer, E=256, K=7168, N=2048, never exists in
float32 at once), gathers that expert's tokens and runs both GEMMs in float32, in the order of
the reference:

    x := round(x * r) (router weight on input)      q1 = quantize(x)
    h = round(q1 @ W13_e^T + b13_e)                 a = round(act(h))
    q2 = quantize(a over every assignment)          y = q2 @ W2_e^T + b2_e
    out[t] = cast(sum over the token's experts of r * y)       round(): to the act dtype

`moe_forward` (the routing loop) takes the per-expert weights as a function, so that other
backends holding a different weight layout reuse it (kernels/xpu.py); `routing` (the
assignments of the standard format, fixed shapes, no host synchronization) is shared with
kernels/grouped.py, whose forward a CUDA graph captures.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable

import torch
from moecert.reference.schemes import MX_BLOCK, NVFP4_BLOCK

from .activations import apply_activation, quantize_activation
from .base import BaseBackend
from .convert import (
    convert_to_kernel_format,
    decode_e4m3,
    decode_e8m0,
    element_values,
    export_canonical,
    linear_dims,
    unpack_nibbles,
)
from .layer import MoELayer
from .platform import Platform
from .quant_config import QuantConfig

# (prefix, local expert) -> float32 [out, in] weights of that expert
ExpertWeight = Callable[[str, int], torch.Tensor]


class TorchBackend(BaseBackend):
    name = "torch"
    version = "1"

    def available(self) -> str | None:
        return None

    def claims(self, quant: QuantConfig, problem, platform: Platform) -> str | None:
        # Runs anywhere torch does, any shape a checkpoint can hold (an mxfp8 checkpoint's
        # K % 32 == 0 also covers MXFP8 activations).
        return None

    def convert(self, layer: MoELayer) -> None:
        convert_to_kernel_format(layer)

    def canonical_weights(self, layer: MoELayer):
        return export_canonical(layer)

    def forward(self, layer: MoELayer, x, topk_weights, topk_ids, out,
                expert_num_tokens) -> None:
        moe_forward(layer, x, topk_weights, topk_ids, out, expert_num_tokens,
                    lambda p, e: dequantize_expert(layer, p, e))


# --- one expert's weights out of the common kernel format ---------------------------------

def dequantize_expert(layer: MoELayer, p: str, e: int) -> torch.Tensor:
    """float32 [out, in] weights of linear `p` of local expert `e`."""
    if layer.quant.packed:
        return _dequantize_int(layer, p, e)
    if layer.has(f"{p}_gs"):
        return _dequantize_nvfp4(layer, p, e)
    if not layer.has(f"{p}_s"):
        return layer.get(f"{p}_w")[e].to(torch.float32)  # 16-bit weights carry no scale
    w = element_values(layer.quant.info.element, layer.get(f"{p}_w")[e]).to(torch.float32)
    n_out, n_in = w.shape
    s = layer.get(f"{p}_s")[e]
    if s.dtype == torch.uint8:  # E8M0 exponents, one per 32 columns
        return (w.view(n_out, -1, MX_BLOCK) * decode_e8m0(s).unsqueeze(-1)).view(n_out, n_in)
    rows, cols = layer.meta[f"{p}_block"]
    s = s.repeat_interleave(rows, 0)[:n_out].repeat_interleave(cols, 1)[:, :n_in]
    return w * s


def _dequantize_nvfp4(layer: MoELayer, p: str, e: int) -> torch.Tensor:
    """e2m1 pairs times e4m3 block scales per 16 columns times the shard's global factor."""
    n_out, n_in = linear_dims(layer, p)
    w = element_values("e2m1", layer.get(f"{p}_w")[e])
    gs = layer.get(f"{p}_gs")[e].to(torch.float32)  # [1] or [2]: w1 rows, w3 rows
    s = decode_e4m3(layer.get(f"{p}_s")[e]) * gs.repeat_interleave(n_out // gs.numel())[:, None]
    return (w.view(n_out, -1, NVFP4_BLOCK) * s.unsqueeze(-1)).view(n_out, n_in)


def _dequantize_int(layer: MoELayer, p: str, e: int) -> torch.Tensor:
    n_out, n_in = linear_dims(layer, p)
    bits = layer.meta["bits"]
    q = layer.get(f"{p}_q")[e]
    u = (unpack_nibbles(q, n_in) if bits == 4 else q).to(torch.float32)
    s = layer.get(f"{p}_s")[e]
    zp = layer.get(f"{p}_zp")[e].to(torch.float32) if layer.has(f"{p}_zp") else None
    if layer.has(f"{p}_g_idx"):  # act order: each column names its group
        g_idx = layer.get(f"{p}_g_idx")[e].to(torch.int64)
        zero = zp[:, g_idx] if zp is not None else float(1 << (bits - 1))
        return (u - zero) * s[:, g_idx]
    cols = layer.meta[f"{p}_group_cols"]
    u = u.view(n_out, -1, cols)
    zero = zp.unsqueeze(-1) if zp is not None else float(1 << (bits - 1))
    return ((u - zero) * s.unsqueeze(-1)).view(n_out, n_in)


# --- the routing loop -----------------------------------------------------------------------

def moe_forward(layer: MoELayer, x: torch.Tensor, topk_weights, topk_ids, out: torch.Tensor,
                expert_num_tokens, expert_weight: ExpertWeight) -> None:
    """The layer's output for validated inputs into `out` (standard or batched format), with
    weights from `expert_weight`, biases and static activation scales from the layer
    (w13_bias, w2_bias, a13_scale, a2_scale: float32, when present)."""
    routed = functools.partial(routed_moe, expert_weight=expert_weight)
    P = layer.problem
    if P.activation_format == "batched":
        E, T, K = x.shape
        counts = expert_num_tokens.to(device=x.device, dtype=torch.int64)
        valid = (torch.arange(T, device=x.device) < counts.unsqueeze(1)).flatten()
        rows = valid.nonzero().squeeze(1)
        experts = torch.arange(E, device=x.device).repeat_interleave(T)[rows]
        ones = torch.ones(rows.numel(), dtype=torch.float32, device=x.device)
        y = routed(layer, x.view(E * T, K)[rows], torch.arange(rows.numel(),
                   device=x.device), experts, ones)
        flat = out.view(E * T, K)
        flat.zero_()  # rows past each expert's count come back zero
        flat[rows] = y.to(out.dtype)
        return
    expert_map = None
    if P.expert_map is not None:
        expert_map = torch.tensor(P.expert_map, dtype=torch.int64, device=x.device)
    x, token, local, weight = routing(P, x, topk_weights, topk_ids, expert_map)
    keep = local >= 0  # experts of other ranks contribute nothing
    y = routed(layer, x, token[keep], local[keep], weight[keep])
    out.copy_(y)


def routing(problem, x: torch.Tensor, topk_weights: torch.Tensor, topk_ids: torch.Tensor,
            expert_map: torch.Tensor | None) -> tuple[torch.Tensor, ...]:
    """(x, token, local expert, router weight) of the standard format's M x topk assignments,
    token-major: x times the router weight where it applies on the input (the weights then
    1); local expert -1 for an expert of another rank (`expert_map`: int64 [global E] on x's
    device, or None). Shapes from the input's only, no host synchronization."""
    P = problem
    M = x.shape[0]
    weights = topk_weights
    if P.apply_router_weight_on_input:  # topk == 1: scale the input, not the output
        x = (x.to(torch.float32) * topk_weights).to(x.dtype)
        weights = torch.ones_like(topk_weights)
    ids = topk_ids.to(torch.int64)
    if expert_map is not None:
        ids = expert_map[ids]
    token = torch.arange(M, device=x.device).repeat_interleave(P.topk)
    return x, token, ids.flatten(), weights.flatten()


def routed_moe(layer: MoELayer, x: torch.Tensor, token: torch.Tensor, expert: torch.Tensor,
               weight: torch.Tensor, expert_weight: ExpertWeight) -> torch.Tensor:
    """float32 [rows of x, K]: sum over assignments i of weight[i] * expert[i]'s output for
    row token[i] of x (act dtype). q1 spans every row of x, q2 every assignment."""
    P, quant = layer.problem, layer.quant
    dtype = x.dtype
    a13 = layer.get("a13_scale") if layer.has("a13_scale") else None
    a2 = layer.get("a2_scale") if layer.has("a2_scale") else None
    b13 = layer.get("w13_bias") if layer.has("w13_bias") else None
    b2 = layer.get("w2_bias") if layer.has("w2_bias") else None
    element = quant.info.activation_element
    xq = quantize_activation(x.to(torch.float32), quant.activation, a13, quant.mx_scale_rule,
                             element)

    order = torch.argsort(expert, stable=True)
    token, expert, weight = token[order], expert[order], weight[order]
    counts = torch.bincount(expert, minlength=P.E).tolist()  # the loop's one host sync
    starts = list(itertools.accumulate(counts, initial=0))
    busy = [e for e, c in enumerate(counts) if c]

    inter = torch.empty(token.numel(), P.N, dtype=dtype, device=x.device)
    for e in busy:
        lo, hi = starts[e], starts[e + 1]
        h = xq[token[lo:hi]] @ expert_weight("w13", e).T
        if b13 is not None:
            h += b13[e]
        h = h.to(dtype).to(torch.float32)  # kernels write h in the act dtype
        inter[lo:hi] = apply_activation(h, P.activation).to(dtype)
    # after every expert's GEMM1: a per-tensor dynamic scale spans all assignments
    inter_q = quantize_activation(inter.to(torch.float32), quant.activation, a2,
                                  quant.mx_scale_rule, element)
    del inter
    acc = torch.zeros(x.shape[0], P.K, dtype=torch.float32, device=x.device)
    for e in busy:
        lo, hi = starts[e], starts[e + 1]
        y = inter_q[lo:hi] @ expert_weight("w2", e).T
        if b2 is not None:
            y += b2[e]
        acc.index_add_(0, token[lo:hi], y * weight[lo:hi].unsqueeze(1))
    return acc


__all__ = ["TorchBackend", "dequantize_expert", "moe_forward", "routed_moe", "routing"]
