"""`random_checkpoint`: valid checkpoint tensors drawn directly in the storage layout.

`synthesize` quantizes float weights with the producing tool's rule, which takes seconds per
expert at DeepSeek-V3 sizes on a CPU. Checking a kernel's arithmetic at model sizes needs only
valid tensors of the right statistics: random codes (uniform over the code range, zero points
and GPTQ v1 offsets respected), random scales with weights of standard deviation about
1/sqrt(in), random biases, drawn on any device in a fraction of a second.

Which tensors, with which names, shapes and dtypes, is the scheme table's declaration
(`schemes.tensors`); this module only knows how to draw each role.
"""

from __future__ import annotations

import math
from dataclasses import replace

import torch

from .checkpoint import Checkpoint, checked_variant
from .layouts.common import scale_dtype
from .problem import MoEProblem
from .quantize import NVFP4_RANGE
from .schemes import ACT_ELEMENT_MAX, Variant
from .schemes.tensors import INT32, declared_tensors, layer_sizes, tensor_shapes

# NVFP4 block scales drawn about this e4m3 value; the global scale brings the product to the
# weights' 1/sqrt(in)
_E4M3_BLOCK_SCALE = 256.0


def random_checkpoint(variant: Variant | str, problem: MoEProblem, seed: int = 0,
                      device="cpu", **attrs) -> Checkpoint:
    ckpt = Checkpoint(checked_variant(variant, **attrs), {})
    draw = _Draw(ckpt, problem, torch.Generator(device=device).manual_seed(seed), device)
    sizes = layer_sizes(problem)
    tensors: dict[str, torch.Tensor] = {}
    for name, d in declared_tensors(ckpt).items():
        if d.required(ckpt.sym, ckpt.act_order, problem.bias) or (
                d.written_when_sym and ckpt.sym):
            shape = _pick_shape(tensor_shapes(d, sizes, ckpt), sizes if d.linear == "w13"
                                else None)
            tensors[name] = getattr(draw, d.role)(d, shape)
    return replace(ckpt, tensors=tensors)


def _pick_shape(shapes, w13_sizes):
    """The most detailed declared shape (per-shard w13 scales [E, 2] over one scale [E]); the
    shard form needs an even w13 row count."""
    for shape in reversed(shapes):
        if not (w13_sizes and shape[1:] == (2,) and w13_sizes["R"] % 2):
            return shape
    return shapes[0]


