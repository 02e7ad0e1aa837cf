"""What an engine adapter (kernels/vllm_backend.py, kernels/transformers_engine/) checks before
it hands a case's inputs to its engine, the same for every engine: no apply options (the
standard activation format only), hidden states of the layer's dtype and shape, the output
tensor to write, and a checkpoint's tensors named and shaped as its variant holds them; where
a checkpoint came from (a model folder's layer, unchanged), and the one machine an engine is
asked about."""

from __future__ import annotations

import torch

from .errors import BackendError
from .platform import Platform
from .quant_config import Variant, check_tensor, checkpoint_spec


def folder_origin(checkpoint) -> tuple[str, int] | None:
    """(folder, layer) where the checkpoint holds a model folder's whole layer unchanged
    (the loader's `origin`: cleared by whoever changes the tensors), else None."""
    origin = getattr(checkpoint, "origin", None)
    if origin is None or getattr(checkpoint, "first_expert", 0) != 0:
        return None
    return str(origin[0]), int(origin[1])


def not_this_machine(engine: str, platform: Platform | None) -> str | None:
    """Why an engine cannot answer for `platform`: an engine runs on the machine it is
    installed on, so a simulated platform other than this machine's gets a reason."""
    platform = platform or Platform.current()
    current = Platform.current()
    if platform.simulated and platform != Platform(current.kind, current.capability,
                                                   current.arch):
        return f"{engine} is asked on the machine it runs on only ({current})"
    return None


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


def check_engine_checkpoint(variant: Variant, checkpoint, problem) -> None:
    """Every tensor named and shaped as the variant's checkpoint holds it, before the engine's
    loader sees it (vLLM's would copy a wrong shape into a slice without a word; transformers
    would write it into a model file)."""
    spec = checkpoint_spec(variant, problem)
    tensors = getattr(checkpoint, "tensors", None)
    if not isinstance(tensors, dict):
        raise BackendError("checkpoint", "an object with a dict of tensors in .tensors",
                           type(checkpoint).__name__)
    for name, t in tensors.items():
        if name not in spec:
            raise BackendError(name, f"a tensor of a {variant.describe()} checkpoint "
                               f"({', '.join(spec)})", "an unknown tensor")
        check_tensor(name, t, spec[name])
    for name, s in spec.items():
        if s.required and name not in tensors:
            raise BackendError(name, "a tensor", "missing")


def origin_text(origin) -> str:
    """A layer's origin (folder, layer) as its errors name it."""
    return "a synthesized checkpoint" if origin is None else f"{origin[0]} layer {origin[1]}"
