"""Mutants of the torch backend's forward pass: a bug in routing, activation quantization,
the activation, a bias or the reduction; the weights in the layer stay correct.

`HookedTorchBackend` is the torch backend with its routing loop (kernels/native.py's
`moe_forward` and `routed_moe`) copied here and cut into one method per step, so that each
mutant overrides exactly one step. Unmutated, it is bit for bit the torch backend (the mutant
test checks that). Where a bug is realistic below, it names the engine pattern it comes from.
"""

from __future__ import annotations

import itertools
import random

import torch
from moecert.kernels.activations import (
    apply_activation,
    qdq_groups,
    quantize_activation,
    swigluoai,
)
from moecert.kernels.convert import element_values, pow2
from moecert.kernels.native import TorchBackend, dequantize_expert
from moecert.reference.schemes import (
    ACT_DYNAMIC_GROUP,
    ACT_DYNAMIC_TENSOR,
    ACT_DYNAMIC_TOKEN,
    ACT_MXFP8,
    ACT_NVFP4,
    ACT_STATIC_TENSOR,
    E8M0_BIAS,
    INT8_MAX,
    MX_BLOCK,
    SWIGLUOAI_LIMIT,
)

# Rows per tile of a GPU kernel's M dimension (the partial-block mutant drops the last tile)
BLOCK_M = 16


class HookedTorchBackend(TorchBackend):
    """The torch backend, its forward pass one overridable method per step."""

    name = "hooked-torch"

    # --- the steps ------------------------------------------------------------------------
    def expert_weight(self, layer, p: str, e: int) -> torch.Tensor:
        return dequantize_expert(layer, p, e)

    def bias(self, layer, name: str) -> torch.Tensor | None:
        return layer.get(name) if layer.has(name) else None

    def weigh_input(self, layer, x, topk_weights):
        """apply_router_weight_on_input: (scaled x, weights for the output)."""
        x = (x.to(torch.float32) * topk_weights).to(x.dtype)
        return x, torch.ones_like(topk_weights)

    def local_ids(self, layer, ids: torch.Tensor) -> torch.Tensor:
        """Global topk ids -> local expert ids, -1 for experts of other ranks."""
        P = layer.problem
        if P.expert_map is None:
            return ids
        expert_map = torch.tensor(P.expert_map, dtype=torch.int64, device=ids.device)
        return expert_map[ids]

    def batched_valid(self, layer, counts: torch.Tensor, T: int) -> torch.Tensor:
        """bool [E * T]: rows of the batched input that hold a token."""
        return (torch.arange(T, device=counts.device) < counts.unsqueeze(1)).flatten()

    def quantize(self, layer, t: torch.Tensor, which: str, static: torch.Tensor | None):
        """q1 (which == "w13") or q2 ("w2") on float32 t."""
        quant = layer.quant
        return quantize_activation(t, quant.activation, static, quant.mx_scale_rule,
                                   quant.info.activation_element)

    def gemm1(self, layer, xq, x, w, b13):
        """h = q1(x) @ W13^T + b13 in float32 (x: the unquantized rows, for scale bugs)."""
        h = xq @ w.T
        if b13 is not None:
            h += b13
        return h

    def activation(self, layer, h: torch.Tensor) -> torch.Tensor:
        return apply_activation(h, layer.problem.activation)

    def gemm2(self, layer, a, w, b2, weight):
        """router weight * (q2(a) @ W2^T + b2), float32."""
        y = a @ w.T
        if b2 is not None:
            y += b2
        return y * weight.unsqueeze(1)

    def combine(self, layer, rows: int, parts, dtype) -> torch.Tensor:
        """float32 [rows, K]: the sum of each (token index, contribution) part, in order."""
        acc = torch.zeros(rows, layer.problem.K, dtype=torch.float32, device=layer.device)
        for token, y in parts:
            acc.index_add_(0, token, y)
        return acc

    def write(self, layer, out: torch.Tensor, y: torch.Tensor) -> None:
        out.copy_(y)

    # --- kernels/native.py's moe_forward and routed_moe, calling the steps ----------------
    def forward(self, layer, x, topk_weights, topk_ids, out, expert_num_tokens) -> None:
        P = layer.problem
        if P.activation_format == "batched":
            E, T, K = x.shape
            counts = expert_num_tokens.to(device=x.device, dtype=torch.int64)
            rows = self.batched_valid(layer, counts, T).nonzero().squeeze(1)
            experts = torch.arange(E, device=x.device).repeat_interleave(T)[rows]
            ones = torch.ones(rows.numel(), dtype=torch.float32, device=x.device)
            y = self.routed(layer, x.view(E * T, K)[rows],
                            torch.arange(rows.numel(), device=x.device), experts, ones)
            flat = out.view(E * T, K)
            flat.zero_()
            flat[rows] = y.to(out.dtype)
            return
        M = x.shape[0]
        weights = topk_weights
        if P.apply_router_weight_on_input:
            x, weights = self.weigh_input(layer, x, topk_weights)
        ids = self.local_ids(layer, topk_ids.to(torch.int64))
        token = torch.arange(M, device=x.device).repeat_interleave(P.topk)
        local, weight = ids.flatten(), weights.flatten()
        keep = local >= 0
        y = self.routed(layer, x, token[keep], local[keep], weight[keep])
        self.write(layer, out, y)

    def routed(self, layer, x, token, expert, weight) -> torch.Tensor:
        P = layer.problem
        dtype = x.dtype
        a13 = layer.get("a13_scale") if layer.has("a13_scale") else None
        a2 = layer.get("a2_scale") if layer.has("a2_scale") else None
        b13, b2 = self.bias(layer, "w13_bias"), self.bias(layer, "w2_bias")
        x32 = x.to(torch.float32)
        xq = self.quantize(layer, x32, "w13", a13)

        order = torch.argsort(expert, stable=True)
        token, expert, weight = token[order], expert[order], weight[order]
        counts = torch.bincount(expert, minlength=P.E).tolist()
        starts = list(itertools.accumulate(counts, initial=0))
        busy = [e for e, c in enumerate(counts) if c]

        inter = torch.empty(token.numel(), P.N, dtype=dtype, device=x.device)
        for e in busy:
            lo, hi = starts[e], starts[e + 1]
            rows = token[lo:hi]
            h = self.gemm1(layer, xq[rows], x32[rows], self.expert_weight(layer, "w13", e),
                           None if b13 is None else b13[e])
            h = h.to(dtype).to(torch.float32)
            inter[lo:hi] = self.activation(layer, h).to(dtype)
        inter_q = self.quantize(layer, inter.to(torch.float32), "w2", a2)
        del inter
        parts = []
        for e in busy:
            lo, hi = starts[e], starts[e + 1]
            parts.append((token[lo:hi], self.gemm2(layer, inter_q[lo:hi],
                                                   self.expert_weight(layer, "w2", e),
                                                   None if b2 is None else b2[e],
                                                   weight[lo:hi])))
        return self.combine(layer, x.shape[0], parts, dtype)


