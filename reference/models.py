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


class ModelRelease(NamedTuple):
    """How a model's MoE layers ship, where one release defines them: the checkpoint scheme,
    the activation between the GEMMs (first the file's gate/up layout, then the layouts
    engines convert it to) and whether the linears carry biases."""

    scheme: str
    activations: tuple[str, ...]
    bias: bool


# Tokens per call at which the model layers are timed and tuned (`moecert bench`, `moecert tune`):
# decode (1, 16, 64) through prefill (256, 1024).
MODEL_TOKENS = (1, 16, 64, 256, 1024)

MODELS: dict[str, ModelShape] = {
    "qwen3-30b-a3b": ModelShape(128, 2048, 768, 8),
    "mixtral-8x7b": ModelShape(8, 4096, 14336, 2),
    "deepseek-v3": ModelShape(256, 7168, 2048, 8),
    "gpt-oss-120b": ModelShape(128, 2880, 2880, 4),
}
# Models released in one scheme only: the suites run their layer size in that scheme, with
# its activation and biases (the others ship in many formats and run in every scheme).
RELEASES: dict[str, ModelRelease] = {
    # gate/up rows interleaved in the file; vLLM's split [gate; up] layout after conversion
    "gpt-oss-120b": ModelRelease("mxfp4", ("swigluoai", "swigluoai-split"), bias=True),
}


def ships_in(model: str, scheme: str) -> bool:
    """Whether `model` is checked and timed in `scheme` at its full size."""
    release = RELEASES.get(model)
    return release is None or release.scheme == scheme
