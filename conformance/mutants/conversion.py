"""Mutants of the torch backend's weight conversion: the layer's kernel-format buffers come
out wrong, the forward pass is the correct one. Each runs the correct conversion and then
corrupts one buffer the way the named engine bug does (the corruption is the bug; the rest
of the conversion is unchanged). `canonical_weights` reads the corrupted buffers back, as a
real backend's export would.
"""

from __future__ import annotations

import torch
from moecert.kernels.native import TorchBackend
from moecert.reference.schemes import E8M0_NAN
from moecert.reference.schemes.elements import ELEMENTS
from moecert.reference.schemes.tensors import tensor_name


def _put_if(layer, name: str, fn) -> None:
    if layer.has(name):
        layer.put(name, fn(layer.get(name)).contiguous())


def swap_halves(t: torch.Tensor, dim: int = 1) -> torch.Tensor:
    """[first; second] -> [second; first] along `dim` (an even length)."""
    first, second = t.chunk(2, dim)
    return torch.cat((second, first), dim)


def w13_row_buffers(layer) -> dict[str, int] | None:
    """Buffers of w13 whose dim 1 runs over w13's rows, with the rows each entry covers; None
    when the rows cannot be split into gate and up halves in every buffer (a non-gated
    activation, or a scale block straddling the halves)."""
    P = layer.problem
    if not P.gated:
        return None
    rows = {name: 1 for name in ("w13_w", "w13_q", "w13_zp", "w13_bias") if layer.has(name)}
    if layer.has("w13_s"):
        per = layer.meta.get("w13_block", (1,))[0]  # integer families: one scale per row
        if layer.get("w13_s").shape[1] == 1:
            per = None  # one scale for both halves: nothing to swap
        elif P.N % per:
            return None
        if per is not None:
            rows["w13_s"] = per
    return rows


def swap_w13_halves(layer) -> bool:
    """gate <-> up in every w13 buffer of a processed layer; False (layer unchanged) when
    `w13_row_buffers` says the halves cannot be swapped."""
    buffers = w13_row_buffers(layer)
    if buffers is None:
        return False
    for name in buffers:
        _put_if(layer, name, swap_halves)
    return True


class AwqOrderKept(TorchBackend):
    """AWQ words unpacked least significant nibble first without undoing AWQ's pack order
    (0, 2, 4, 6, 1, 3, 5, 7): output columns permuted in groups of 8, codes and zeros."""

    name = "mutant-awq-order"

    def convert(self, layer):
        super().convert(layer)
        order = layer.quant.record.interleave  # only AWQ's words interleave (0, 2, 4, 6, ...)
        if not order:
            return
        order = list(order)
        for name in ("w13_q", "w13_zp", "w2_q", "w2_zp"):
            _put_if(layer, name, lambda t: t.unflatten(1, (-1, 8))[:, :, order].flatten(1, 2))


class GptqV1ZeroOffsetMissing(TorchBackend):
    """GPTQ v1 zeros read as v2 (vLLM #26343 inverted): the stored z - 1 taken as the true
    zero, asymmetric zeros one low and the symmetric zero 7 instead of 8."""

    name = "mutant-gptq-v1-zero"

    def convert(self, layer):
        q = layer.quant
        super().convert(layer)
        if not q.record.stored_zero_offset:  # only GPTQ v1 stores z - 1
            return
        for p in ("w13", "w2"):
            if layer.has(f"{p}_zp"):
                layer.put(f"{p}_zp", layer.get(f"{p}_zp") - 1)
            else:
                s = layer.get(f"{p}_s")
                layer.put(f"{p}_zp", torch.full(s.shape, (1 << (q.bits - 1)) - 1,
                                                 dtype=torch.uint8, device=s.device))


