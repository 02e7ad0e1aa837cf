"""Every malformed checkpoint is rejected by every entry point (the reference's `dequantize`
and `moe`, each built-in backend's `create_layer` + `process_weights_after_loading`) with an
error that names the tensor (or attribute) at fault.

The corruptions are generated from the reference's declaration of the tensors each scheme
variant holds (`reference/schemes/tensors.py`): every dimension of every tensor, its dtype,
its absence, a transposed view, a foreign device, a numpy array, bad values by the tensor's
role, unknown extra tensors and bad group sizes. Ids read
`<variant>-<tensor>-<corruption>-<entry>`, e.g. `gptq-int4-w13_qweight-shape-dim1-torch`.
"""

from __future__ import annotations

import functools
import math
import re
import types
from collections.abc import Callable
from dataclasses import dataclass, replace

import pytest
import torch
from moecert.conformance.harness.execute import triton_for
from moecert.kernels.errors import BackendError
from moecert.kernels.registry import get_backend
from moecert.reference import Checkpoint, MoEProblem, dequantize, make_inputs, moe, synthesize
from moecert.reference.errors import CheckpointError
from moecert.reference.schemes import VARIANT_FIELDS, VariantError, format_record
from moecert.reference.schemes.tensors import INT32, declared_tensors

P = MoEProblem(M=4, K=64, N=32, E=2, topk=2)
P_BIAS = replace(P, bias=True)

# name -> (scheme, checkpoint attributes, problem): the schemes' main variants
VARIANTS = {
    "gptq-int4": ("gptq-int4", dict(group_size=32, sym=False, checkpoint_format="gptq"), P),
    "gptq-int4-sym": ("gptq-int4", dict(group_size=32, checkpoint_format="gptq_v2"), P),
    "gptq-int4-act": ("gptq-int4", dict(group_size=32, act_order=True), P),
    "gptq-int8": ("gptq-int8", dict(group_size=-1, sym=False, checkpoint_format="gptq_v2"), P),
    "awq-int4": ("awq-int4", dict(group_size=32), P_BIAS),
    "modelopt-int4-awq": ("modelopt-int4-awq", dict(group_size=32), P),
    "ct-int4": ("ct-int4", dict(group_size=32, sym=False), P),
    "ct-int4-sym": ("ct-int4", dict(group_size=-1, checkpoint_format="ct-0.18"), P_BIAS),
    "ct-int8-act": ("ct-int8", dict(group_size=32, act_order=True), P),
    "w4a8-int8": ("w4a8-int8", dict(group_size=32, checkpoint_format="gptq"), P),
    "int8-w8a16": ("int8-w8a16", dict(weight_strategy="channel"), P),
    "int8-w8a8-static": ("int8-w8a8", dict(weight_strategy="tensor",
                                           activation="static-tensor"), P),
    "fp8-block": ("fp8-w8a16", dict(weight_strategy="block"), P),
    "fp8-tensor": ("fp8-w8a16", dict(weight_strategy="tensor"), P),
    "fp8-w8a8-static": ("fp8-w8a8", dict(weight_strategy="tensor",
                                         activation="static-tensor"), P),
    "mxfp8": ("mxfp8", {}, P),
    "nvfp4-a4": ("nvfp4", dict(activation="nvfp4"), P),
    "nvfp4-ct": ("nvfp4", dict(checkpoint_format="ct", activation="nvfp4"), P_BIAS),
    "mxfp4": ("mxfp4", {}, P_BIAS),  # gpt-oss: biases
    "bf16": ("bf16", {}, P_BIAS),
}
BACKENDS = ("torch", "triton", "xpu")
ENTRIES = ("dequantize", "moe", *BACKENDS)


@functools.cache
def base(variant: str) -> Checkpoint:
    scheme, attrs, problem = VARIANTS[variant]
    return synthesize(scheme, problem, seed=3, **attrs)


@dataclass(frozen=True)
class Corruption:
    variant: str
    culprit: str  # the tensor (or attribute) the error must name
    kind: str
    change: Callable  # (tensors, attrs) -> None, in place on copies
    needs_problem: bool = False  # only wrong for a given problem (a missing bias)

    @property
    def id(self) -> str:
        return f"{self.variant}-{self.culprit}-{self.kind}"


def _set(name, t):
    def change(tensors, attrs):
        tensors[name] = t
    return change


