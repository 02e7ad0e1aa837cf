"""Declared numerics: what a backend says its processed layer computes where that differs from
the checkpoint's literal scheme (kernels/protocol.py `DeclaresNumerics`), and the reading of
the same checkpoint the harness then judges the layer against.

    activation          an activation mode of the scheme table (schemes.ACT_*): the kernel
                        quantizes its GEMM inputs so, e.g. an int4 checkpoint run with int8
                        activations per token ("dynamic-token": read as `w4a8-int8`)
    weight_scale_dtype  a torch float dtype name ("bfloat16"): the kernel keeps the
                        checkpoint's weight scales rounded to it
    w13_requantized     True: per-tensor w1 / w3 shard scales collapsed to their maximum and
                        both shards' fp8 / int8 weights requantized to it (vLLM's fp8 and
                        Quark int8 MoE processing); a float dtype name ("float16"): the same,
                        the shard dequantized in that dtype first, its scale cast to it (vLLM's
                        per_tensor_dequantize on CUDA)
    weights_dequantized "bfloat16" / "float16": the engine dequantized the weights to that
                        dtype at load and runs the unquantized layer (transformers'
                        FineGrainedFP8 quantizer without an fp8 GPU; an fp16 checkpoint loaded
                        into a bf16 model): read as the bf16 / fp16 scheme on the checkpoint's
                        weights rounded to it, activations unquantized
    bias_after_rounding True: each linear's product rounded to the activation dtype before
                        its bias is added, the sum rounded again (gpt-oss's own definition:
                        OpenAI's reference adds the bias after the tensor-parallel all-reduce
                        of the bf16 product; transformers' gpt-oss experts): the reference
                        computes it so (reference/moe.py), on layers with biases
    sum_in_activation_dtype True: each expert's output rounded to the activation dtype,
                        weighted in float32 and rounded again, the routed sum accumulated in
                        the activation dtype in increasing expert id (transformers' eager
                        experts, every MoE model's modeling code: `index_add_` into a bf16
                        buffer): the reference accumulates so
    activation_scale_pow2 True: dynamic 1 x 128 activation scales rounded up to a power of two
                        (DeepGEMM's UE8M0; vLLM's per_token_group_quant_fp8 wherever DeepGEMM
                        loads): only with the dynamic-group reading
    router_weight_in_activation_dtype True: with the router weight applied to the input, the
                        weight cast to the activation dtype before x * r (vLLM's prepare steps:
                        `a1 * topk_weights.to(a1.dtype)`)
    router_weight_on_gemm1_output True: with the router weight applied to the input, the weight
                        multiplies GEMM1's product (before its bias and rounding) and the
                        input stays as it is (vLLM's fused_experts: GEMM1's MUL_ROUTED_WEIGHT
                        epilogue, float32), where a prepare step scales the input
    gate_activation_in_activation_dtype True: silu(gate) / gelu(gate) rounded to the activation
                        dtype before it multiplies up (vLLM's CUDA silu_and_mul / gelu_and_mul:
                        csrc/activation_kernels.cu's activation returns the element type)
    activation_round_half_away True: dynamic per-token int8 codes computed as x * (127 / amax)
                        in float32, rounded half away from zero (vLLM's per_token_quant_int8,
                        which its Triton MoE path calls on CUDA)
    activation_fp8_float32 True: E4M3 activation codes computed in float32 from a float32
                        scale: per tensor x * fl(1 / s), per token x / s, a dynamic
                        s = fl(amax / 448) (vLLM's CUDA scaled_fp8_quant kernels,
                        csrc/quantization/w8a8/fp8/common.cu, which every fp8 MoE kernel's
                        prepare step calls for non-block activations)

The reading is the checkpoint transformed as declared (scales rounded, shards requantized, the
activation mode of the scheme that reads the same tensors with it); its reference and its
tolerance entry are what an exact implementation of that reading earns, so a 0.5% scale error
stays caught. An empty declaration is the checkpoint itself.

The transformations of the weights (shards requantized, weights dequantized, a layout
rewritten for another scheme) run over chunks of experts, as the reference's `moe` reads
them: each chunk's float64 (or unpacked integer) copy within the reference's CHUNK_BYTES, one
expert at least, written into the reading's own tensors; the same bits as over the whole
layer at once (tests/conformance/harness/test_numerics_chunks.py). Until then each made a
float64 copy of a whole linear across every expert: DeepSeek-V3's accuracy check ran out of
memory on an H200 allocating one float64 half of its w13 (28 GiB).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from dataclasses import replace

import torch
from moecert.kernels.protocol import NUMERICS_KEYS
from moecert.reference import Checkpoint
from moecert.reference.canonical import dequantize_canonical
from moecert.reference.dequantize import read_biases, read_input_scale, read_pre_quant_scale
from moecert.reference.layouts import read_linear, write_linear
from moecert.reference.layouts.check import check_tensors
from moecert.reference.schemes import (
    ACT_DYNAMIC_GROUP,
    PACKED_LAYOUTS,
    SCHEMES,
    STATIC_INPUT_MODES,
    STRATEGY_TENSOR,
    get_scheme,
    scheme_format,
)
from moecert.reference.schemes.tensors import declared_tensors

_ACT_MODES = tuple(dict.fromkeys(m for s in SCHEMES.values() for m in s.activation_modes))
_SCALE_DTYPES = ("float32", "bfloat16", "float16")
# weights_dequantized's dtype -> the unquantized scheme that reads such weights
_DEQUANTIZED_SCHEMES = {"bfloat16": "bf16", "float16": "fp16"}
# an int layout the reading scheme does not store (compressed-tensors int4 read as W4A8):
# the same canonical codes, scales and zeros written in this format of the reading scheme
_REWRITE_FORMAT = "gptq_v2"
# the declared arithmetic the reference reads off the Checkpoint (reference/checkpoint.py)
_ARITHMETIC_KEYS = ("bias_after_rounding", "sum_in_activation_dtype", "activation_scale_pow2",
                    "router_weight_in_activation_dtype", "router_weight_on_gemm1_output",
                    "gate_activation_in_activation_dtype", "activation_round_half_away",
                    "activation_fp8_float32")
# keys that declare nothing when False (w13_requantized may name a dtype instead of True)
_BOOL_KEYS = ("w13_requantized", *_ARITHMETIC_KEYS)
# the reference's module, whose CHUNK_BYTES bounds the float64 weights the transformations
# below hold at once (read at each call: a test may lower it); the name `moe` on the package
# is the function
_REFERENCE_MOE = importlib.import_module("moecert.reference.moe")


class NumericsError(ValueError):
    """A declaration the harness cannot read (unknown key or value, no reading)."""


def declared(backend, layer) -> dict:
    """The backend's optional `numerics(layer)`, checked ({} without the hook)."""
    hook = getattr(backend, "numerics", None)
    if hook is None:
        return {}
    got = hook(layer)
    if not isinstance(got, dict):
        raise NumericsError(f"numerics(layer): expected a dict, found {type(got).__name__}")
    unknown = sorted(set(got) - set(NUMERICS_KEYS))
    if unknown:
        raise NumericsError(f"numerics(layer): unknown keys {unknown}; known: "
                            f"{', '.join(NUMERICS_KEYS)}")
    if "activation" in got and got["activation"] not in _ACT_MODES:
        raise NumericsError(f"numerics(layer)['activation']: expected one of "
                            f"{', '.join(_ACT_MODES)}, found {got['activation']!r}")
    if "weight_scale_dtype" in got and got["weight_scale_dtype"] not in _SCALE_DTYPES:
        raise NumericsError(f"numerics(layer)['weight_scale_dtype']: expected one of "
                            f"{', '.join(_SCALE_DTYPES)}, found {got['weight_scale_dtype']!r}")
    if "w13_requantized" in got and not isinstance(got["w13_requantized"], bool) \
            and got["w13_requantized"] not in _SCALE_DTYPES:
        raise NumericsError(f"numerics(layer)['w13_requantized']: expected a bool or one of "
                            f"{', '.join(_SCALE_DTYPES)}, found {got['w13_requantized']!r}")
    for key in _ARITHMETIC_KEYS:
        if key in got and not isinstance(got[key], bool):
            raise NumericsError(f"numerics(layer)[{key!r}]: expected a bool, found "
                                f"{got[key]!r}")
    if "weights_dequantized" in got:
        if got["weights_dequantized"] not in _DEQUANTIZED_SCHEMES:
            raise NumericsError(f"numerics(layer)['weights_dequantized']: expected one of "
                                f"{', '.join(_DEQUANTIZED_SCHEMES)}, found "
                                f"{got['weights_dequantized']!r}")
        if got.get("activation", "none") != "none":
            raise NumericsError("numerics(layer): weights_dequantized runs the unquantized "
                                f"layer; activation={got['activation']!r} contradicts it")
    if got.get("activation_scale_pow2") and got.get("activation", ACT_DYNAMIC_GROUP) \
            != ACT_DYNAMIC_GROUP:
        raise NumericsError("numerics(layer): activation_scale_pow2 rounds dynamic 1 x 128 "
                            f"group scales; activation={got['activation']!r} has none")
    return dict(got)


