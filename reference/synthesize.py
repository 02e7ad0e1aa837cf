"""`synthesize`: checkpoints made the way the producing tool would make them, from random weights.

The float weights are built so that mistakes show: gate rows differ from up rows and the up
half is scaled differently (w1 scales != w3 scales), every expert has its own magnitude, rows
carry offsets (non-trivial zero points), biases are non-zero. The float weights are not kept:
`dequantize` must read the packed tensors.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from .activations import apply_activation
from .canonical import CanonicalLinear
from .checkpoint import Checkpoint, checked_variant
from .errors import CheckpointError
from .layouts import write_linear
from .layouts.common import scale_dtype
from .problem import MoEProblem
from .quantize import (
    nvfp4_global_scale,
    quantize_int_groups,
    quantize_mx,
    quantize_nvfp4,
    quantize_scaled,
)
from .schemes import (
    ACT_ELEMENT_MAX,
    ACT_NVFP4,
    STATIC_INPUT_MODES,
    Variant,
    checkpoint_shape_issue,
    layout_of,
    weight_scale_block,
)
from .schemes.tensors import input_scale_name, pre_quant_scale_name, weight_dtype


def synthesize(variant: Variant | str, problem: MoEProblem, seed: int = 0, **attrs
               ) -> Checkpoint:
    """A checkpoint of `variant` for `problem`'s shapes, from fresh random weights.

    `variant` is a `Variant`, or a scheme name whose defaults `attrs` change (group_size,
    sym, checkpoint_format, act_order, weight_strategy, activation, mx_scale_rule).
    Biases are written when `problem.bias` is set.
    """
    ckpt = Checkpoint(checked_variant(variant, **attrs), {})
    issue = checkpoint_shape_issue(ckpt, problem)
    if issue:  # no file of this scheme has these dimensions
        raise CheckpointError(issue.tensor, issue.expected, issue.found)
    gen = torch.Generator().manual_seed(seed)
    P = problem
    dims = {"w13": (P.w13_rows, P.K), "w2": (P.K, P.N)}
    tensors: dict[str, torch.Tensor] = {}
    floats = {}
    for prefix, (n_out, n_in) in dims.items():
        w = random_weights(gen, P.E, n_out, n_in, gated=prefix == "w13" and P.gated)
        floats[prefix] = w
        canon = quantize_weights(ckpt, w, gen, prefix, P.torch_dtype,
                                 shards=2 if prefix == "w13" and P.gated else 1)
        tensors.update(write_linear(canon, prefix, ckpt, P.torch_dtype))
    if P.bias:
        tensors["w13_bias"] = (0.1 * torch.randn(P.E, P.w13_rows, generator=gen)).to(
            P.torch_dtype)
        tensors["w2_bias"] = (0.1 * torch.randn(P.E, P.K, generator=gen)).to(P.torch_dtype)
    if ckpt.activation in STATIC_INPUT_MODES:
        tensors.update(calibrate_input_scales(ckpt, floats, tensors, P, gen))
    tensors.update(pre_quant_scales(ckpt, P, gen))
    ckpt = replace(ckpt, tensors=tensors)
    return ckpt


def random_weights(gen: torch.Generator, E: int, n_out: int, n_in: int, gated: bool
                   ) -> torch.Tensor:
    """float64 [E, n_out, n_in]: N(0, 1/n_in) per expert times 2^U(-1, 1), plus row offsets;
    for gated w13 the up half (rows n_out/2..) is scaled by a further 1.5."""
    w = torch.randn(E, n_out, n_in, generator=gen, dtype=torch.float64) / n_in**0.5
    w += 0.5 * torch.randn(E, n_out, 1, generator=gen, dtype=torch.float64) / n_in**0.5
    w *= torch.exp2(2 * torch.rand(E, 1, 1, generator=gen, dtype=torch.float64) - 1)
    if gated:
        w[:, n_out // 2:] *= 1.5
    return w


def quantize_weights(ckpt: Checkpoint, w: torch.Tensor, gen: torch.Generator, prefix: str,
                     model_dtype: torch.dtype, shards: int = 1) -> CanonicalLinear:
    """Quantize float weights with the producing tool's rule for `ckpt`'s format; `shards`
    (2 for a gated w13: w1 and w3) is where tools that keep a global scale per shard split."""
    info, rec = ckpt.info, ckpt.record
    E, n_out, n_in = w.shape
    if not info.quantized:
        return CanonicalLinear(codes=w.to(weight_dtype(ckpt)).to(torch.float64),
                               scales=torch.ones(E, 1, 1, dtype=torch.float64),
                               block=(n_out, n_in))
    if info.packed:
        g = ckpt.group_size
        g_idx = random_g_idx(gen, E, n_in, g) if ckpt.act_order else None
        return quantize_int_groups(w, info.weight_bits, g, ckpt.sym, layout_of(ckpt),
                                   scale_dtype(rec.scale_dtype, model_dtype), g_idx,
                                   min_zero=-rec.stored_zero_offset)
    if info.scale_encoding == "e8m0":  # the producing tool's rule where the record names one
        return quantize_mx(w, rec.mx_rule or ckpt.mx_scale_rule, info.element,
                           rec.element_rounding)
    if info.global_scale == "tensor":
        return quantize_nvfp4(w, shards if n_out % 2 == 0 else 1, rec.global_scale)
    block = weight_scale_block(ckpt, prefix, n_out, n_in)
    return quantize_scaled(w, block, info.element)


def random_g_idx(gen: torch.Generator, E: int, n_in: int, group_size: int) -> torch.Tensor:
    """Act-order group map: groups formed in a random column order, so g_idx is non-monotonic."""
    g = n_in if group_size == -1 else group_size
    perm = torch.stack([torch.randperm(n_in, generator=gen) for _ in range(E)])
    g_idx = torch.empty(E, n_in, dtype=torch.int64)
    g_idx.scatter_(1, perm, (torch.arange(n_in) // g).expand(E, -1))
    return g_idx


def pre_quant_scales(ckpt: Checkpoint, P: MoEProblem, gen: torch.Generator
                     ) -> dict[str, torch.Tensor]:
    """The per-input-channel multipliers of a layout that holds them (ModelOpt AWQ's
    pre_quant_scale [E, in], in the model's dtype as ModelOpt writes it), else none: AWQ's
    smoothing factors are positive and spread around 1, here 2^U(-1, 1) per column."""
    out = {}
    for p, n_in in (("w13", P.K), ("w2", P.N)):
        name = pre_quant_scale_name(ckpt, p)
        if name is not None:
            u = 2 * torch.rand(P.E, n_in, generator=gen, dtype=torch.float64) - 1
            out[name] = torch.exp2(u).to(P.torch_dtype)
    return out


def calibrate_input_scales(ckpt: Checkpoint, floats, tensors, P: MoEProblem, gen
                           ) -> dict[str, torch.Tensor]:
    """Static activation scales the way a calibrating tool gets them, from the amax of each
    expert's GEMM inputs on random calibration tokens (float math, per expert): amax / top of
    the scheme's activation element (127 for int8, 448 for e4m3); NVFP4 the global-scale rule
    of the format (amax / (448 * 6), or its reciprocal), one per w1 / w3 shard for w13 (each
    shard's own calibration: their amaxes differ a little)."""
    x = torch.randn(64, P.K, generator=gen, dtype=torch.float64)
    h = torch.einsum("mk,enk->emn", x, floats["w13"])
    if "w13_bias" in tensors:
        h = h + tensors["w13_bias"].to(torch.float64).unsqueeze(1)
    a = apply_activation(h, P.activation)
    nvfp4 = ckpt.activation == ACT_NVFP4
    shards = 2 if nvfp4 and P.gated else 1
    amax_x = x.abs().amax() * (1 + 0.25 * torch.rand(P.E, shards, generator=gen))
    amax_a = a.abs().amax(dim=(1, 2))
    amaxes = {"w13": amax_x.squeeze(1), "w2": amax_a}
    if nvfp4:
        return {input_scale_name(ckpt, p): nvfp4_global_scale(amax, ckpt.record.global_scale)
                for p, amax in amaxes.items()}
    top = ACT_ELEMENT_MAX[ckpt.info.activation_element]
    return {input_scale_name(ckpt, p): (amax / top).to(torch.float32)
            for p, amax in amaxes.items()}
