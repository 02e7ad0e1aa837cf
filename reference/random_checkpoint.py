"""`random_checkpoint`: valid checkpoint tensors drawn directly in the storage layout.

`synthesize` quantizes float weights with the producing tool's rule, which takes seconds per
expert at DeepSeek-V3 sizes on a CPU. Checking a kernel's arithmetic at model sizes needs only
valid tensors of the right statistics: random codes (uniform over the code range, zero points
and GPTQ v1 offsets respected), random scales with weights of standard deviation about
1/sqrt(in), random biases, drawn on any device in a fraction of a second.
"""

from __future__ import annotations

import math

import torch

from .checkpoint import Checkpoint
from .problem import MoEProblem
from .schemes import ACT_STATIC_TENSOR, FP8_BLOCK, MX_BLOCK, STRATEGY_BLOCK, STRATEGY_CHANNEL


def random_checkpoint(scheme: str, problem: MoEProblem, seed: int = 0, device="cpu",
                      **attrs) -> Checkpoint:
    ckpt = Checkpoint(scheme=scheme, tensors={}, **attrs)
    gen = torch.Generator(device=device).manual_seed(seed)
    P = problem
    tensors: dict[str, torch.Tensor] = {}
    for p, (n_out, n_in) in {"w13": (P.w13_rows, P.K), "w2": (P.K, P.N)}.items():
        tensors.update(_linear(ckpt, p, P.E, n_out, n_in, gen, device, P.torch_dtype))
    if P.bias:
        tensors["w13_bias"] = (0.1 * _randn(gen, device, P.E, P.w13_rows)).to(P.torch_dtype)
        tensors["w2_bias"] = (0.1 * _randn(gen, device, P.E, P.K)).to(P.torch_dtype)
    if ckpt.activation == ACT_STATIC_TENSOR:  # about amax / 127 of unit-variance inputs
        for p in ("w13", "w2"):
            tensors[f"{p}_input_scale"] = (3 + 2 * _rand(gen, device, P.E)) / 127
    return Checkpoint(**{**ckpt.__dict__, "tensors": tensors})


def _rand(gen, device, *shape):
    return torch.rand(*shape, generator=gen, device=device)


def _randn(gen, device, *shape):
    return torch.randn(*shape, generator=gen, device=device)


def _words(gen, device, *shape):
    return torch.randint(-2**31, 2**31 - 1, shape, generator=gen, device=device,
                         dtype=torch.int32)


def _repeat_code(code: int, bits: int) -> int:
    """An int32 word holding `code` in every field."""
    word = 0
    for i in range(32 // bits):
        word |= code << (i * bits)
    return word - (1 << 32) if word >= 1 << 31 else word


def _group_scales(gen, device, shape, bits, n_in, dtype):
    code_std = {4: 4.6, 8: 73.9}[bits]  # std of uniform codes over [-2^(b-1), 2^(b-1))
    return ((0.5 + _rand(gen, device, *shape)) / (code_std * n_in**0.5)).to(dtype)


def _linear(ckpt, p, E, n_out, n_in, gen, device, model_dtype):
    family, bits = ckpt.info.family, ckpt.info.weight_bits
    layout = ("awq" if ckpt.checkpoint_format == "awq" else "gptq") if family == "w4a8" else family
    if layout in ("gptq", "awq", "ct"):
        return _int_linear(ckpt, layout, p, E, n_out, n_in, bits, gen, device, model_dtype)
    if family == "dense":
        w = _randn(gen, device, E, n_out, n_in) / n_in**0.5
        return {f"{p}_weight": w.to(torch.bfloat16 if ckpt.scheme == "bf16" else torch.float16)}
    if family == "int8":
        w = torch.randint(-128, 128, (E, n_out, n_in), generator=gen, device=device,
                          dtype=torch.int8)
        code_std = 73.9
    else:  # fp8 / mxfp8 elements: unit normal values rounded by torch's e4m3 cast
        w = _randn(gen, device, E, n_out, n_in).to(torch.float8_e4m3fn)
        code_std = 1.0
    if family == "mxfp8":
        center = 127 - round(0.5 * math.log2(n_in))  # scales about 1/sqrt(in)
        scale = torch.randint(center - 1, center + 2, (E, n_out, n_in // MX_BLOCK),
                              generator=gen, device=device, dtype=torch.int32).to(torch.uint8)
        return {f"{p}_weight": w, f"{p}_weight_scale": scale}
    if ckpt.weight_strategy == STRATEGY_CHANNEL:
        shape = (E, n_out, 1)
    elif ckpt.weight_strategy == STRATEGY_BLOCK:
        shape = (E, -(-n_out // FP8_BLOCK), -(-n_in // FP8_BLOCK))
    else:
        shape = (E, 2) if p == "w13" and n_out % 2 == 0 else (E,)
    scale = (0.5 + _rand(gen, device, *shape)) / (code_std * n_in**0.5)
    return {f"{p}_weight": w, f"{p}_weight_scale": scale}


def _int_linear(ckpt, layout, p, E, n_out, n_in, bits, gen, device, model_dtype):
    per, G = 32 // bits, 1 if ckpt.group_size == -1 else n_in // ckpt.group_size
    rec = ckpt.record
    scale_dtype = model_dtype if rec.scale_dtype == "model" else torch.float16
    scales = _group_scales(gen, device, (E, G, n_out), bits, n_in, scale_dtype)
    if layout == "ct":
        out = {f"{p}_weight_packed": _words(gen, device, E, n_out, -(-n_in * bits // 32)),
               f"{p}_weight_scale": scales.transpose(1, 2).contiguous()}
        if not ckpt.sym:
            out[f"{p}_weight_zero_point"] = _words(gen, device, E, -(-n_out * bits // 32), G)
        if ckpt.act_order:
            out[f"{p}_weight_g_idx"] = _g_idx(gen, device, E, n_in, ckpt.group_size)
        return out
    if layout == "awq":
        out = {f"{p}_qweight": _words(gen, device, E, n_in, n_out // per),
               f"{p}_scales": scales}
        if not ckpt.sym:
            out[f"{p}_qzeros"] = _words(gen, device, E, G, n_out // per)
        return out
    v1 = rec.zero_domain == "unsigned-minus-one"
    if ckpt.sym:  # the symmetric zero 2^(b-1), stored minus one in v1
        qzeros = torch.full((E, G, n_out // per), _repeat_code((1 << (bits - 1)) - v1, bits),
                            dtype=torch.int32, device=device)
    else:
        qzeros = _words(gen, device, E, G, n_out // per)
        if v1:  # a stored 2^b - 1 would mean a true zero of 2^b: clear one bit of each field
            qzeros &= _repeat_code((1 << bits) - 2, bits)
    out = {f"{p}_qweight": _words(gen, device, E, n_in // per, n_out), f"{p}_scales": scales,
           f"{p}_qzeros": qzeros}
    if ckpt.act_order:
        out[f"{p}_g_idx"] = _g_idx(gen, device, E, n_in, ckpt.group_size)
    return out


def _g_idx(gen, device, E, n_in, group_size):
    g = n_in if group_size == -1 else group_size
    perm = torch.argsort(_rand(gen, device, E, n_in), dim=1)
    g_idx = torch.empty(E, n_in, dtype=torch.int32, device=device)
    g_idx.scatter_(1, perm, (torch.arange(n_in, device=device, dtype=torch.int32) // g)
                   .expand(E, -1).contiguous())
    return g_idx