def effective(numerics: dict, quant) -> dict:
    """The declaration less what the checkpoint's own reading already says."""
    out = {}
    if numerics.get("activation", quant.activation) != quant.activation:
        out["activation"] = numerics["activation"]
    if "weight_scale_dtype" in numerics and _has_float_scales(quant):
        out["weight_scale_dtype"] = numerics["weight_scale_dtype"]
    for key in _BOOL_KEYS:
        if numerics.get(key):
            out[key] = numerics[key]
    if "weights_dequantized" in numerics and \
            _DEQUANTIZED_SCHEMES.get(numerics["weights_dequantized"]) != quant.scheme:
        out["weights_dequantized"] = numerics["weights_dequantized"]
    return out


def describe(numerics: dict) -> str:
    """The declaration as the result column shows it ("" when nothing is declared)."""
    return ", ".join(f"{k}={numerics[k]}" for k in NUMERICS_KEYS if k in numerics)


def reading_scheme(quant, numerics: dict) -> tuple[str, str]:
    """(scheme, activation mode) of the reading: the tolerance table's keys for it."""
    if "weights_dequantized" in effective(numerics, quant):
        return _DEQUANTIZED_SCHEMES[numerics["weights_dequantized"]], "none"
    mode = numerics.get("activation")
    if mode is None or mode == quant.activation:
        return quant.scheme, quant.activation
    return _activation_scheme(quant.scheme, mode).name, mode