class _Draw:
    """One method per tensor role: (declaration, shape) -> a random valid tensor."""

    def __init__(self, ckpt: Checkpoint, problem: MoEProblem, gen, device):
        self.ckpt, self.P, self.gen, self.device = ckpt, problem, gen, device
        self.info = ckpt.info

    def _rand(self, *shape):
        return torch.rand(*shape, generator=self.gen, device=self.device)

    def _randn(self, *shape):
        return torch.randn(*shape, generator=self.gen, device=self.device)

    def _words(self, shape):
        return torch.randint(-2**31, 2**31 - 1, shape, generator=self.gen, device=self.device,
                             dtype=torch.int32)

    def _n_in(self, d) -> int:
        return self.P.K if d.linear == "w13" else self.P.N

    def weight(self, d, shape):
        if d.dtypes == INT32:  # packed integer codes: every bit pattern is valid
            return self._words(shape)
        dtype = d.dtypes[0]
        if dtype == torch.uint8:  # e2m1 pairs: every byte is two valid codes
            return torch.randint(0, 256, shape, generator=self.gen, device=self.device,
                                 dtype=torch.uint8)
        if dtype == torch.int8:  # int8 codes, or int4 codes one per int8 (W4AFP8)
            half = 1 << (self.info.weight_bits - 1)
            return torch.randint(-half, half, shape, generator=self.gen, device=self.device,
                                 dtype=torch.int8)
        if dtype == torch.float8_e4m3fn:  # unit normal values rounded by torch's e4m3 cast
            return self._per_expert(shape, dtype, lambda e: self._randn(*shape[1:]))
        scale = self._n_in(d)**0.5
        return self._per_expert(shape, dtype, lambda e: self._randn(*shape[1:]) / scale)

    def _per_expert(self, shape, dtype, draw):
        """[E, ...] in `dtype`, drawn in float32 one expert at a time: a whole DeepSeek-V3
        w13 in float32 is 28 GiB (measured: the bench's fp8 layer ran out of memory on it)."""
        out = torch.empty(shape, dtype=dtype, device=self.device)
        for e in range(shape[0]):
            out[e] = draw(e).to(dtype)
        return out

    def scale(self, d, shape):
        n_in = self._n_in(d)
        if d.dtypes == (torch.uint8,):  # E8M0 exponents: weights about 1/sqrt(in)
            center = 127 - round(math.log2(self.info.weight_element.draw_std * n_in**0.5))
            return torch.randint(center - 1, center + 2, shape, generator=self.gen,
                                 device=self.device, dtype=torch.int32).to(torch.uint8)
        if d.dtypes == (torch.float8_e4m3fn,):  # NVFP4 block scales, > 0
            return ((0.5 + self._rand(*shape)) * _E4M3_BLOCK_SCALE).to(torch.float8_e4m3fn)
        s = (0.5 + self._rand(*shape)) / (self.info.weight_element.draw_std * n_in**0.5)
        if self.info.packed:  # group scales in the dtype the producing tool writes
            return s.to(scale_dtype(self.ckpt.record.scale_dtype, self.P.torch_dtype))
        return s

    def zeros(self, d, shape):
        rec, bits = self.ckpt.record, self.info.weight_bits
        v1 = -rec.stored_zero_offset  # 1: GPTQ v1 stores z - 1
        if self.ckpt.sym:  # the symmetric zero 2^(b-1) (stored minus one in v1; a two's
            # complement field holds it as 0)
            stored = 0 if rec.twos_complement else rec.code_offset - v1
            return torch.full(shape, _repeat_code(stored, bits),
                              dtype=torch.int32, device=self.device)
        z = self._words(shape)
        if v1:  # a stored 2^b - 1 would mean a true zero of 2^b: clear one bit of each field
            z &= _repeat_code((1 << bits) - 2, bits)
        return z

    def g_idx(self, d, shape):
        E, n_in = shape
        g = n_in if self.ckpt.group_size == -1 else self.ckpt.group_size
        perm = torch.argsort(self._rand(E, n_in), dim=1)
        g_idx = torch.empty(E, n_in, dtype=torch.int32, device=self.device)
        g_idx.scatter_(1, perm, (torch.arange(n_in, device=self.device, dtype=torch.int32) // g)
                       .expand(E, -1).contiguous())
        return g_idx

    def global_scale(self, d, shape):  # block scale * global ~ 1 / (code std * sqrt(in))
        g = (0.5 + self._rand(*shape)) / (_E4M3_BLOCK_SCALE * self.info.weight_element.draw_std
                                          * self._n_in(d)**0.5)
        return self._stored(g)

    def input_scale(self, d, shape):  # about amax / (127 or 448, or 448 * 6 for NVFP4)
        amax = 3 + 2 * self._rand(*shape)
        if self.info.global_scale == "none":
            return amax / ACT_ELEMENT_MAX[self.info.activation_element]
        return self._stored(amax / NVFP4_RANGE)

    def _stored(self, multiplier):
        """A global scale as the format stores it: the multiplier or its reciprocal."""
        return multiplier if self.ckpt.record.global_scale == "multiply" else 1 / multiplier

    def pre_quant_scale(self, d, shape):  # AWQ smoothing factors: positive, around 1
        return torch.exp2(2 * self._rand(*shape) - 1).to(d.dtypes[0])

    def bias(self, d, shape):
        return (0.1 * self._randn(*shape)).to(self.P.torch_dtype)


def _repeat_code(code: int, bits: int) -> int:
    """An int32 word holding `code` in every field."""
    word = 0
    for i in range(32 // bits):
        word |= code << (i * bits)
    return word - (1 << 32) if word >= 1 << 31 else word