def _drop(name):
    def change(tensors, attrs):
        del tensors[name]
    return change


def _attr(**kw):
    def change(tensors, attrs):
        attrs.update(kw)
    return change


def _edited(t: torch.Tensor, index, value) -> torch.Tensor:
    t = t.clone()
    t[index] = value
    return t


def _grown(t: torch.Tensor, dim: int) -> torch.Tensor:
    return torch.cat([t, t.narrow(dim, 0, 1)], dim)


def _as_numpy(t: torch.Tensor):
    if t.dtype == torch.float8_e4m3fn:
        return t.view(torch.uint8).numpy()
    return (t.float() if t.dtype == torch.bfloat16 else t).numpy()


def _value_corruptions(ckpt: Checkpoint, name: str, role: str, t: torch.Tensor):
    """(kind, bad tensor) for the values a tensor of this role must not hold."""
    first = (1,) + (0,) * (t.dim() - 1)  # expert 1: positions must be the layer's
    if role in ("scale", "global_scale", "input_scale") and t.is_floating_point():
        for kind, v in (("nan", math.nan), ("inf", math.inf), ("zero", 0.0), ("negative", -0.5)):
            if kind == "inf" and t.dtype == torch.float8_e4m3fn:
                continue  # e4m3fn has no infinity: writing one saturates to 448, a valid scale
            if kind == "negative" and role == "scale" and \
                    format_record(ckpt).scale_sign == "any":
                continue  # GPTQ's (q - z) * s reads a negative scale signed (issue 42)
            yield f"scale-{kind}", _edited(t, first, v)
    elif role == "scale":  # E8M0 exponents
        yield "e8m0-0xff", _edited(t, first, 0xFF)
    elif role == "zeros":
        if ckpt.sym:  # every field must be the symmetric zero
            yield "zeros-not-symmetric", torch.zeros_like(t)
        elif ckpt.checkpoint_format == "gptq":  # v1 stores z - 1: a stored 2^b - 1 overflows
            yield "zeros-overflow", _edited(t, first, -1)
    elif role == "g_idx":
        groups = int(t.max()) + 1
        yield "g_idx-past-groups", _edited(t, (1, 5), groups)
        yield "g_idx-negative", _edited(t, (1, 5), -1)
    elif role == "weight" and t.dtype == torch.float8_e4m3fn:
        for byte in (0x7F, 0xFF):  # S.1111.111 is NaN, either sign
            yield f"nan-code-{byte:#x}", _edited(t.view(torch.uint8), first, byte).view(
                torch.float8_e4m3fn)
    elif role in ("weight", "bias") and t.is_floating_point():
        yield "nan", _edited(t, first, math.nan)
        yield "inf", _edited(t, first, -math.inf)
    elif role == "shape":  # compressed-tensors' (out, in) per expert
        yield "wrong-in", _edited(t, (slice(None), 1), int(t[0, 1]) + 8)


def _extra_names(variant: str) -> list[str]:
    """A misspelling, a tensor no scheme has, and tensors other variants hold."""
    ckpt = base(variant)
    declared = declared_tensors(ckpt)
    others = {n: d for v in VARIANTS for n, d in declared_tensors(base(v)).items()
              if n not in declared and n.startswith("w13")}
    by_role = {}
    for n, d in sorted(others.items()):
        by_role.setdefault(d.role, n)
    return [n for n in ("w13_biases", "w13_weight_scale_2", *sorted(by_role.values()))
            if n not in declared]


