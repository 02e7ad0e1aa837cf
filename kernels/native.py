"""`TorchBackend`: the production fallback in plain torch, on any device torch runs on (CPU,
CUDA, ROCm, XPU), for every scheme of the vocabulary.

Weights stay in the common kernel format (kernels/convert.py); `forward` dequantizes one
expert at a time to float32 (a DeepSeek-V3 layer, E=256, K=7168, N=2048, never exists in
float32 at once), gathers that expert's tokens and runs both GEMMs in float32, in the order of
the reference:

    x := round(x * r) (router weight on input)      q1 = quantize(x)
    h = round((q1 * p13_e) @ W13_e^T + b13_e)       a = round(act(h))
    q2 = quantize(a over every assignment)          y = (q2 * p2_e) @ W2_e^T + b2_e
    (p13_e, p2_e: a layout's pre_quant_scale per input column, ModelOpt AWQ; 1 elsewhere)
    out[t] = cast(sum over the token's experts of r * y)       round(): to the act dtype

Each step is a method (`TorchBackend`), so a backend holding a different weight layout
overrides `expert_weight` (kernels/xpu.py) and a mutant the one step it breaks
(conformance/mutants/). The weights of one expert come from `codecs.dequantize_expert`, the
assignments from `routing.routing`, both shared with kernels/grouped.py (and re-exported
here, where they lived until issue 35).
"""

from __future__ import annotations

import itertools

import torch

from .activations import apply_activation, quantize_activation
from .base import BaseBackend
from .codecs import dequantize_expert
from .convert import convert_to_kernel_format, export_canonical
from .layer import MoELayer
from .platform import Platform
from .quant_config import Variant
from .routing import routing


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

    def claims(self, variant: Variant, problem, platform: Platform) -> str | None:
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
            w13, b13e = self.expert_weight(layer, "w13", e), None if b13 is None else b13[e]
            if layer.has("w13_pre"):  # this expert's rows, each column times its scale
                rows = token[lo:hi]
                h = self.gemm1(layer, self.pre_scale(layer, "w13", e, xq[rows]), x32[rows],
                               torch.arange(hi - lo, device=x.device), w13, b13e)
            else:
                h = self.gemm1(layer, xq, x32, token[lo:hi], w13, b13e)
            h = h.to(dtype).to(torch.float32)  # kernels write h in the act dtype
            inter[lo:hi] = self.activation(layer, h).to(dtype)
        # after every expert's GEMM1: a per-tensor dynamic scale spans all assignments
        inter_q = self.quantize(layer, inter.to(torch.float32), "w2", a2)
        del inter
        parts = ((token[starts[e]:starts[e + 1]],
                  self.gemm2(layer, self.pre_scale(layer, "w2", e,
                                                   inter_q[starts[e]:starts[e + 1]]),
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

    def pre_scale(self, layer: MoELayer, p: str, e: int, t: torch.Tensor) -> torch.Tensor:
        """float32 GEMM input `t` of linear `p` of local expert `e`, each column times the
        layout's per-input-channel multiplier (ModelOpt AWQ's pre_quant_scale, `{p}_pre`);
        `t` as is for layouts without one."""
        return t * layer.get(f"{p}_pre")[e] if layer.has(f"{p}_pre") else t

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


__all__ = ["TorchBackend", "dequantize_expert", "routing"]
