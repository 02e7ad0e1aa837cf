"""Readers (checkpoint layout -> canonical form) and writers (the inverse), per format family."""

from __future__ import annotations

import torch

from ..canonical import CanonicalLinear
from ..checkpoint import Checkpoint
from ..schemes import layout_of as _layout
from .awq import read_awq, write_awq
from .ct import read_ct, write_ct
from .ct_int import read_ct_int, write_ct_int
from .dense import read_dense, write_dense
from .gptq import read_gptq, write_gptq
from .modelopt_int import read_modelopt_int, write_modelopt_int

_READERS = {"gptq": read_gptq, "awq": read_awq, "ct": read_ct, "ct-int": read_ct_int,
            "quark-int": read_awq, "modelopt-int": read_modelopt_int, "dense": read_dense}
_WRITERS = {"gptq": write_gptq, "awq": write_awq, "ct": write_ct, "ct-int": write_ct_int,
            "quark-int": write_awq, "modelopt-int": write_modelopt_int,
            "dense": write_dense}


def read_linear(ckpt: Checkpoint, prefix: str) -> CanonicalLinear:
    """Canonical form of the linear `prefix` ("w13" or "w2") of every expert."""
    return _READERS[_layout(ckpt)](ckpt, prefix)


def write_linear(c: CanonicalLinear, prefix: str, ckpt_attrs: Checkpoint,
                 model_dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """Checkpoint tensors of `prefix` holding `c`, laid out as `ckpt_attrs` says."""
    return _WRITERS[_layout(ckpt_attrs)](c, prefix, ckpt_attrs, model_dtype)


__all__ = ["read_linear", "write_linear"]