class Int4CodesAsUint4b8(TorchBackend):
    """W4AFP8 int4 codes stored signed in int8 (compressed-tensors int-quantized) read as if
    they were pack-quantized's unsigned uint4b8 nibbles (stored u means u - 8): every code
    moves by 8 modulo 16 (vLLM's W4A8-FP8 MoE takes pack-quantized weights and converts
    uint4b8 to signed int4 at load; a loader that feeds it the int-quantized file as is)."""

    name = "mutant-w4afp8-codes-as-uint4b8"

    def convert(self, layer):
        super().convert(layer)
        q = layer.quant
        if not (q.packed and q.record.packing is None):  # int codes one per int8 (W4AFP8)
            return
        for p in ("w13", "w2"):  # the kernel format's nibbles u = code + 8: u - 8 mod 16
            _put_if(layer, f"{p}_q", lambda q: q ^ 0x88)


class ZeroPointsIgnored(TorchBackend):
    """Asymmetric weights run by a path without zero points (the symmetric zero 2^(b-1)),
    like a kernel that accepts the zp tensor and never reads it."""

    name = "mutant-zero-points-ignored"

    def convert(self, layer):
        super().convert(layer)
        layer.drop("w13_zp", "w2_zp")


class ActOrderIgnored(TorchBackend):
    """Act-order g_idx dropped: columns take group k // g instead of g_idx[k]."""

    name = "mutant-act-order-ignored"

    def convert(self, layer):
        super().convert(layer)
        layer.drop("w13_g_idx", "w2_g_idx")


class ActOrderW2Ignored(TorchBackend):
    """Act-order handled for w13 but not for w2 (w2's g_idx, sharded along the other dim,
    lost on the way)."""

    name = "mutant-act-order-w2-ignored"

    def convert(self, layer):
        super().convert(layer)
        layer.drop("w2_g_idx")


class GroupScalesShifted(TorchBackend):
    """Group scales read one group late (the slice of a shard starts one group too far; the
    last group repeated): group i uses scale min(i + 1, G - 1)."""

    name = "mutant-group-shift"

    def convert(self, layer):
        super().convert(layer)
        if not layer.quant.packed:
            return
        for name in ("w13_s", "w2_s", "w13_zp", "w2_zp"):
            _put_if(layer, name, lambda t: torch.cat((t[:, :, 1:], t[:, :, -1:]), 2))


class W13ScalesSwapped(TorchBackend):
    """w1's scales loaded into w3's slot and w3's into w1's (shard id mixed up in the scale
    loader; the weights are right)."""

    name = "mutant-w13-scales-swapped"

    def convert(self, layer):
        super().convert(layer)
        if "w13_s" in (w13_row_buffers(layer) or {}):
            _put_if(layer, "w13_s", swap_halves)


class W13ShardScalesCollapsed(TorchBackend):
    """Per-tensor fp8 w13 with one scale per w1 / w3 shard ([E, 2]): both shards read with
    the larger scale, the weights left as they are (an engine that takes max(w1, w3 scale)
    for its single w13 scale must requantize the shard with the smaller one; skipping that
    scales it by the ratio)."""

    name = "mutant-w13-shard-scales-collapsed"

    def convert(self, layer):
        super().convert(layer)
        s = layer.get("w13_s") if layer.has("w13_s") else None
        if s is not None and s.dim() == 3 and s.shape[1:] == (2, 1):  # the shard scales
            layer.put("w13_s", s.amax(1, keepdim=True).expand_as(s).contiguous())


class GateUpSwapped(TorchBackend):
    """w13 written as [up; gate] (vLLM #42821 class: [w1; w3] placed into a [w3; w1] layout):
    the activation applies to the up projection."""

    name = "mutant-gate-up-swapped"

    def convert(self, layer):
        super().convert(layer)
        swap_w13_halves(layer)


class Int8WeightAsUint8b128(TorchBackend):
    """Signed int8 weights decoded as GPTQ's uint8b128 (byte - 128): the sign bit flipped."""

    name = "mutant-int8-weight-sign"

    def convert(self, layer):
        super().convert(layer)
        if layer.quant.info.element != "int8":  # int8 weight elements (w13_w: unpacked)
            return
        for name in ("w13_w", "w2_w"):
            _put_if(layer, name, lambda w: (w.view(torch.uint8).to(torch.int16) - 128
                                            ).to(torch.int8))