def corruptions(variant: str) -> list[Corruption]:
    ckpt = base(variant)
    problem = VARIANTS[variant][2]
    declared = declared_tensors(ckpt)
    out = []
    for name, t in ckpt.tensors.items():
        d = declared[name]
        for dim in range(t.dim()):
            out.append(Corruption(variant, name, f"shape-dim{dim}", _set(name, _grown(t, dim))))
        wrong = torch.int64 if d.dtypes == INT32 else torch.float64
        as_float = t.view(torch.uint8) if t.dtype == torch.float8_e4m3fn else t
        out.append(Corruption(variant, name, "dtype", _set(name, as_float.to(wrong))))
        if t.dtype == torch.uint8:  # packed e2m1 or E8M0 bytes read as signed
            out.append(Corruption(variant, name, "dtype-int8", _set(name, t.view(torch.int8))))
        if d.required(ckpt.sym, ckpt.act_order, problem.bias):
            out.append(Corruption(variant, name, "missing", _drop(name),
                                  needs_problem=not d.required(ckpt.sym, ckpt.act_order,
                                                               False)))
        if t.dim() >= 2 and t.shape[-1] != t.shape[-2]:
            out.append(Corruption(variant, name, "transposed", _set(name, t.transpose(-1, -2))))
        out.append(Corruption(variant, name, "device-meta", _set(name, t.to("meta"))))
        out.append(Corruption(variant, name, "numpy", _set(name, _as_numpy(t))))
        for kind, bad in _value_corruptions(ckpt, name, d.role, t):
            out.append(Corruption(variant, name, kind, _set(name, bad)))
    for extra in _extra_names(variant):
        out.append(Corruption(variant, extra, "extra",
                              _set(extra, torch.ones(problem.E, 8, dtype=torch.int32))))
    if ckpt.info.group_sizes:
        out.append(Corruption(variant, "group_size", "zero", _attr(group_size=0)))
        if ckpt.group_size not in (-1, 64) and not ckpt.info.scale_block:
            # 64 divides K = 64 but not N = 32
            out.append(Corruption(variant, "group_size", "not-dividing-n",
                                  _attr(group_size=64)))
    return out


def _claims(variant: str, entry: str) -> bool:
    if entry in ("dequantize", "moe"):
        return True
    problem = VARIANTS[variant][2]
    with triton_for("cpu"):
        return get_backend(entry).supports(base(variant), problem) is None


def _cases():
    for variant in VARIANTS:
        entries = [e for e in ENTRIES if _claims(variant, e)]
        for c in corruptions(variant):
            for entry in entries:
                if not (c.needs_problem and entry == "dequantize"):
                    yield pytest.param(c, entry, id=f"{c.id}-{entry}")


def _run(entry: str, variant: str, tensors: dict, attrs: dict) -> None:
    scheme, _, problem = VARIANTS[variant]
    if entry in ("dequantize", "moe"):
        ckpt = Checkpoint(scheme, tensors, **attrs)
        if entry == "dequantize":
            dequantize(ckpt)
        else:
            moe(ckpt, *_inputs(variant), problem)
        return
    # backends take any object with a checkpoint's attributes (the reference's Checkpoint
    # would refuse some of these corruptions before a backend saw them; a backend's
    # Variant.of refuses a bad attribute with a VariantError naming it)
    ckpt = types.SimpleNamespace(scheme=scheme, tensors=tensors, **attrs)
    backend = get_backend(entry)
    with triton_for("cpu"):
        layer = backend.create_layer(ckpt, problem)
        backend.process_weights_after_loading(layer)


@functools.cache
def _inputs(variant: str):
    return make_inputs(VARIANTS[variant][2], seed=5)


def _attrs(ckpt: Checkpoint) -> dict:
    return {f: getattr(ckpt, f) for f in VARIANT_FIELDS}


def _named(message: str) -> list[str]:
    """The tensors (or attributes) an error message leads with: `a, b: expected ...`."""
    head = message.split(": expected", 1)[0]
    return [n.removeprefix("checkpoint.") for n in head.split(", ")]


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("entry", ENTRIES)
def test_well_formed_variant_passes(variant, entry):
    # the corruptions below are the only difference from a checkpoint every entry accepts
    if not _claims(variant, entry):
        pytest.skip(f"{entry} does not claim {variant}")
    ckpt = base(variant)
    _run(entry, variant, dict(ckpt.tensors), _attrs(ckpt))


@pytest.mark.parametrize("corruption,entry", list(_cases()))
def test_corruption_names_the_tensor(corruption: Corruption, entry: str):
    ckpt = base(corruption.variant)
    tensors, attrs = dict(ckpt.tensors), _attrs(ckpt)
    corruption.change(tensors, attrs)
    with pytest.raises((CheckpointError, BackendError, VariantError)) as info:
        _run(entry, corruption.variant, tensors, attrs)
    message = str(info.value)
    if corruption.culprit == "group_size" and "claims" in message:
        # a backend refuses a problem its group size cannot hold, saying why
        assert re.search(r"group.size", message), message
    elif entry == "dequantize":
        # without a problem, two tensors that alone carry a size and disagree on it (the two
        # weights of a per-tensor fp8 layer) cannot be told apart: both are named
        assert corruption.culprit in _named(message), message
    else:
        assert _named(message) == [corruption.culprit], message
