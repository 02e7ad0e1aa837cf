"""The declared reading's transformations over chunks of experts (conformance/harness/numerics.py):
the same bits as the whole-layer computation they replaced, and no temporary above the
reference's CHUNK_BYTES (one expert at least).

Before, `_requantized_w13`, `_with_activation`'s rewrite and `_dequantized` each made a float64
(or int32) copy of a whole linear across every expert: on an H200 (vLLM 0.25.1) DeepSeek-V3's
accuracy check ran out of memory in that step ("Tried to allocate 28.00 GiB": one float64 half
of its w13), Mixtral-8x7B's fp8 case peaked at 100.8 GiB. The whole-layer versions below are
that code, kept as the known answer."""

from __future__ import annotations

import importlib
from dataclasses import replace

import pytest
import torch
from moecert.conformance.harness import numerics
from moecert.conformance.harness.numerics import reading
from moecert.reference import Checkpoint, MoEProblem, canonicalize, dequantize, synthesize
from moecert.reference.layouts import write_linear
from moecert.reference.schemes.tensors import declared_tensors
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

moe_module = importlib.import_module("moecert.reference.moe")  # `moe` on the package: the function

E, K, N = 6, 128, 128  # N a multiple of block fp8's 128: no block padded in a temporary
P = MoEProblem(M=7, K=K, N=N, E=E, topk=2)
P_BIAS = replace(P, bias=True)
W13_EXPERT_BYTES = 2 * N * K * 8  # one expert's w13 in float64
TWO_EXPERTS = 2 * W13_EXPERT_BYTES


# --- the whole-layer code these replaced (numerics.py at 68d5430) ---------------------------

def _whole_dequantized(ckpt, dtype_name: str):
    dtype = getattr(torch, dtype_name)
    w = dequantize(ckpt)
    tensors = {"w13_weight": w["w13"].to(dtype), "w2_weight": w["w2"].to(dtype)}
    for name in ("w13_bias", "w2_bias"):
        if name in ckpt.tensors:
            tensors[name] = ckpt.tensors[name]
    return Checkpoint(numerics._DEQUANTIZED_SCHEMES[dtype_name], tensors)


def _whole_with_activation(ckpt, mode: str):
    target = numerics._activation_scheme(ckpt.scheme, mode)
    if target.name == ckpt.scheme:
        return replace(ckpt, activation=mode)
    if ckpt.checkpoint_format in target.checkpoint_formats:
        return replace(ckpt, scheme=target.name, activation=mode)
    canon = canonicalize(ckpt)
    out = replace(ckpt, scheme=target.name, activation=mode,
                  checkpoint_format=numerics._REWRITE_FORMAT, tensors={})
    for p in ("w13", "w2"):
        dtype = next(t.dtype for n, t in ckpt.tensors.items()
                     if n.startswith(p) and declared_tensors(ckpt)[n].role == "scale")
        out.tensors.update(write_linear(canon[p], p, out, dtype))
    for name in ("w13_bias", "w2_bias"):
        if name in ckpt.tensors:
            out.tensors[name] = ckpt.tensors[name]
    return out


def _whole_requantized_w13(ckpt, via=True):
    scale = ckpt.tensors["w13_weight_scale"]
    if scale.dim() == 1:
        return ckpt
    w = ckpt.tensors["w13_weight"]
    s = scale.to(torch.float64)
    s_max = s.max(dim=1).values
    n = w.shape[1] // 2
    shards = []
    for j in range(2):
        codes = w[:, j * n:(j + 1) * n].to(torch.float64)
        if via is True:
            q = codes * (s[:, j] / s_max)[:, None, None]
        else:
            dtype = getattr(torch, via)
            held = (codes * s[:, j].to(dtype).to(torch.float64)[:, None, None]).to(dtype)
            q = (held.to(torch.float32) / s_max.to(torch.float32)[:, None, None]).to(
                torch.float64)
        shards.append(numerics._element_codes(q, w.dtype))
    ckpt.tensors["w13_weight"] = torch.cat(shards, dim=1)
    ckpt.tensors["w13_weight_scale"] = s_max.to(scale.dtype)
    return ckpt


def _whole_reading(ckpt, declared, monkeypatch):
    with monkeypatch.context() as m:
        m.setattr(numerics, "_dequantized", _whole_dequantized)
        m.setattr(numerics, "_with_activation", _whole_with_activation)
        m.setattr(numerics, "_requantized_w13", _whole_requantized_w13)
        return reading(ckpt, declared)


