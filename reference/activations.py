"""Activation functions between the two GEMMs, on float64 [..., w13 rows] -> [..., N]."""

from __future__ import annotations

import math

import torch

from .schemes import SWIGLUOAI_ALPHA, SWIGLUOAI_LIMIT


def silu(x: torch.Tensor) -> torch.Tensor:
    """x * sigmoid(x)."""
    return x * torch.sigmoid(x)


def gelu(x: torch.Tensor) -> torch.Tensor:
    """Exact GELU: x * Phi(x) = x/2 * (1 + erf(x / sqrt 2))."""
    return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))


def swigluoai(gate: torch.Tensor, up: torch.Tensor, alpha: float = SWIGLUOAI_ALPHA,
              limit: float = SWIGLUOAI_LIMIT) -> torch.Tensor:
    """gpt-oss SwiGLU: g = min(gate, limit), u = clamp(up, -limit, limit),
    out = (u + 1) * g * sigmoid(alpha * g)."""
    g = gate.clamp(max=limit)
    u = up.clamp(-limit, limit)
    return (u + 1) * g * torch.sigmoid(alpha * g)


def relu2(x: torch.Tensor) -> torch.Tensor:
    """relu(x)^2, no gate/up product."""
    return torch.relu(x).square()


def apply_activation(h: torch.Tensor, activation: str, round_gate=None) -> torch.Tensor:
    """act(h) for GEMM1's output h [..., rows]. round_gate, where given, rounds act(gate)
    before it multiplies up (silu and gelu: a kernel whose activation returns the element
    type, then multiplies).

    silu, gelu:       act(h[..., :N]) * h[..., N:]     (gate rows first, then up)
    swigluoai:        gate = h[..., 0::2], up = h[..., 1::2] (gpt-oss interleaved)
    swigluoai-split:  gate = h[..., :N], up = h[..., N:]
    relu2:            relu(h)^2 on all N rows
    """
    if activation == "relu2":
        return relu2(h)
    if activation == "swigluoai":
        return swigluoai(h[..., 0::2], h[..., 1::2])
    n = h.shape[-1] // 2
    gate, up = h[..., :n], h[..., n:]
    if activation == "swigluoai-split":
        return swigluoai(gate, up)
    if activation in ("silu", "gelu"):
        act = silu(gate) if activation == "silu" else gelu(gate)
        return (act if round_gate is None else round_gate(act)) * up
    raise ValueError(f"unknown activation {activation!r}")
