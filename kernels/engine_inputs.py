"""What an engine adapter (kernels/vllm_backend.py, kernels/transformers_engine/) checks before
it hands a case's inputs to its engine, the same for every engine: no apply options (the
standard activation format only), hidden states of the layer's dtype and shape, and the
output tensor to write."""

from __future__ import annotations

import torch

from .errors import BackendError


def engine_output(problem, hidden_states: torch.Tensor, opts: dict,
                  out: torch.Tensor | None) -> torch.Tensor:
    """`out`, or a new [M, K] tensor of the layer's dtype; a BackendError naming the input
    that an engine adapter does not take."""
    if opts:
        raise BackendError("apply options", "none (standard activation format only)",
                           ", ".join(sorted(opts)))
    if hidden_states.dtype != problem.torch_dtype or hidden_states.dim() != 2:
        raise BackendError("hidden_states", f"{problem.torch_dtype} [M, {problem.K}]",
                           f"{hidden_states.dtype} {list(hidden_states.shape)}")
    if out is None:
        out = torch.empty(hidden_states.shape[0], problem.K, dtype=problem.torch_dtype,
                          device=hidden_states.device)
    return out
