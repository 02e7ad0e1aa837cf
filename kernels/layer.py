"""`MoELayer`: the module a backend loads checkpoint tensors into and processes in place."""

from __future__ import annotations

import torch
from moecert.reference.schemes import weight_scale_block

from .errors import BackendError
from .quant_config import Variant, check_tensor, checkpoint_spec

# vLLM's name for the guard: set once the weights are in kernel format.
PROCESSED = "_already_called_process_weights_after_loading"


class MoELayer(torch.nn.Module):
    """Holds one MoE layer's tensors as buffers: checkpoint tensors after `load`, the backend's
    kernel-format tensors after processing. `meta` carries non-tensor kernel parameters."""

    def __init__(self, backend: str, quant: Variant, problem, device: torch.device):
        super().__init__()
        self.backend, self.quant, self.problem = backend, quant, problem
        self.device = torch.device(device)
        self.meta: dict = {}
        setattr(self, PROCESSED, False)

    @property
    def processed(self) -> bool:
        return bool(getattr(self, PROCESSED, False))

    def tensor_names(self) -> list[str]:
        return [n for n, _ in self.named_buffers()]

    def get(self, name: str) -> torch.Tensor:
        t = self._buffers.get(name)
        if t is None:
            raise BackendError(f"layer.{name}", "a loaded tensor",
                               f"missing; the layer holds {', '.join(self.tensor_names())}")
        return t

    def has(self, name: str) -> bool:
        return self._buffers.get(name) is not None

    def put(self, name: str, t: torch.Tensor) -> None:
        self._buffers.pop(name, None)
        self.register_buffer(name, t)

    def drop(self, *names: str) -> None:
        for n in names:
            self._buffers.pop(n, None)

    def clear(self) -> None:
        self._buffers.clear()
        self.meta.clear()

    def load(self, checkpoint) -> None:
        """Replace everything the layer holds by contiguous copies of `checkpoint`'s tensors,
        validated against the layer's spec, and mark it unprocessed (a reload must be
        processed again)."""
        spec = checkpoint_spec(self.quant, self.problem)
        tensors = getattr(checkpoint, "tensors", None)
        if not isinstance(tensors, dict):
            raise BackendError("checkpoint", "an object with a dict of tensors in .tensors",
                               type(checkpoint).__name__)
        unknown = sorted(set(tensors) - set(spec))
        if unknown:
            raise BackendError(", ".join(unknown), f"only the tensors of "
                               f"{self.quant.describe()}: {', '.join(spec)}",
                               "a tensor of another name")
        for name, s in spec.items():
            if name in tensors:
                check_tensor(name, tensors[name], s)
                if tensors[name].device != self.device:
                    raise BackendError(name, f"device {self.device} (the layer's)",
                                       str(tensors[name].device))
            elif s.required:
                raise BackendError(name, f"a tensor for {self.quant.describe()}", "missing")
        self.clear()
        for name in spec:
            if name in tensors:
                # a dense row-major copy whatever the file's strides (clone() alone keeps a
                # column-major layout): every conversion and kernel may assume it
                self.register_buffer(name, tensors[name].detach().clone(
                    memory_format=torch.contiguous_format))
        setattr(self, PROCESSED, False)


PREFIXES = ("w13", "w2")  # a layer's two linears


def linear_dims(layer: MoELayer, p: str) -> tuple[int, int]:
    """(out, in) of linear `p` per expert (w13: w13_rows x K, w2: K x N)."""
    P = layer.problem
    return (P.w13_rows, P.K) if p == "w13" else (P.K, P.N)


def group_cols(layer: MoELayer, p: str) -> int:
    """Input columns per scale group of linear `p` (all of them for group_size -1)."""
    return weight_scale_block(layer.quant, p, *linear_dims(layer, p))[1]
