"""The MoE layer shapes of the models moecert checks at full size, declared once.

The GPU suites, `moecert bench` and the tools in tools/ read this table; a model added here
is available to all of them.
"""

from __future__ import annotations

from typing import NamedTuple


class ModelShape(NamedTuple):
    """One MoE layer: E experts, hidden size K, expert intermediate size N, topk experts per
    token (unpacks as (E, K, N, topk))."""

    E: int
    K: int
    N: int
    topk: int


class Shipped(NamedTuple):
    """How a model's checkpoints ship, where that narrows what is worth checking or timing at
    its size: the schemes it comes in and its layer's options."""

    schemes: tuple[str, ...]
    activation: str = "silu"
    bias: bool = False


MODELS: dict[str, ModelShape] = {
    "qwen3-30b-a3b": ModelShape(128, 2048, 768, 8),
    "mixtral-8x7b": ModelShape(8, 4096, 14336, 2),
    "deepseek-v3": ModelShape(256, 7168, 2048, 8),
    "gpt-oss-120b": ModelShape(128, 2880, 2880, 4),
}
# A model not listed runs in every scheme, silu, no bias. A listed scheme this moecert does not
# have yet (mxfp4) leaves the model out.
SHIPPED: dict[str, Shipped] = {
    "gpt-oss-120b": Shipped(("mxfp4",), activation="swigluoai", bias=True),
}


def ships_in(model: str, scheme: str) -> bool:
    """Whether `model` is checked and timed in `scheme` at its full size."""
    shipped = SHIPPED.get(model)
    return shipped is None or scheme in shipped.schemes
