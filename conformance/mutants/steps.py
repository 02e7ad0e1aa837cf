"""Mutants of the torch backend's forward pass: a bug in routing, activation quantization,
the activation, a bias or the reduction; the weights in the layer stay correct.

Each is the torch backend (kernels/native.py `TorchBackend`, its forward one method per step)
with the one step it breaks overridden. Where a bug is realistic below, it names the engine
pattern it comes from.
"""

from __future__ import annotations

import random

import torch
from moecert.kernels.activations import (
    qdq_groups,
    qdq_nvfp4,
    quantize_activation,
    swigluoai,
)
from moecert.kernels.codecs import element_values, pow2
from moecert.kernels.native import TorchBackend
from moecert.kernels.routing import routing
from moecert.reference.schemes import (
    ACT_DYNAMIC_GROUP,
    ACT_DYNAMIC_TENSOR,
    ACT_DYNAMIC_TOKEN,
    ACT_MXFP4,
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


# --- routing ---------------------------------------------------------------------------------

class RouterWeightTwice(TorchBackend):
    """vLLM #43694: prepare scales the input by the router weight, the experts weigh the
    output again (the weights are not replaced by ones)."""

    name = "mutant-router-weight-twice"

    def route(self, layer, x, topk_weights, topk_ids):
        x, token, local, weight = super().route(layer, x, topk_weights, topk_ids)
        if layer.problem.apply_router_weight_on_input:
            weight = topk_weights.flatten()
        return x, token, local, weight


class ExpertMapIgnored(TorchBackend):
    """Global topk ids used as local ids; ids past the local experts dropped as if remote."""

    name = "mutant-expert-map-ignored"

    def route(self, layer, x, topk_weights, topk_ids):
        x, token, ids, weight = routing(layer.problem, x, topk_weights, topk_ids, None)
        return x, token, torch.where(ids < layer.problem.E, ids, torch.full_like(ids, -1)), weight


class BatchedCountsIgnored(TorchBackend):
    """Batched format: expert_num_tokens ignored, every row of every expert's slab computed
    and written (rows past the count hold stale data, not zeros)."""

    name = "mutant-batched-counts-ignored"

    def batched_rows(self, layer, counts, T):
        return torch.ones(counts.numel() * T, dtype=torch.bool, device=counts.device)


# --- activation quantization -----------------------------------------------------------------

class PerTokenAsPerTensor(TorchBackend):
    """q1's dynamic per-token int8 scale computed over the whole input (one scale), the
    per-tensor kernel picked for a per-token config."""

    name = "mutant-per-token-as-per-tensor"

    def quantize(self, layer, t, which, static):
        if which == "w13" and layer.quant.activation == ACT_DYNAMIC_TOKEN:
            return quantize_activation(t, ACT_DYNAMIC_TENSOR,
                                       element=layer.quant.info.activation_element)
        return super().quantize(layer, t, which, static)


class GroupsAlongM(TorchBackend):
    """DeepSeek 1x128 activation groups taken along the token dimension: each column's scale
    is the amax of up to 128 tokens of that column, not of 128 columns of the token (the
    scale tensor [tokens, K/128] written or read transposed)."""

    name = "mutant-fp8-groups-along-m"

    def quantize(self, layer, t, which, static):
        if layer.quant.activation == ACT_DYNAMIC_GROUP:
            return qdq_groups(t.T, layer.quant.info.activation_element).T
        return super().quantize(layer, t, which, static)


class StaticA2ScaleUnloaded(TorchBackend):
    """Static int8: w2_input_scale never loaded (a parameter-name mismatch), so GEMM2's input
    is quantized with the parameter's initial value, 1.0."""

    name = "mutant-a2-static-scale-unloaded"

    def quantize(self, layer, t, which, static):
        if which == "w2" and layer.quant.activation == ACT_STATIC_TENSOR:
            static = torch.ones_like(static)
        return super().quantize(layer, t, which, static)


class Nvfp4A2GlobalScaleFromA1(TorchBackend):
    """NVFP4 activations: GEMM2's input quantized with a1's global scale (a1_gscale passed
    where a2_gscale belongs) while GEMM2's alpha keeps a2's input scale: the quantizer's
    block scales and the dequantizing alpha disagree by the ratio of the two scales."""

    name = "mutant-nvfp4-a2-gscale-from-a1"

    def quantize(self, layer, t, which, static):
        if which == "w2" and layer.quant.activation == ACT_NVFP4:
            # codes and block scales from a1's global scale, the GEMM's multiplier a2's
            return qdq_nvfp4(t, layer.get("a13_global"), static)
        return super().quantize(layer, t, which, static)


class MxScaleRuleWrong(TorchBackend):
    """MXFP8 activations: the scale exponent rounded with ceil (the 'ceil' rule) whatever the
    checkpoint's rule says: one fewer bit for blocks whose maximum is not a power of two."""

    name = "mutant-mxfp8-scale-rule"

    def quantize(self, layer, t, which, static):
        if layer.quant.activation == ACT_MXFP8:
            rule = "ceil" if layer.quant.mx_scale_rule != "ceil" else "floor"
            return quantize_activation(t, ACT_MXFP8, None, rule)
        return super().quantize(layer, t, which, static)


class Mxfp4ActivationsAsMxfp8(TorchBackend):
    """MXFP4 W4A4 run with MXFP8 activations: the engine (or its loader, as moecert's did
    before issue 42) takes the file's MXFP4 weights and quantizes its inputs with the MXFP8
    quantizer it has, e4m3 elements where the file declares e2m1."""

    name = "mutant-mxfp4-act-as-mxfp8"

    def quantize(self, layer, t, which, static):
        if layer.quant.activation == ACT_MXFP4:
            return quantize_activation(t, ACT_MXFP8, None, layer.quant.mx_scale_rule)
        return super().quantize(layer, t, which, static)


class PreQuantScaleDropped(TorchBackend):
    """ModelOpt AWQ's pre_quant_scale loaded but never applied: each GEMM takes its input
    as is, as a reader that maps the file's weights and scales onto an ordinary int4 layer
    and leaves the extra per-input-channel tensor behind would run it."""

    name = "mutant-pre-quant-scale-dropped"

    def pre_scale(self, layer, p, e, t):
        return t


# --- GEMM epilogues --------------------------------------------------------------------------

class BiasScaledByActivationScale(TorchBackend):
    """int8 activations: the w13 bias added to the int32 accumulator, before the epilogue
    multiplies by the activation scale (the bias sits in the activation scale's slot), so
    the bias comes out multiplied by that scale."""

    name = "mutant-bias-in-scale-slot"

    def gemm1(self, layer, xq, x, rows, w, b13):
        if b13 is None or layer.quant.activation not in (
                ACT_DYNAMIC_TOKEN, ACT_DYNAMIC_TENSOR, ACT_STATIC_TENSOR):
            return super().gemm1(layer, xq, x, rows, w, b13)
        xq, x = xq[rows], x[rows]
        mode = layer.quant.activation
        if mode == ACT_DYNAMIC_TOKEN:
            scale = x.abs().amax(-1, keepdim=True) / INT8_MAX
        elif mode == ACT_STATIC_TENSOR:
            scale = layer.get("a13_scale")
        else:  # per tensor over this expert's rows only: close enough to show the bug
            scale = x.abs().amax() / INT8_MAX
        return xq @ w.T + b13 * scale


class BiasDropped(TorchBackend):
    """The w13 bias lost when the quant config is built (vLLM #47552 class: a parameter of
    the config dropped on one path)."""

    name = "mutant-bias-dropped"

    def bias(self, layer, name):
        return None if name == "w13_bias" else super().bias(layer, name)


class BiasesNotLoaded(TorchBackend):
    """Both expert biases never loaded: the layer computes with the zeros it was created
    with (vLLM 0.25.1's RoutedExperts.weight_loader, which has no branch for a bias; the GPU
    list's bias entry), on any weight format."""

    name = "mutant-biases-not-loaded"

    def bias(self, layer, name):
        return None


class W2BiasAfterRouterWeight(TorchBackend):
    """GEMM2's epilogue weighs by the router weight before adding the bias: r*y + b2."""

    name = "mutant-w2-bias-after-router"

    def gemm2(self, layer, a, w, b2, weight):
        y = (a @ w.T) * weight.unsqueeze(1)
        if b2 is not None:
            y += b2
        return y


# --- activations -----------------------------------------------------------------------------

class SwigluoaiAlphaDropped(TorchBackend):
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


class SwigluoaiDeinterleaved(TorchBackend):
    """gpt-oss's interleaved gate/up rows read as [gate; up] halves (vLLM #45942: the
    classic weight layout used for SwiGLU-OAI)."""

    name = "mutant-swigluoai-layout"

    def activation(self, layer, h):
        if layer.problem.activation != "swigluoai":
            return super().activation(layer, h)
        n = h.shape[1] // 2
        return swigluoai(h[:, :n], h[:, n:])


class SwigluoaiGateUpSwapped(TorchBackend):
    """gpt-oss's interleaved rows read with gate and up exchanged: gate = h[1::2] (the odd
    rows), up = h[0::2]."""

    name = "mutant-swigluoai-gate-up-swapped"

    def activation(self, layer, h):
        if layer.problem.activation != "swigluoai":
            return super().activation(layer, h)
        return swigluoai(h[:, 1::2], h[:, 0::2])


# --- weight decoding -------------------------------------------------------------------------

class E8M0Bias126(TorchBackend):
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

class NondeterministicSum(TorchBackend):
    """The top-k sum done by atomic adds into the output-dtype buffer, one per (token,
    expert) row, landing in whatever order the GPU schedules them: each add rounds,
    round(round(a) + b) != round(round(b) + a), so the bits change from call to call."""

    name = "mutant-nondeterministic-sum"
    _rng = random.SystemRandom()  # unseeded on purpose: torch.manual_seed must not fix it

    def combine(self, layer, rows, parts, dtype):
        parts = list(parts)
        token = torch.cat([t for t, _ in parts]) if parts else torch.empty(0, dtype=torch.int64)
        y = torch.cat([v for _, v in parts]) if parts else None
        order = list(range(token.numel()))
        self._rng.shuffle(order)
        acc = torch.zeros(rows, layer.problem.K, dtype=dtype, device=layer.device)
        for i in order:
            t = int(token[i])
            acc[t] = (acc[t].to(torch.float32) + y[i]).to(dtype)
        return acc.to(torch.float32)


class LastRowUnwritten(TorchBackend):
    """The write-back loop stops one row short (range(M - 1))."""

    name = "mutant-last-row-unwritten"

    def write(self, layer, out, y):
        out[:-1].copy_(y[:-1])


class PartialBlockDropped(TorchBackend):
    """The grid covers M // BLOCK_M row tiles instead of ceil(M / BLOCK_M): the rows of the
    last partial tile are never written."""

    name = "mutant-partial-block-dropped"

    def write(self, layer, out, y):
        full = out.shape[0] - out.shape[0] % BLOCK_M
        out[:full].copy_(y[:full])