# --- routing ---------------------------------------------------------------------------------

class RouterWeightTwice(HookedTorchBackend):
    """vLLM #43694: prepare scales the input by the router weight, the experts weigh the
    output again (the weights are not replaced by ones)."""

    name = "mutant-router-weight-twice"

    def weigh_input(self, layer, x, topk_weights):
        x, _ = super().weigh_input(layer, x, topk_weights)
        return x, topk_weights


class ExpertMapIgnored(HookedTorchBackend):
    """Global topk ids used as local ids; ids past the local experts dropped as if remote."""

    name = "mutant-expert-map-ignored"

    def local_ids(self, layer, ids):
        return torch.where(ids < layer.problem.E, ids, torch.full_like(ids, -1))


class BatchedCountsIgnored(HookedTorchBackend):
    """Batched format: expert_num_tokens ignored, every row of every expert's slab computed
    and written (rows past the count hold stale data, not zeros)."""

    name = "mutant-batched-counts-ignored"

    def batched_valid(self, layer, counts, T):
        return torch.ones(counts.numel() * T, dtype=torch.bool, device=counts.device)


# --- activation quantization -----------------------------------------------------------------

class PerTokenAsPerTensor(HookedTorchBackend):
    """q1's dynamic per-token int8 scale computed over the whole input (one scale), the
    per-tensor kernel picked for a per-token config."""

    name = "mutant-per-token-as-per-tensor"

    def quantize(self, layer, t, which, static):
        if which == "w13" and layer.quant.activation == ACT_DYNAMIC_TOKEN:
            return quantize_activation(t, ACT_DYNAMIC_TENSOR,
                                       element=layer.quant.info.activation_element)
        return super().quantize(layer, t, which, static)