def reading(ckpt, numerics: dict):
    """`ckpt` read as `numerics` declares (a new Checkpoint; `ckpt` is not modified)."""
    numerics = effective(numerics, ckpt)
    if not numerics:
        return ckpt
    out = replace(ckpt, tensors=dict(ckpt.tensors))
    if numerics.get("w13_requantized"):
        out = _requantized_w13(out, numerics["w13_requantized"])
    if "weight_scale_dtype" in numerics:
        dtype = getattr(torch, numerics["weight_scale_dtype"])
        for name, d in declared_tensors(out).items():
            if d.role == "scale" and name in out.tensors:
                out.tensors[name] = out.tensors[name].to(dtype)
    if "weights_dequantized" in numerics:
        out = _dequantized(out, numerics["weights_dequantized"])
    elif "activation" in numerics:
        out = _with_activation(out, numerics["activation"])
    arithmetic = {k: True for k in _ARITHMETIC_KEYS if numerics.get(k)}
    return replace(out, **arithmetic) if arithmetic else out


def _dequantized(ckpt, dtype_name: str):
    """The unquantized checkpoint of the weights `ckpt` dequantizes to, rounded to
    `dtype_name` (biases kept as stored): `dequantize`'s checks and values, each linear
    dequantized a chunk of experts at a time (`_linear_chunks`) into the rounded result."""
    dtype = getattr(torch, dtype_name)
    check_tensors(ckpt)  # what `dequantize` checks beyond the linears themselves
    for p in ("w13", "w2"):
        read_pre_quant_scale(ckpt, p)
        if ckpt.activation in STATIC_INPUT_MODES:
            read_input_scale(ckpt, p)
    read_biases(ckpt)
    tensors = {}
    for p in ("w13", "w2"):
        out = buffer = None
        for lo, hi, linear, step in _linear_chunks(ckpt, p):
            E, n_out, n_in = ckpt.num_experts, *linear.codes.shape[1:]
            if out is None:
                out = torch.empty(E, n_out, n_in, dtype=dtype, device=linear.codes.device)
            elif buffer is None:  # after expert 0 alone: the chunks' reused float64 buffer
                buffer = torch.empty(step * n_out * n_in, dtype=torch.float64,
                                     device=linear.codes.device)
            out[lo:hi] = dequantize_canonical(linear, out=buffer)
        tensors[f"{p}_weight"] = out
    for name in ("w13_bias", "w2_bias"):
        if name in ckpt.tensors:
            tensors[name] = ckpt.tensors[name]
    return Checkpoint(_DEQUANTIZED_SCHEMES[dtype_name], tensors)