class Fp8BlockScalesTransposed(TorchBackend):
    """Block scales [E, R, C] stored column-major (DeepGEMM's TMA-aligned layout) and read as
    row-major: the scale of block (r, c) taken from the transposed position."""

    name = "mutant-fp8-block-scales-transposed"

    def convert(self, layer):
        super().convert(layer)
        if layer.quant.weight_strategy != "block" or layer.quant.info.element != "e4m3":
            return
        for name in ("w13_s", "w2_s"):
            _put_if(layer, name, lambda s: s.transpose(1, 2).contiguous().view(s.shape))


class ScalesScaled(TorchBackend):
    """Every weight scale 0.5% high (a scale computed from a clipped or padded amax, a
    fp16 -> fp32 conversion through a wrong constant): the systematic error that rounding
    never makes, caught by the norm ratio (tolerances.toml's band)."""

    name = "mutant-scales-x1.005"

    def convert(self, layer):
        super().convert(layer)
        for p in ("w13", "w2"):
            s = layer.get(f"{p}_s") if layer.has(f"{p}_s") else None
            if s is not None and s.is_floating_point():
                layer.put(f"{p}_s", s * 1.005)


# Marlin's scale permutations (vLLM marlin_utils.get_scale_perms): grouped scales go through
# SCALE_PERM (64 wide), per-channel ones through SCALE_PERM_SINGLE (32 wide).
SCALE_PERM = [i + 8 * j for i in range(8) for j in range(8)]
SCALE_PERM_SINGLE = [2 * i + j for i in range(4) for j in (0, 1, 8, 9, 16, 17, 24, 25)]


class W13ScalesPermutedAsChannelwise(TorchBackend):
    """vLLM's Marlin MoE permutes w13's scales with size_k = the intermediate size N where
    the hidden size K belongs: when N <= g < K it takes w13 for per-channel (one group) and
    applies SCALE_PERM_SINGLE, while the kernel undoes SCALE_PERM. Wrong only with N at or
    below the group size and at least two groups along K (measured on an H100 through vLLM
    0.33.0: rel_fro 0.21 to 0.51)."""

    name = "mutant-w13-scales-perm-n-for-k"

    def convert(self, layer):
        super().convert(layer)
        P, g = layer.problem, layer.quant.group_size
        if not layer.quant.packed or not (0 < g and P.N <= g < P.K):
            return
        s = layer.get("w13_s")  # [E, out, G]; Marlin holds [E, G, out] row-major
        E, out, G = s.shape
        flat = s.transpose(1, 2).reshape(E, G * out)
        if (G * out) % len(SCALE_PERM):
            return
        stored = flat.reshape(-1, len(SCALE_PERM_SINGLE))[:, SCALE_PERM_SINGLE]
        inverse = sorted(range(len(SCALE_PERM)), key=SCALE_PERM.__getitem__)
        read = stored.reshape(-1, len(SCALE_PERM))[:, inverse]  # what the kernel takes
        layer.put("w13_s", read.reshape(E, G, out).transpose(1, 2).contiguous())
class Nvfp4ShardGlobalScalesCollapsed(TorchBackend):
    """NVFP4: w13's two global scales (w1, w3) collapsed to the first, as a loader that keeps
    one scale_2 per expert does (vLLM's NVFP4 MoE takes w13_weight_scale_2[:, 0] and only
    warns when w1's and w3's differ): the up projection uses the gate's global scale."""

    name = "mutant-nvfp4-shard-global-collapsed"

    def convert(self, layer):
        super().convert(layer)
        _put_if(layer, "w13_gs", lambda g: g[:, :1].expand_as(g))


class CtGlobalScaleNotInverted(TorchBackend):
    """NVFP4 compressed-tensors: weight_global_scale read as a multiplier (ModelOpt's
    convention) where the file stores its reciprocal: every weight off by G^2."""

    name = "mutant-nvfp4-ct-global-not-inverted"

    def convert(self, layer):
        super().convert(layer)
        if layer.quant.record.global_scale == "divide":  # compressed-tensors' reciprocal
            for p in ("w13", "w2"):
                _put_if(layer, f"{p}_gs", lambda g: 1.0 / g)


