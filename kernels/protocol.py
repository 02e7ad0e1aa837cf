"""The backend protocol (SPEC section 3) and the canonical weight form backends may export."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch


@runtime_checkable
class Backend(Protocol):
    """How an inference engine holds a quantized MoE layer: load, process once, apply."""

    name: str

    def available(self) -> str | None:
        """None if the backend can run on this machine, else why not."""

    def supports(self, scheme, problem) -> str | None:
        """None if the backend claims (scheme, problem), else exactly why not.

        `scheme` is a scheme name, a `QuantConfig` or a `Checkpoint`. Built-in backends also
        take `platform=` (default: the running one) so the oracle can ask for any platform.
        """

    def create_layer(self, checkpoint, problem) -> torch.nn.Module: ...

    def load_weights(self, layer, checkpoint) -> None: ...

    def process_weights_after_loading(self, layer) -> None: ...

    def apply(self, layer, hidden_states, topk_weights, topk_ids, *, out=None, **opts
              ) -> torch.Tensor: ...


@dataclass(frozen=True)
class ExportedLinear:
    """A processed layer's weights of one linear in the canonical form, read back out of the
    kernel format (same meaning as `moecert.reference.CanonicalLinear`):

        W[e, o, i] = (codes[e, o, i] - zeros[e, o, gi]) * scales[e, o // rows, gi] * global[e, o]
        gi = g_idx[e, i] if g_idx is not None else i // cols,   (rows, cols) = block

    codes are signed int32 (integer formats) or float64 element values (fp8, 16-bit).
    """

    codes: torch.Tensor
    scales: torch.Tensor
    block: tuple[int, int]
    zeros: torch.Tensor | None = None
    g_idx: torch.Tensor | None = None
    global_scale: torch.Tensor | None = None