class GroupsAlongM(HookedTorchBackend):
    """DeepSeek 1x128 activation groups taken along the token dimension: each column's scale
    is the amax of up to 128 tokens of that column, not of 128 columns of the token (the
    scale tensor [tokens, K/128] written or read transposed)."""

    name = "mutant-fp8-groups-along-m"

    def quantize(self, layer, t, which, static):
        if layer.quant.activation == ACT_DYNAMIC_GROUP:
            return qdq_groups(t.T, layer.quant.info.activation_element).T
        return super().quantize(layer, t, which, static)


class StaticA2ScaleUnloaded(HookedTorchBackend):
    """Static int8: w2_input_scale never loaded (a parameter-name mismatch), so GEMM2's input
    is quantized with the parameter's initial value, 1.0."""

    name = "mutant-a2-static-scale-unloaded"

    def quantize(self, layer, t, which, static):
        if which == "w2" and layer.quant.activation == ACT_STATIC_TENSOR:
            static = torch.ones_like(static)
        return super().quantize(layer, t, which, static)


class Nvfp4A2GlobalScaleFromA1(HookedTorchBackend):
    """NVFP4 activations: GEMM2's input quantized with a1's global scale (a1_gscale passed
    where a2_gscale belongs) while GEMM2's alpha keeps a2's input scale: the quantizer's
    block scales and the dequantizing alpha disagree by the ratio of the two scales."""

    name = "mutant-nvfp4-a2-gscale-from-a1"

    def quantize(self, layer, t, which, static):
        if which == "w2" and layer.quant.activation == ACT_NVFP4:
            a1 = layer.get("a13_scale")
            # the kernel's output of q * bs' is scaled by alpha = a2 scale * weight scale
            return super().quantize(layer, t, which, a1) * (static / a1)
        return super().quantize(layer, t, which, static)


class MxScaleRuleWrong(HookedTorchBackend):
    """MXFP8 activations: the scale exponent rounded with ceil (the 'ceil' rule) whatever the
    checkpoint's rule says: one fewer bit for blocks whose maximum is not a power of two."""

    name = "mutant-mxfp8-scale-rule"

    def quantize(self, layer, t, which, static):
        if layer.quant.activation == ACT_MXFP8:
            rule = "ceil" if layer.quant.mx_scale_rule != "ceil" else "floor"
            return quantize_activation(t, ACT_MXFP8, None, rule)
        return super().quantize(layer, t, which, static)


# --- GEMM epilogues --------------------------------------------------------------------------

class BiasScaledByActivationScale(HookedTorchBackend):
    """int8 activations: the w13 bias added to the int32 accumulator, before the epilogue
    multiplies by the activation scale (the bias sits in the activation scale's slot), so
    the bias comes out multiplied by that scale."""

    name = "mutant-bias-in-scale-slot"

    def gemm1(self, layer, xq, x, w, b13):
        if b13 is None or layer.quant.activation not in (
                ACT_DYNAMIC_TOKEN, ACT_DYNAMIC_TENSOR, ACT_STATIC_TENSOR):
            return super().gemm1(layer, xq, x, w, b13)
        mode = layer.quant.activation
        if mode == ACT_DYNAMIC_TOKEN:
            scale = x.abs().amax(-1, keepdim=True) / INT8_MAX
        elif mode == ACT_STATIC_TENSOR:
            scale = layer.get("a13_scale")
        else:  # per tensor over this expert's rows only: close enough to show the bug
            scale = x.abs().amax() / INT8_MAX
        return xq @ w.T + b13 * scale


class BiasDropped(HookedTorchBackend):
    """The w13 bias lost when the quant config is built (vLLM #47552 class: a parameter of
    the config dropped on one path)."""

    name = "mutant-bias-dropped"

    def bias(self, layer, name):
        return None if name == "w13_bias" else super().bias(layer, name)


class W2BiasAfterRouterWeight(HookedTorchBackend):
    """GEMM2's epilogue weighs by the router weight before adding the bias: r*y + b2."""

    name = "mutant-w2-bias-after-router"

    def gemm2(self, layer, a, w, b2, weight):
        y = (a @ w.T) * weight.unsqueeze(1)
        if b2 is not None:
            y += b2
        return y


# --- activations -----------------------------------------------------------------------------

