"""`checkpoint_spec`: the tensors a layer of a variant loads, known before any weight exists.

What a backend knows about a layer's quantization is the format facts' `Variant`
(`reference/schemes/variant.py`), by that one name in the protocol, the backends and the
harness: a scheme and its variant attributes, resolved from the scheme's defaults, validated,
compared and hashed as a value (and never compared with a bare scheme name: that raises
TypeError). `QuantConfig` stays as another name for it, for backends outside this tree.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from moecert.reference.schemes import Variant, checkpoint_shape_issue
from moecert.reference.schemes.tensors import declared_tensors, layer_sizes, tensor_shapes

from .errors import BackendError

# the name backends knew the variant by before issue 45; in-tree code says Variant
QuantConfig = Variant


@dataclass(frozen=True)
class TensorSpec:
    dtypes: tuple[torch.dtype, ...]
    shapes: tuple[tuple[int, ...], ...]  # accepted shapes, the usual one first
    required: bool = True

    @property
    def shape(self) -> tuple[int, ...]:
        return self.shapes[0]


def checkpoint_spec(quant: Variant, problem) -> dict[str, TensorSpec]:
    """The checkpoint tensors a layer of `quant` and `problem` loads, by name: the scheme
    table's declarations (`schemes.tensors`) at the problem's sizes.

    Raises BackendError when the problem's shape cannot hold the format at all (an int4 input
    dimension that is not a multiple of 8, a group size that does not divide it): the
    reference's rule, `schemes.checkpoint_shape_issue`.
    """
    issue = checkpoint_shape_issue(quant, problem)
    if issue:
        raise BackendError(issue.tensor, issue.expected, issue.found)
    sizes = layer_sizes(problem)
    return {name: TensorSpec(d.dtypes, tensor_shapes(d, sizes, quant),
                             d.required(quant.sym, quant.act_order, problem.bias))
            for name, d in declared_tensors(quant).items()}


def check_tensor(name: str, t, spec: TensorSpec) -> None:
    """BackendError unless `t` is a tensor of one of the spec's dtypes and shapes."""
    if not isinstance(t, torch.Tensor):
        raise BackendError(name, "a torch.Tensor", type(t).__name__)
    if t.dtype not in spec.dtypes:
        raise BackendError(name, f"dtype {' or '.join(str(d) for d in spec.dtypes)}",
                           str(t.dtype))
    if tuple(t.shape) not in spec.shapes:
        raise BackendError(name, "shape " + " or ".join(str(list(s)) for s in spec.shapes),
                           str(list(t.shape)))


__all__ = ["QuantConfig", "TensorSpec", "Variant", "check_tensor", "checkpoint_spec"]