# (scheme, synthesize's attributes, the problem, the declaration): every transformation and
# every scheme family that reaches it
CASES = [
    # w13_requantized: fp8 and int8 per-tensor shards, exact and held in float16 / bfloat16
    ("fp8-w8a8", {"weight_strategy": "tensor", "activation": "static-tensor"}, P,
     {"w13_requantized": True}),
    ("fp8-w8a8", {"weight_strategy": "tensor", "activation": "static-tensor"}, P,
     {"w13_requantized": "float16"}),
    ("fp8-w8a16", {"weight_strategy": "tensor"}, P,
     {"w13_requantized": "bfloat16", "weight_scale_dtype": "bfloat16"}),
    ("int8-w8a8", {"weight_strategy": "tensor", "activation": "static-tensor"}, P,
     {"w13_requantized": True, "weight_scale_dtype": "float16"}),
    ("int8-w8a8", {"weight_strategy": "tensor", "activation": "static-tensor"}, P,
     {"w13_requantized": "float16"}),
    # weight_scale_dtype alone (scales only: never chunked, compared all the same)
    ("gptq-int4", {"group_size": 32}, P, {"weight_scale_dtype": "bfloat16"}),
    # the activation rewrite: compressed-tensors int4 read as W4A8 (gptq_v2 written), a
    # W4A8 AWQ layer run with 16-bit activations (read as gptq-int4, written as gptq_v2)
    ("ct-int4", {"sym": False, "group_size": 32}, P, {"activation": "dynamic-token"}),
    ("ct-int4", {"group_size": 32}, P_BIAS,
     {"activation": "dynamic-token", "weight_scale_dtype": "float16"}),
    ("w4a8-int8", {"checkpoint_format": "awq", "group_size": 32}, P, {"activation": "none"}),
    # and one read without a rewrite (gptq is a W4A8 format too)
    ("gptq-int4", {"group_size": 32}, P, {"activation": "dynamic-token"}),
    # weights_dequantized: block fp8, GPTQ with act order (g_idx, codes stored [in, out]),
    # NVFP4 (global scales), MXFP4, a 16-bit checkpoint in the other 16-bit dtype, biases,
    # after a requantization
    ("fp8-w8a8", {}, P, {"weights_dequantized": "bfloat16"}),
    ("gptq-int4", {"act_order": True, "group_size": 32}, P, {"weights_dequantized": "float16"}),
    ("nvfp4", {}, P_BIAS, {"weights_dequantized": "bfloat16", "bias_after_rounding": True}),
    ("mxfp4", {}, P, {"weights_dequantized": "float16"}),
    ("bf16", {}, P_BIAS, {"weights_dequantized": "float16"}),
    ("fp8-w8a8", {"weight_strategy": "tensor", "activation": "static-tensor"}, P,
     {"w13_requantized": "float16", "weights_dequantized": "bfloat16"}),
]
IDS = [f"{s}-{'-'.join(f'{k}={v}' for k, v in d.items())}" for s, _, _, d in CASES]


def _drawn(scheme, problem, attrs, declared):
    """The case's checkpoint; a requantized one with two w13 shard scales per expert (int8
    per-tensor checkpoints are drawn with one): the up shard's scale 0.6 - 1.4 times the
    gate's."""
    ckpt = synthesize(scheme, problem, seed=11, **attrs)
    s = ckpt.tensors.get("w13_weight_scale")
    if "w13_requantized" in declared and s.dim() == 1:
        g = torch.Generator().manual_seed(12)
        up = s * (0.6 + 0.8 * torch.rand(s.shape, generator=g, dtype=s.dtype))
        ckpt = replace(ckpt, tensors={**ckpt.tensors,
                                      "w13_weight_scale": torch.stack([s, up], dim=1)})
    return ckpt


def _same(got, want):
    assert (got.scheme, got.activation, got.checkpoint_format) == \
        (want.scheme, want.activation, want.checkpoint_format)
    for flag in numerics._ARITHMETIC_KEYS:
        assert getattr(got, flag) == getattr(want, flag), flag
    assert sorted(got.tensors) == sorted(want.tensors)
    for name, t in want.tensors.items():
        g = got.tensors[name]
        assert (g.dtype, g.shape, g.device) == (t.dtype, t.shape, t.device), name
        assert torch.equal(g.view(torch.uint8) if g.dtype.itemsize == 1 else g,
                           t.view(torch.uint8) if t.dtype.itemsize == 1 else t), name