class SwigluoaiAlphaDropped(HookedTorchBackend):
    """swigluoai with the config's alpha lost: sigmoid(g) instead of sigmoid(1.702 g)."""

    name = "mutant-swigluoai-alpha"

    def activation(self, layer, h):
        act = layer.problem.activation
        if act not in ("swigluoai", "swigluoai-split"):
            return super().activation(layer, h)
        gate, up = ((h[:, 0::2], h[:, 1::2]) if act == "swigluoai"
                    else (h[:, :h.shape[1] // 2], h[:, h.shape[1] // 2:]))
        g = gate.clamp(max=SWIGLUOAI_LIMIT)
        u = up.clamp(-SWIGLUOAI_LIMIT, SWIGLUOAI_LIMIT)
        return (u + 1) * g * torch.sigmoid(g)


class SwigluoaiDeinterleaved(HookedTorchBackend):
    """gpt-oss's interleaved gate/up rows read as [gate; up] halves (vLLM #45942: the
    classic weight layout used for SwiGLU-OAI)."""

    name = "mutant-swigluoai-layout"

    def activation(self, layer, h):
        if layer.problem.activation != "swigluoai":
            return super().activation(layer, h)
        n = h.shape[1] // 2
        return swigluoai(h[:, :n], h[:, n:])


class SwigluoaiGateUpSwapped(HookedTorchBackend):
    """gpt-oss's interleaved rows read with gate and up exchanged: gate = h[1::2] (the odd
    rows), up = h[0::2]."""

    name = "mutant-swigluoai-gate-up-swapped"

    def activation(self, layer, h):
        if layer.problem.activation != "swigluoai":
            return super().activation(layer, h)
        return swigluoai(h[:, 1::2], h[:, 0::2])


# --- weight decoding -------------------------------------------------------------------------

class E8M0Bias126(HookedTorchBackend):
    """E8M0 scale bytes decoded as 2^(byte - 126): every MXFP8 / MXFP4 weight doubled."""

    name = "mutant-e8m0-bias"

    def expert_weight(self, layer, p, e):
        s = layer.get(f"{p}_s")[e] if layer.has(f"{p}_s") else None
        if s is None or s.dtype != torch.uint8:
            return super().expert_weight(layer, p, e)
        w = element_values(layer.quant.info.element, layer.get(f"{p}_w")[e])
        n_out, n_in = w.shape
        scale = pow2(s.to(torch.int32) - (E8M0_BIAS - 1))
        return (w.view(n_out, -1, MX_BLOCK) * scale.unsqueeze(-1)).view(n_out, n_in)


# --- reduction and write-back ----------------------------------------------------------------

class NondeterministicSum(HookedTorchBackend):
    """The top-k sum done by atomic adds into the output-dtype buffer, one per (token,
    expert) row, landing in whatever order the GPU schedules them: each add rounds,
    round(round(a) + b) != round(round(b) + a), so the bits change from call to call."""

    name = "mutant-nondeterministic-sum"
    _rng = random.SystemRandom()  # unseeded on purpose: torch.manual_seed must not fix it

    def combine(self, layer, rows, parts, dtype):
        token = torch.cat([t for t, _ in parts]) if parts else torch.empty(0, dtype=torch.int64)
        y = torch.cat([v for _, v in parts]) if parts else None
        order = list(range(token.numel()))
        self._rng.shuffle(order)
        acc = torch.zeros(rows, layer.problem.K, dtype=dtype, device=layer.device)
        for i in order:
            t = int(token[i])
            acc[t] = (acc[t].to(torch.float32) + y[i]).to(dtype)
        return acc.to(torch.float32)


class LastRowUnwritten(HookedTorchBackend):
    """The write-back loop stops one row short (range(M - 1))."""

    name = "mutant-last-row-unwritten"

    def write(self, layer, out, y):
        out[:-1].copy_(y[:-1])


class PartialBlockDropped(HookedTorchBackend):
    """The grid covers M // BLOCK_M row tiles instead of ceil(M / BLOCK_M): the rows of the
    last partial tile are never written."""

    name = "mutant-partial-block-dropped"

    def write(self, layer, out, y):
        full = out.shape[0] - out.shape[0] % BLOCK_M
        out[:full].copy_(y[:full])


FORWARD_MUTANTS = (
    RouterWeightTwice, ExpertMapIgnored, BatchedCountsIgnored, PerTokenAsPerTensor,
    StaticA2ScaleUnloaded, MxScaleRuleWrong, BiasScaledByActivationScale, BiasDropped,
    W2BiasAfterRouterWeight, SwigluoaiAlphaDropped, SwigluoaiDeinterleaved,
    SwigluoaiGateUpSwapped, E8M0Bias126,
    NondeterministicSum, LastRowUnwritten, PartialBlockDropped,
)
