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

Each step is a method (`TorchBackend`), so a backend holding a different weight layout
overrides `expert_weight` (kernels/xpu.py) and a mutant the one step it breaks
(conformance/mutants/); `routing` (the assignments of the standard format, fixed shapes, no
host synchronization) is shared with kernels/grouped.py, whose forward a CUDA graph captures.
"""

from __future__ import annotations

import itertools

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


class TorchBackend(BaseBackend):
    """The forward pass is one method per step, in the reference's order (the module
    docstring): `route`, `quantize` (q1 and q2), `gemm1`, `activation`, `gemm2`, `combine`
    (the top-k sum) and `write`, with the weights from `expert_weight` and the biases from
    `bias`. A backend holding another weight layout overrides `expert_weight`
    (kernels/xpu.py); a mutant overrides the one step it breaks (conformance/mutants/)."""

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
        """The layer's output for validated inputs into `out` (standard or batched
        format)."""
        if layer.problem.activation_format == "batched":
            E, T, K = x.shape
            counts = expert_num_tokens.to(device=x.device, dtype=torch.int64)
            rows = self.batched_rows(layer, counts, T).nonzero().squeeze(1)
            experts = torch.arange(E, device=x.device).repeat_interleave(T)[rows]
            ones = torch.ones(rows.numel(), dtype=torch.float32, device=x.device)
            y = self.routed(layer, x.view(E * T, K)[rows],
                            torch.arange(rows.numel(), device=x.device), experts, ones)
            flat = out.view(E * T, K)
            flat.zero_()  # rows past each expert's count come back zero
            flat[rows] = y.to(out.dtype)
            return
        x, token, local, weight = self.route(layer, x, topk_weights, topk_ids)
        keep = local >= 0  # experts of other ranks contribute nothing
        self.write(layer, out, self.routed(layer, x, token[keep], local[keep], weight[keep]))

    def routed(self, layer: MoELayer, x: torch.Tensor, token: torch.Tensor,
               expert: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """float32 [rows of x, K]: sum over assignments i of weight[i] * expert[i]'s output
        for row token[i] of x (act dtype). q1 spans every row of x, q2 every assignment."""
        P = layer.problem
        dtype = x.dtype
        a13 = layer.get("a13_scale") if layer.has("a13_scale") else None
        a2 = layer.get("a2_scale") if layer.has("a2_scale") else None
        b13, b2 = self.bias(layer, "w13_bias"), self.bias(layer, "w2_bias")
        x32 = x.to(torch.float32)
        xq = self.quantize(layer, x32, "w13", a13)

        order = torch.argsort(expert, stable=True)
        token, expert, weight = token[order], expert[order], weight[order]
        counts = torch.bincount(expert, minlength=P.E).tolist()  # the loop's one host sync
        starts = list(itertools.accumulate(counts, initial=0))
        busy = [e for e, c in enumerate(counts) if c]

        inter = torch.empty(token.numel(), P.N, dtype=dtype, device=x.device)
        for e in busy:
            lo, hi = starts[e], starts[e + 1]
            h = self.gemm1(layer, xq, x32, token[lo:hi], self.expert_weight(layer, "w13", e),
                           None if b13 is None else b13[e])
            h = h.to(dtype).to(torch.float32)  # kernels write h in the act dtype
            inter[lo:hi] = self.activation(layer, h).to(dtype)
        # after every expert's GEMM1: a per-tensor dynamic scale spans all assignments
        inter_q = self.quantize(layer, inter.to(torch.float32), "w2", a2)
        del inter
        parts = ((token[starts[e]:starts[e + 1]],
                  self.gemm2(layer, inter_q[starts[e]:starts[e + 1]],
                             self.expert_weight(layer, "w2", e), None if b2 is None else b2[e],
                             weight[starts[e]:starts[e + 1]]))
                 for e in busy)  # one expert's rows at a time, as combine consumes them
        return self.combine(layer, x.shape[0], parts, dtype)

    # --- the steps ----------------------------------------------------------------------------
    def route(self, layer: MoELayer, x, topk_weights, topk_ids) -> tuple[torch.Tensor, ...]:
        """(x, token, local expert, router weight) of the standard format's assignments
        (`routing`)."""
        P = layer.problem
        expert_map = (None if P.expert_map is None else
                      torch.tensor(P.expert_map, dtype=torch.int64, device=x.device))
        return routing(P, x, topk_weights, topk_ids, expert_map)

    def batched_rows(self, layer: MoELayer, counts: torch.Tensor, T: int) -> torch.Tensor:
        """bool [E * T]: the rows of the batched input that hold a token."""
        return (torch.arange(T, device=counts.device) < counts.unsqueeze(1)).flatten()

    def expert_weight(self, layer: MoELayer, p: str, e: int) -> torch.Tensor:
        """float32 [out, in] weights of linear `p` of local expert `e`."""
        return dequantize_expert(layer, p, e)

    def bias(self, layer: MoELayer, name: str) -> torch.Tensor | None:
        return layer.get(name) if layer.has(name) else None

    def quantize(self, layer: MoELayer, t: torch.Tensor, which: str,
                 static: torch.Tensor | None) -> torch.Tensor:
        """q1 (`which` "w13") or q2 ("w2") of float32 `t`, quantized and dequantized."""
        quant = layer.quant
        a = "a13" if which == "w13" else "a2"
        g = layer.get(f"{a}_global") if layer.has(f"{a}_global") else None
        return quantize_activation(t, quant.activation, static, quant.mx_scale_rule,
                                   quant.info.activation_element, global_scale=g)

    def gemm1(self, layer: MoELayer, xq: torch.Tensor, x: torch.Tensor, rows: torch.Tensor,
              w: torch.Tensor, b13: torch.Tensor | None) -> torch.Tensor:
        """float32 q1(x)[rows] @ W13^T + b13 (`x`: the unquantized input, for a mutant's
        scale bug)."""
        h = xq[rows] @ w.T
        if b13 is not None:
            h += b13
        return h

    def activation(self, layer: MoELayer, h: torch.Tensor) -> torch.Tensor:
        return apply_activation(h, layer.problem.activation)

    def gemm2(self, layer: MoELayer, a: torch.Tensor, w: torch.Tensor,
              b2: torch.Tensor | None, weight: torch.Tensor) -> torch.Tensor:
        """float32 router weight * (q2(a) @ W2^T + b2)."""
        y = a @ w.T
        if b2 is not None:
            y += b2
        return y * weight.unsqueeze(1)

    def combine(self, layer: MoELayer, rows: int, parts, dtype) -> torch.Tensor:
        """float32 [rows, K]: the sum of each (token indices, contributions) part, in
        order (`dtype`: the act dtype, for a mutant that sums in it)."""
        acc = torch.zeros(rows, layer.problem.K, dtype=torch.float32, device=layer.device)
        for token, y in parts:
            acc.index_add_(0, token, y)
        return acc

    def write(self, layer: MoELayer, out: torch.Tensor, y: torch.Tensor) -> None:
        out.copy_(y)


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


# --- routing -------------------------------------------------------------------------------

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


__all__ = ["TorchBackend", "dequantize_expert", "routing"]