@pytest.mark.parametrize("chunk_bytes", [1, TWO_EXPERTS, None],
                         ids=["one-expert", "two-experts", "default"])
@pytest.mark.parametrize("scheme,attrs,problem,declared", CASES, ids=IDS)
def test_the_chunked_reading_is_the_whole_layer_one_bit_for_bit(scheme, attrs, problem,
                                                                  declared, chunk_bytes,
                                                                  monkeypatch):
    if chunk_bytes is not None:
        monkeypatch.setattr(moe_module, "CHUNK_BYTES", chunk_bytes)
    ckpt = _drawn(scheme, problem, attrs, declared)
    want = _whole_reading(ckpt, declared, monkeypatch)
    got = reading(ckpt, declared)
    assert got is not ckpt
    _same(got, want)
    # the declaration did transform something (a test of a no-op would prove nothing)
    changed = [n for n, t in ckpt.tensors.items()
               if n not in got.tensors or got.tensors[n] is not t]
    assert changed or got.scheme != ckpt.scheme or got.activation != ckpt.activation


class _LargestTensors(TorchDispatchMode):
    """The largest tensor every aten op returns, in bytes, by dtype."""

    def __init__(self):
        super().__init__()
        self.largest: dict[torch.dtype, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                size = t.numel() * t.element_size()
                self.largest[t.dtype] = max(self.largest.get(t.dtype, 0), size)
        return out


def _largest(fn) -> dict[torch.dtype, int]:
    with _LargestTensors() as mode:
        fn()
    return mode.largest


# the cases whose weights are transformed (not scales alone, nor a read without a rewrite)
WEIGHTS = [i for i, (s, _, _, d) in enumerate(CASES)
           if {"w13_requantized", "weights_dequantized"} & set(d)
           or ("activation" in d and s != "gptq-int4")]


@pytest.mark.parametrize("scheme,attrs,problem,declared", [CASES[i] for i in WEIGHTS],
                         ids=[IDS[i] for i in WEIGHTS])
def test_no_transformation_holds_more_than_a_chunk_of_experts(scheme, attrs, problem,
                                                              declared, monkeypatch):
    """Every tensor any op makes while the layer is read (float64 weights, unpacked int32
    codes, the result itself: E=6 experts, each smaller than two experts' float64 w13) stays
    within CHUNK_BYTES, lowered to two experts' float64 w13; the whole-layer code made a
    float64 (requantization, dequantization) or int32 (the int4 rewrite's unpacked codes)
    copy of a whole linear, above it."""
    monkeypatch.setattr(moe_module, "CHUNK_BYTES", TWO_EXPERTS)
    ckpt = _drawn(scheme, problem, attrs, declared)
    whole = _largest(lambda: _whole_reading(ckpt, declared, monkeypatch))
    got = _largest(lambda: reading(ckpt, declared))
    assert max(got.values()) <= TWO_EXPERTS, {str(d): b for d, b in got.items()}
    assert got.get(torch.float64, 0) <= TWO_EXPERTS
    assert max(whole.values()) > TWO_EXPERTS  # the test tells the two apart


def test_one_expert_at_a_time_when_an_expert_is_larger_than_the_chunk(monkeypatch):
    """A DeepSeek-V3-sized expert (w13 2 x 2048 x 7168 float64: 224 MiB) is larger than the
    64 MiB chunk: one expert per read, never fewer than one. Counted at the reader."""
    monkeypatch.setattr(moe_module, "CHUNK_BYTES", 1)
    seen = []
    read_linear = numerics.read_linear

    def counting(ckpt, p):
        linear = read_linear(ckpt, p)
        seen.append((p, linear.codes.shape[0]))
        return linear
    monkeypatch.setattr(numerics, "read_linear", counting)
    ckpt = synthesize("gptq-int4", P, seed=3, group_size=32)
    reading(ckpt, {"weights_dequantized": "bfloat16"})
    assert seen == [(p, 1) for p in ("w13", "w2") for _ in range(E)]
    seen.clear()
    monkeypatch.setattr(moe_module, "CHUNK_BYTES", TWO_EXPERTS)
    reading(ckpt, {"weights_dequantized": "bfloat16"})
    # expert 0 alone (it sets the step), then 2 experts of w13, 4 of w2 (half its size)
    assert seen == [("w13", 1), ("w13", 2), ("w13", 2), ("w13", 1), ("w2", 1), ("w2", 4),
                    ("w2", 1)]