def _chunk_bytes() -> int:
    return _REFERENCE_MOE.CHUNK_BYTES


def _expert_ranges(experts: int, elements: int) -> Iterator[tuple[int, int]]:
    """(lo, hi) ranges over `experts` experts, as many at once as a float64 copy of
    `elements` values per expert fits in the reference's CHUNK_BYTES (one at least)."""
    step = max(1, _chunk_bytes() // (8 * max(elements, 1)))
    for lo in range(0, experts, step):
        yield lo, min(lo + step, experts)


def _linear_chunks(ckpt, p: str):
    """(lo, hi, canonical form of linear `p` of experts lo..hi-1, the chunk size in experts)
    over every expert: expert 0 alone first (its size sets the step), then as many experts
    at once as their float64 weights fit in the reference's CHUNK_BYTES (one at least), as
    the reference's own `moe` reads them (`read_linear` of `slice_experts`, positions in
    errors those of the whole layer). The canonical codes of fp8 / fp4 formats are float64
    themselves: no reader ever sees more than a chunk."""
    E = ckpt.num_experts
    lo, step = 0, 1
    while lo < E:
        hi = min(lo + step, E)
        linear = read_linear(ckpt.slice_experts(lo, hi), p)
        if lo == 0:
            step = max(1, _chunk_bytes() // (8 * max(linear.codes[0].numel(), 1)))
        yield lo, hi, linear, step
        lo = hi


def _stacked(parts: dict[str, torch.Tensor], into: dict[str, torch.Tensor], experts: int,
             lo: int, hi: int) -> None:
    """Copy a chunk's tensors (experts lo..hi-1) into `into`'s whole-layer tensors, made
    (empty, `experts` long, each tensor's dtype and device) at the first chunk."""
    for name, t in parts.items():
        if name not in into:
            into[name] = torch.empty(experts, *t.shape[1:], dtype=t.dtype, device=t.device)
        into[name][lo:hi] = t


def _has_float_scales(quant) -> bool:
    return get_scheme(quant.scheme).scale_encoding == "float"


def _activation_scheme(scheme: str, mode: str):
    """The scheme that stores the same weights as `scheme` and reads activations as `mode`."""
    info = get_scheme(scheme)
    if mode in info.activation_modes:  # the scheme itself reads it (mxfp8 with 16-bit
        return info                    # activations is mxfp8's own, not fp8-w8a16's)
    for s in SCHEMES.values():
        if (mode in s.activation_modes and s.element == info.element
                and s.weight_bits == info.weight_bits and s.packed == info.packed
                and s.scale_encoding == info.scale_encoding):
            return s
    raise NumericsError(f"activation={mode}: no scheme reads {scheme}'s weights with "
                        f"{mode} activations")


def _with_activation(ckpt, mode: str):
    target = _activation_scheme(ckpt.scheme, mode)
    if ckpt.act_order and not target.act_order:
        raise NumericsError(f"activation={mode}: {target.name}, which reads {ckpt.scheme}'s "
                            "weights with it, has no act-order checkpoints")
    if target.name == ckpt.scheme:
        return replace(ckpt, activation=mode)
    fmt = ckpt.checkpoint_format
    if fmt in target.checkpoint_formats:
        return replace(ckpt, scheme=target.name, activation=mode)
    # the reading scheme has no such layout: the same codes, scales, zeros and g_idx in one
    # it has (scales kept in their stored dtype)
    # (a chunk of experts at a time: `_linear_chunks`; `canonicalize`'s check first)
    check_tensors(ckpt)
    out = replace(ckpt, scheme=target.name, activation=mode, checkpoint_format=_REWRITE_FORMAT,
                  tensors={})
    for p in ("w13", "w2"):
        dtype = next(t.dtype for n, t in ckpt.tensors.items()
                     if n.startswith(p) and declared_tensors(ckpt)[n].role == "scale")
        for lo, hi, linear, _ in _linear_chunks(ckpt, p):
            _stacked(write_linear(linear, p, out, dtype), out.tensors, ckpt.num_experts, lo, hi)
    for name in ("w13_bias", "w2_bias"):
        if name in ckpt.tensors:
            out.tensors[name] = ckpt.tensors[name]
    return out


def _requantized_w13(ckpt, via: str | bool = True):
    """Per-tensor w13 with [E, 2] shard scales: both shards requantized to the larger scale,
    one scale per expert: codes' = Q(w / s_max) with w = codes * s_shard, Q the element's own
    rounding (fp8: e4m3 RNE; int8: round half to even, clamped), `via` the float dtype name the
    processing holds w in (its scale cast to that dtype first), or True for exact w."""
    scale = ckpt.tensors.get("w13_weight_scale")
    if (ckpt.weight_strategy == STRATEGY_TENSOR and scale is not None and scale.dim() == 1
            and scheme_format(ckpt).layout not in PACKED_LAYOUTS):
        # one scale per expert already (the exact tier's structured checkpoints): collapsing
        # w1 / w3 to their maximum leaves it as it is. The declaration is the processed
        # folder layer's; the same backend reads this checkpoint with nothing to collapse
        return ckpt
    if (ckpt.weight_strategy != STRATEGY_TENSOR or scale is None or scale.dim() != 2
            or scheme_format(ckpt).layout in PACKED_LAYOUTS):
        raise NumericsError("w13_requantized: declared for a checkpoint without per-tensor "
                            f"w1 / w3 shard scales ({ckpt.scheme} {ckpt.weight_strategy})")
    w = ckpt.tensors["w13_weight"]
    s = scale.to(torch.float64)
    s_max = s.max(dim=1).values
    n = w.shape[1] // 2
    requantized = torch.empty_like(w)
    # a chunk of experts at a time, each shard's float64 copies within CHUNK_BYTES
    for lo, hi in _expert_ranges(w.shape[0], n * w.shape[2]):
        for j in range(2):
            rows = slice(j * n, (j + 1) * n)
            requantized[lo:hi, rows] = _requantized_shard(w[lo:hi, rows], s[lo:hi, j],
                                                          s_max[lo:hi], via)
    ckpt.tensors["w13_weight"] = requantized
    ckpt.tensors["w13_weight_scale"] = s_max.to(scale.dtype)
    return ckpt


def _requantized_shard(codes: torch.Tensor, s: torch.Tensor, s_max: torch.Tensor,
                       via: str | bool) -> torch.Tensor:
    """One shard's codes [e, n, K] of scales `s` [e] requantized to `s_max` [e] (float64),
    held as `_requantized_w13` says."""
    values = codes.to(torch.float64)
    if via is True:
        q = values * (s / s_max)[:, None, None]
    else:  # held in `via`: w rounded to it, the scale rounded first; then / s_max in fp32
        dtype = getattr(torch, via)
        held = (values * s.to(dtype).to(torch.float64)[:, None, None]).to(dtype)
        q = (held.to(torch.float32) / s_max.to(torch.float32)[:, None, None]).to(torch.float64)
    return _element_codes(q, codes.dtype)


def _element_codes(q: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """`q` stored as `dtype` codes by that element's rounding: an integer rounded half to
    even and clamped (a cast would truncate), a float rounded to nearest even within range."""
    if dtype.is_floating_point:
        top = torch.finfo(dtype).max
        return q.clamp(-top, top).to(dtype)
    info = torch.iinfo(dtype)
    return torch.round(q).clamp(info.min, info.max).to(dtype)


__all__ = ["NumericsError", "declared", "describe", "effective", "reading", "reading_scheme"]