class E8M0NanReadAsScale(TorchBackend):
    """E8M0 0xFF bytes (NaN, and the padding of swizzled scale tensors) not refused: decoded
    like any byte, 2^(255 - 127) = 2^128, which is inf in fp32."""

    name = "mutant-e8m0-0xff-as-scale"

    def convert(self, layer) -> None:
        nan = {}
        for p in ("w13", "w2"):  # hide the bytes from the check, then put them back
            name = tensor_name(layer.quant, p, "scale")
            if layer.has(name) and layer.get(name).dtype == torch.uint8:
                nan[p] = layer.get(name) == E8M0_NAN
                layer.put(name, torch.where(nan[p], 0, layer.get(name)).to(torch.uint8))
        super().convert(layer)
        for p, mask in nan.items():
            s = layer.get(f"{p}_s")
            layer.put(f"{p}_s", torch.where(mask, E8M0_NAN, s).to(torch.uint8).contiguous())


def _fp6_layer(layer):
    """The weight element of a layer whose codes straddle bytes (fp6: four in three), or
    None: the conversion widened its codes to e4m3 values (`convert._widen_to_e4m3`)."""
    el = layer.quant.info.weight_element
    return el if el.units > 1 else None


def _recode(w: torch.Tensor, el, other) -> torch.Tensor:
    """Widened values of `el`'s codes -> the values `other` gives the same codes (both
    elements' values are e4m3 values, so the result is exact in w's dtype)."""
    true = torch.tensor(el.values[: el.codes // 2], dtype=torch.float32, device=w.device)
    wrong = torch.tensor(other.values[: other.codes // 2], dtype=torch.float32,
                         device=w.device)
    v = w.to(torch.float32)
    code = (v.abs().unsqueeze(-1) == true).to(torch.int8).argmax(-1)  # magnitude code
    return torch.copysign(wrong[code], v).to(w.dtype)


class Fp6ElementSwapped(TorchBackend):
    """FP6 codes decoded with the other FP6 element's bit fields (E2M3 as E3M2 and back): the
    two share storage, packing and E8M0 scales, so an engine that picks the decoder from the
    wrong field of the config (the activation's dtype, a default) reads plausible numbers."""

    name = "mutant-fp6-element-swapped"

    def convert(self, layer) -> None:
        super().convert(layer)
        el = _fp6_layer(layer)
        other = el and next((o for o in ELEMENTS.values() if o is not el and o.kind == el.kind
                             and o.bits == el.bits and o.units == el.units), None)
        if other is not None:
            for p in ("w13", "w2"):
                _put_if(layer, f"{p}_w", lambda w: _recode(w, el, other))


def _reversed_groups(w: torch.Tensor, n: int) -> torch.Tensor:
    """Every group of `n` columns reversed (on the bytes: torch has no float8 flip)."""
    return w.view(torch.uint8).unflatten(-1, (-1, n)).flip(-1).flatten(-2).view(w.dtype)


class Fp6GroupReversed(TorchBackend):
    """FP6 codes read from the top of their 24-bit group: codes 4j..4j+3 come out as
    4j+3..4j (a packer that puts v0 in the high bits, as Quark's byte0 / byte2 names invite),
    so every group of four input columns is reversed."""

    name = "mutant-fp6-codes-reversed"

    def convert(self, layer) -> None:
        super().convert(layer)
        el = _fp6_layer(layer)
        if el is not None:
            for p in ("w13", "w2"):
                _put_if(layer, f"{p}_w", lambda w: _reversed_groups(w, el.per_unit))


class Fp4NibblesSwapped(TorchBackend):
    """FP4 bytes unpacked high nibble first: element 2j read from the high nibble (the
    opposite of OCP MX / gpt-oss storage), so every pair of input columns is swapped."""

    name = "mutant-fp4-nibbles-swapped"

    def convert(self, layer) -> None:
        super().convert(layer)
        if layer.quant.info.element == "e2m1":
            for p in ("w13", "w2"):
                _put_if(layer, f"{p}_w", lambda w: (w >> 4) | (w << 4))
