"""`canonicalize` and `dequantize`: checkpoint tensors -> canonical form -> float64 weights."""

from __future__ import annotations

import torch

from .canonical import CanonicalLinear, dequantize_canonical
from .checkpoint import Checkpoint
from .layouts import read_linear
from .layouts.check import check_tensors
from .layouts.common import check_finite, scales_float64
from .problem import MoEProblem
from .schemes import STATIC_INPUT_MODES
from .schemes.tensors import input_scale_name, pre_quant_scale_name


def canonicalize(ckpt: Checkpoint, problem: MoEProblem | None = None
                 ) -> dict[str, CanonicalLinear]:
    """{"w13": ..., "w2": ...} in canonical form, after checking that the checkpoint holds
    exactly its format's tensors (of `problem`'s sizes, when given)."""
    check_tensors(ckpt, problem)
    return {"w13": read_linear(ckpt, "w13"), "w2": read_linear(ckpt, "w2")}


def read_biases(ckpt: Checkpoint) -> dict[str, torch.Tensor]:
    """The biases present (w13_bias [E, w13 rows], w2_bias [E, K]), as float64; shapes are
    checked by `check_tensors`, values here."""
    out = {}
    for name in ("w13_bias", "w2_bias"):
        if name in ckpt.tensors:
            t = ckpt.tensors[name]
            check_finite(name, t)
            out[name] = t.to(torch.float64)
    return out


def read_input_scale(ckpt: Checkpoint, p: str) -> torch.Tensor:
    """The static activation scales {p}_input_scale [E] (NVFP4: [E, 2] for w13, named as the
    format names them) as stored, float64, finite and > 0."""
    return scales_float64(ckpt, input_scale_name(ckpt, p))


def read_pre_quant_scale(ckpt: Checkpoint, p: str) -> torch.Tensor | None:
    """Linear `p`'s per-input-channel input multiplier [E, in] (ModelOpt AWQ's
    `pre_quant_scale`: GEMM input column k of expert e is multiplied by it), float64,
    finite and > 0; None for a layout without one."""
    name = pre_quant_scale_name(ckpt, p)
    return None if name is None else scales_float64(ckpt, name)


def dequantize(ckpt: Checkpoint, problem: MoEProblem | None = None
               ) -> dict[str, torch.Tensor]:
    """float64 weights read only from the checkpoint's tensors (checked against `problem`'s
    sizes when given, else against the sizes most of them agree on).

    Returns {"w13": [E, 2N or N, K], "w2": [E, K, N]} plus "w13_bias" / "w2_bias" when present.
    The named steps (unpacking, AWQ reorder, GPTQ v1 zero offset, E4M3 / E8M0 decoding, scale
    broadcasting) live in `layouts/`, `packing.py`, `elements.py` and `canonical.py`.
    """
    lin = canonicalize(ckpt, problem)
    for p in ("w13", "w2"):
        read_pre_quant_scale(ckpt, p)  # not returned (it scales the input, not the weights)
    if ckpt.activation in STATIC_INPUT_MODES:
        for p in ("w13", "w2"):
            read_input_scale(ckpt, p)  # not returned; a bad one makes the checkpoint bad
    return {"w13": dequantize_canonical(lin["w13"]), "w2": dequantize_canonical(lin["w2"]),
            **read_biases(ckpt)}
