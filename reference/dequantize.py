"""`canonicalize` and `dequantize`: checkpoint tensors -> canonical form -> float64 weights."""

from __future__ import annotations

import torch

from .canonical import CanonicalLinear
from .checkpoint import Checkpoint
from .errors import CheckpointError
from .layouts import read_linear
from .layouts.common import check_finite


def canonicalize(ckpt: Checkpoint) -> dict[str, CanonicalLinear]:
    """{"w13": ..., "w2": ...} in canonical form, with the two linears' shapes cross-checked."""
    E = ckpt.num_experts
    w13, w2 = read_linear(ckpt, "w13"), read_linear(ckpt, "w2")
    _, rows, K = w13.shape
    _, K2, N = w2.shape
    if K2 != K:
        raise CheckpointError("w2", f"{K} output rows (w13's input size K)", f"{K2}")
    if rows not in (N, 2 * N):
        raise CheckpointError("w13", f"N = {N} or 2N = {2 * N} rows (w2's input size N)",
                              f"{rows}")
    assert w13.codes.shape[0] == w2.codes.shape[0] == E
    return {"w13": w13, "w2": w2}


def read_biases(ckpt: Checkpoint, w13_rows: int, K: int) -> dict[str, torch.Tensor]:
    """Optional biases as float64: w13_bias [E, w13 rows], w2_bias [E, K]."""
    E, out = ckpt.num_experts, {}
    for name, cols in (("w13_bias", w13_rows), ("w2_bias", K)):
        if name in ckpt.tensors:
            t = ckpt.expect(name, (torch.float16, torch.bfloat16, torch.float32), (E, cols))
            check_finite(name, t)
            out[name] = t.to(torch.float64)
    return out


def dequantize(ckpt: Checkpoint) -> dict[str, torch.Tensor]:
    """float64 weights read only from the checkpoint's tensors.

    Returns {"w13": [E, 2N or N, K], "w2": [E, K, N]} plus "w13_bias" / "w2_bias" when present.
    The named steps (unpacking, AWQ reorder, GPTQ v1 zero offset, E4M3 / E8M0 decoding, scale
    broadcasting) live in `layouts/`, `packing.py`, `elements.py` and `canonical.py`.
    """
    lin = canonicalize(ckpt)
    w13, w2 = lin["w13"].dequantize(), lin["w2"].dequantize()
    return {"w13": w13, "w2": w2, **read_biases(ckpt, w13.shape[1], w2.shape[1])}
