"""Checkpoint tensors -> the common kernel format, and back to the canonical form.

For p in (w13, w2), one linear [out, in] per expert (w13: out = problem.w13_rows, in = K;
w2: out = K, in = N):

  integer families (GPTQ, AWQ, compressed-tensors, W4A8, W4AFP8)
    {p}_q      uint8 [E, out, ceil(in/2)] (int4: column 2j in the low nibble of byte j,
               2j+1 in the high nibble) or [E, out, in] (int8); unsigned stored codes
               u = signed code + 2^(bits-1)
    {p}_zp     uint8 [E, out, G] unsigned true zero points, absent when symmetric
    {p}_s      float32 [E, out, G] group scales, exact copies of the file's values
    {p}_g_idx  int32 [E, in] (act order only)
    {p}_pre    float32 [E, in] the GEMM input's multiplier per column (ModelOpt AWQ's
               pre_quant_scale, exact: a bf16 / fp32 value), absent for other layouts:
               y_e = (x * pre[e]) @ W[e]^T
    meta["{p}_group_cols"] = g (in when group_size == -1), meta["bits"]
    W[e, o, k] = (u[e, o, k] - zp[e, o, gk]) * s[e, o, gk]
  16-bit      {p}_w bf16/fp16 [E, out, in]
  int8 / fp8  {p}_w int8 / float8_e4m3fn [E, out, in], {p}_s float32 [E, R, C],
              meta["{p}_block"] = (rows, cols): W[e, o, k] = w * s[e, o // rows, k // cols]
  mx float    {p}_w float8_e4m3fn [E, out, in], {p}_s uint8 E8M0 [E, out, in/32], block
              (1, 32): e4m3 codes as stored, or codes that straddle bytes (the element's
              `units` > 1, e.g. fp6's four in three bytes) widened once to e4m3 where every
              value of the element is an e4m3 value (`codecs.widen_to_e4m3`)
  mxfp4       {p}_w uint8 [E, out, in/2] (the file's bytes: e2m1 column 2j in the low nibble,
              2j+1 in the high nibble), {p}_s uint8 E8M0 [E, out, in/32], block (1, 32)
  nvfp4       {p}_w uint8 [E, out, in/2] e2m1 pairs (column 2j in the low nibble),
              {p}_s float8_e4m3fn [E, out, in/16], block (1, 16), {p}_gs float64 [E, G] the
              global multipliers (G = 2 for w13 shards: rows o < out/2 take column 0, else 1;
              a compressed-tensors global scale is stored as its reciprocal and inverted here)
              W[e, o, k] = e2m1(w) * s[e, o, k // 16] * gs[e, o // (out / G)]
  a13_scale / a2_scale float32 [1]: max over experts of the static input scales (NVFP4: the
              GEMM's multiplier alpha, shards included)
  a13_global / a2_global float32 [1]: NVFP4 only, the activation quantizer's global scale g;
              both read by the format record's global_scale convention (ModelOpt input_scale
              s: g = fp32(1 / max s), alpha = max s; compressed-tensors input_global_scale
              g: g = min g, alpha = 1 / g)
  w13_bias float32 [E, w13_rows], w2_bias float32 [E, K]

Every check that can fail runs before the layer is modified, so a rejected checkpoint leaves
the layer as loaded. Unpacking runs over chunks of experts: a DeepSeek-V3-sized layer unpacked
at once to int32 would need tens of GiB.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
from moecert.reference.schemes import (
    ACT_NVFP4,
    STATIC_INPUT_MODES,
    STRATEGY_BLOCK,
    STRATEGY_CHANNEL,
    scheme_format,
    weight_scale_block,
)
from moecert.reference.schemes.elements import Element
from moecert.reference.schemes.tensors import (
    in_major,
    input_scale_name,
    role_names,
    tensor_name,
)

from .codecs import (  # re-exported: convert.py held the codecs until issue 35
    CHUNK_ELEMENTS,
    decode_e2m1,
    decode_e4m3,
    decode_e8m0,
    element_values,
    pack_nibbles,
    pow2,
    undo_interleave,
    unpack_nibbles,
    unpack_words,
    widen_to_e4m3,
)
from .errors import BackendError
from .layer import PREFIXES, MoELayer, group_cols, linear_dims
from .protocol import ExportedLinear

# --- entry points ---------------------------------------------------------------------------

def convert_to_kernel_format(layer: MoELayer) -> None:
    """Replace `layer`'s checkpoint tensors by the common kernel format, in place."""
    converter = CONVERTERS[layer.quant.layout]
    converted: dict[str, torch.Tensor] = {}
    meta: dict = {}
    for p in PREFIXES:
        tensors, linear_meta = converter.convert(layer, p)
        converted.update(tensors)
        meta.update(linear_meta)
    converted.update(_convert_input_scales(layer))
    converted.update(_convert_biases(layer))
    # all checks passed: swap the checkpoint tensors for the kernel format
    layer.clear()
    for name, t in converted.items():
        layer.put(name, t)
    layer.meta.update(meta)


def export_canonical(layer: MoELayer, stored: dict[str, torch.Tensor] | None = None
                     ) -> dict[str, ExportedLinear]:
    """The processed layer's weights read back out of the common kernel format; `stored`
    names buffers in that format that a backend keeps in a layout of its own (the Triton
    backend's tiled int4 codes, untiled)."""
    def get(name):
        return stored[name] if stored and name in stored else layer.get(name)

    export = CONVERTERS[layer.quant.layout].export
    return {p: export(layer, p, get) for p in PREFIXES}


# --- integer families -----------------------------------------------------------------------

def _expert_chunks(E: int, per_expert: int):
    step = max(1, CHUNK_ELEMENTS // max(per_expert, 1))
    for lo in range(0, E, step):
        yield lo, min(E, lo + step)


def _convert_int_linear(layer: MoELayer, p: str) -> tuple[dict[str, torch.Tensor], dict]:
    """Integer codes of any packed layout -> {p}_q / {p}_s / {p}_zp / {p}_g_idx, read by
    the format record's fields (packing, pack_dim, interleave, code offset, zero domain) and
    the declared tensors' order (`in_major`)."""
    q = layer.quant
    rec = q.record
    E = layer.problem.E
    n_out, n_in = linear_dims(layer, p)
    bits = q.bits
    half = 1 << (bits - 1)  # the kernel format's unsigned codes: signed code + 2^(b-1)
    G = q.groups(n_in)
    names = role_names(q, p)  # {role: tensor name} of the layout (schemes.tensors)
    if "shape" in names:
        _check_weight_shape(layer, names["shape"], n_out, n_in)

    words = layer.get(names["weight"])
    in_major_weight = in_major(q, p, "weight")  # the declared shape's order (schemes.tensors)
    if rec.packing is None:  # one signed code per storage unit: every value must be a code
        if words.numel() and (int(words.min()) < -half or int(words.max()) >= half):
            raise BackendError(names["weight"], f"int{bits} codes in [{-half}, {half - 1}]",
                               f"values in [{int(words.min())}, {int(words.max())}]")
    codes = torch.empty(E, n_out, -(-n_in // 2) if bits == 4 else n_in, dtype=torch.uint8,
                        device=layer.device)
    for lo, hi in _expert_chunks(E, n_out * n_in):
        if rec.packing is None:  # [E, out, in] signed codes
            u = words[lo:hi].to(torch.int32) + half - rec.code_offset
        elif in_major_weight and rec.pack_dim == "in":  # [E, in/per, out] (GPTQ)
            u = unpack_words(words[lo:hi], bits, n_in, dim=1).transpose(1, 2)
        elif rec.packing == "bytes":  # [E, out/2, in] two codes a byte along out (ModelOpt)
            pair = words[lo:hi]
            u = torch.stack((pair & 0xF, pair >> 4), dim=2).to(torch.int32).flatten(1, 2)
        elif rec.pack_dim == "out":  # [E, in, out/8] packed along out (AWQ, Quark)
            u = unpack_words(words[lo:hi], bits, n_out, dim=2)
            if rec.interleave:
                u = undo_interleave(u, rec.interleave, 2)
            u = u.transpose(1, 2)
        else:  # [E, out, words] packed along in
            u = unpack_words(words[lo:hi], bits, n_in, dim=2)
        if rec.twos_complement and rec.packing is not None:  # two's complement fields
            u = u ^ half
        codes[lo:hi] = pack_nibbles(u) if bits == 4 else u.to(torch.uint8)

    scales = layer.get(names["scale"])
    if in_major(q, p, "scale"):  # [E, G, out] (GPTQ, AWQ)
        scales = scales.transpose(1, 2)
    scales = scales.to(torch.float32).contiguous()
    check_scales(names["scale"], scales, rec.scale_sign)

    out = {f"{p}_q": codes, f"{p}_s": scales}
    meta = {f"{p}_group_cols": group_cols(layer, p), "bits": bits}
    zeros = _read_zero_points(layer, p, names["zeros"], n_out, G) if "zeros" in names else None
    if zeros is not None:
        out[f"{p}_zp"] = zeros
    if "g_idx" in names:
        g_idx = _read_g_idx(layer, names["g_idx"], n_in, G)
        if g_idx is not None:
            out[f"{p}_g_idx"] = g_idx
    if "pre_quant_scale" in names:  # the GEMM input's multiplier per column (ModelOpt AWQ)
        pre = layer.get(names["pre_quant_scale"]).to(torch.float32).contiguous()
        check_scales(names["pre_quant_scale"], pre)
        out[f"{p}_pre"] = pre
    return out, meta


def _read_zero_points(layer: MoELayer, p: str, name: str, n_out: int, G: int
                      ) -> torch.Tensor | None:
    """uint8 [E, out, G] unsigned true zero points, or None for a symmetric checkpoint (whose
    zero points, when present anyway, must all be the symmetric zero 2^(bits-1))."""
    q = layer.quant
    if not layer.has(name):
        if not q.sym:
            raise BackendError(name, f"zero points for {q.describe()}", "missing")
        return None
    bits = q.bits
    rec = q.record
    t = layer.get(name)
    if not in_major(q, p, "zeros"):
        # [E, ceil(out*b/32), G] packed along out, unsigned domain (compressed-tensors)
        z = unpack_words(t, bits, n_out, dim=1)
    else:  # [E, G, out*b/32] packed along out (GPTQ, AWQ)
        z = unpack_words(t, bits, n_out, dim=2)
        if rec.interleave:
            z = undo_interleave(z, rec.interleave, 2)
        z = z.transpose(1, 2)
    if rec.twos_complement:  # two's complement fields -> offset (unsigned) zero points
        z = z ^ (1 << (bits - 1))
    if rec.stored_zero_offset:
        # GPTQ v1 stores z - 1; a stored 2^b - 1 would mean z = 2^b, which no code can reach
        top = (1 << bits) - 1 + rec.stored_zero_offset
        if z.numel() and int(z.max()) > top:
            raise BackendError(name, f"stored zero points <= {top} (GPTQ v1 "
                               f"stores z - 1, the true zero is stored + 1)",
                               f"a stored {(1 << bits) - 1}, true zero {1 << bits} overflows "
                               f"int{bits}")
        z = z - rec.stored_zero_offset
    if q.sym:
        half = 1 << (bits - 1)
        if z.numel() and bool((z != half).any()):
            raise BackendError(name, f"the symmetric zero {half} everywhere (sym checkpoint)",
                               f"true zero points in [{int(z.min())}, {int(z.max())}]")
        return None
    return z.to(torch.uint8).contiguous()


def _read_g_idx(layer: MoELayer, name: str, n_in: int, G: int) -> torch.Tensor | None:
    """int32 [E, in] for act order; a g_idx in a checkpoint without act order must be the
    trivial k // g map (else the attributes and tensors disagree) and is dropped."""
    q = layer.quant
    if not layer.has(name):
        if q.act_order:
            raise BackendError(name, "a group index per input column (act order)", "missing")
        return None
    g_idx = layer.get(name)
    if g_idx.numel() and (int(g_idx.min()) < 0 or int(g_idx.max()) >= G):
        raise BackendError(name, f"group indices in [0, {G - 1}]",
                           f"[{int(g_idx.min())}, {int(g_idx.max())}]")
    if not q.act_order:
        trivial = torch.arange(n_in, device=g_idx.device) // (n_in // G)
        if not torch.equal(g_idx.to(torch.int64), trivial.expand_as(g_idx)):
            raise BackendError(name, "k // group_size (act_order is False)",
                               "a permuted group map")
        return None
    return g_idx.to(torch.int32).contiguous()


def _check_weight_shape(layer: MoELayer, name: str, n_out: int, n_in: int) -> None:
    if not layer.has(name):
        return
    shape = layer.get(name)
    if bool((shape[:, 0] != n_out).any()) or bool((shape[:, 1] != n_in).any()):
        raise BackendError(name, f"({n_out}, {n_in}) for every expert",
                           str(shape.unique(dim=0).tolist()))


def check_scales(name: str, s: torch.Tensor, sign: str = "positive") -> None:
    """Finite non-zero scales, > 0 unless `sign` (the format record's `scale_sign`) is
    "any"."""
    signed = sign == "any"
    bad = ~torch.isfinite(s) | ((s == 0) if signed else (s <= 0))
    if bool(bad.any()):
        raise BackendError(name, "finite non-zero scales" if signed else "finite scales > 0",
                           f"{int(bad.sum())} bad entries")


def _export_int(layer: MoELayer, p: str, get) -> ExportedLinear:
    n_in = linear_dims(layer, p)[1]
    bits = layer.meta["bits"]
    half = 1 << (bits - 1)
    q = get(f"{p}_q")
    u = unpack_nibbles(q, n_in) if bits == 4 else q
    zeros = None
    if layer.has(f"{p}_zp"):
        zeros = layer.get(f"{p}_zp").to(torch.int32) - half
    g_idx = layer.get(f"{p}_g_idx").to(torch.int64) if layer.has(f"{p}_g_idx") else None
    return ExportedLinear(codes=u.to(torch.int32) - half,
                          scales=layer.get(f"{p}_s").to(torch.float64),
                          block=(1, layer.meta[f"{p}_group_cols"]), zeros=zeros, g_idx=g_idx)


# --- unpacked families: 16-bit, int8, fp8, mxfp8, mxfp4 (bytes kept as stored) -------------

def _convert_dense_linear(layer: MoELayer, p: str):
    q = layer.quant
    info = q.info
    E = layer.problem.E
    n_out, n_in = linear_dims(layer, p)
    wname = tensor_name(q, p, "weight")
    w = layer.get(wname)
    if not info.quantized:
        if _count_over_experts(w, lambda part: ~torch.isfinite(part)):
            raise BackendError(wname, "finite weights", "non-finite entries")
        return {f"{p}_w": w}, {}
    _check_codes(wname, w, info.weight_element)
    if info.weight_element.units > 1:  # codes straddle bytes (fp6): widened, read as bytes
        w = widen_to_e4m3(w, info.weight_element)
    name = tensor_name(q, p, "scale")
    s = layer.get(name)
    if info.scale_element is not None:  # coded block scales, one per scale_block along in
        tensors = {f"{p}_w": w, f"{p}_s": s}
        if info.global_scale == "none":  # E8M0: no NaN code
            _check_codes(name, s, info.scale_element)
        else:  # e4m3 under a global scale (NVFP4): positive numbers
            _check_positive_codes(name, s, info.scale_element)
            tensors[f"{p}_gs"] = _global_multipliers(layer, p)
        return tensors, {f"{p}_block": weight_scale_block(q, p, n_out, n_in)}
    if q.weight_strategy == STRATEGY_CHANNEL:
        scales, block = s.view(E, n_out, 1), weight_scale_block(q, p, n_out, n_in)
    elif q.weight_strategy == STRATEGY_BLOCK:
        scales, block = s, weight_scale_block(q, p, n_out, n_in)
    elif s.dim() == 2:  # per-tensor w1 / w3 shard scales [E, 2]
        if n_out % 2:
            raise BackendError(name, "an even w13 row count for w1/w3 shard scales",
                               f"{n_out} rows")
        scales, block = s.view(E, 2, 1), weight_scale_block(q, p, n_out, n_in, shards=2)
    else:
        scales, block = s.view(E, 1, 1), weight_scale_block(q, p, n_out, n_in, shards=1)
    scales = scales.to(torch.float32).contiguous()
    check_scales(name, scales)
    return {f"{p}_w": w, f"{p}_s": scales}, {f"{p}_block": block}


def _check_positive_codes(name: str, s: torch.Tensor, el: Element) -> None:
    """Block scales that must be positive numbers: no sign bit, no NaN code, no zero."""
    def bad(part):
        bits = part.view(torch.uint8).to(torch.int32)
        found = ((bits & el.sign_bit) != 0) | ((bits & (el.sign_bit - 1)) == 0)
        for nan in el.nan_codes:
            found |= bits == nan
        return found

    found = _count_over_experts(s, bad)
    if found:
        raise BackendError(name, f"finite {el.name} block scales > 0", f"{found} bad entries")


def _global_multipliers(layer: MoELayer, p: str) -> torch.Tensor:
    """float64 [E, 1 or 2]: the global scale of each expert (of each w1 / w3 shard), as the
    multiplier the format record's convention makes of the stored value."""
    q = layer.quant
    n_out = linear_dims(layer, p)[0]
    gname = tensor_name(q, p, "global_scale")
    g = layer.get(gname).to(torch.float64)
    check_scales(gname, g)
    if g.dim() == 2 and n_out % 2:
        raise BackendError(gname, "an even w13 row count for w1/w3 shard scales",
                           f"{n_out} rows")
    g = g.view(g.shape[0], -1)
    if scheme_format(q).global_scale == "divide":  # compressed-tensors stores the reciprocal
        g = 1.0 / g
    return g.contiguous()


def _check_codes(name: str, t: torch.Tensor, el: Element) -> None:
    """No stored element of `t` is one of the element record's NaN codes."""
    if not el.nan_codes:
        return
    def nan(part):
        codes = part.view(torch.uint8) if part.element_size() == 1 else part
        found = torch.zeros_like(codes, dtype=torch.bool)
        for c in el.nan_codes:
            found |= codes == c
        return found

    found = _count_over_experts(t, nan)
    if found:
        listed = ", ".join(f"0x{c:02X}" for c in el.nan_codes)
        raise BackendError(name, f"{el.name} codes other than its NaN codes ({listed})",
                           f"{found} NaN codes")


def _count_over_experts(t: torch.Tensor, flags) -> int:
    """How many entries of `t` [E, ...] `flags(part)` marks, over views of whole experts of
    about CHUNK_ELEMENTS each: a check over a whole layer at once holds bool temporaries of
    its size (measured, issue 43: two of them, 14 GiB for a DeepSeek-V3 fp8 w13, beside the
    layer on its GPU). Whether any is marked is found on the tensor's device and read once;
    they are counted (a second pass) only then: a count summed the flags as an int64 copy,
    16 bytes of memory traffic per element of every layer a backend loads, for the error
    message of a layer that is almost never malformed."""
    if t.dim() == 0:
        return int(flags(t).sum())
    chunks = list(_expert_chunks(t.shape[0], t[0].numel() if t.shape[0] else 1))
    found = torch.zeros((), dtype=torch.bool, device=t.device)
    for lo, hi in chunks:
        found |= flags(t[lo:hi]).any()
    if not bool(found):
        return 0
    count = torch.zeros((), dtype=torch.int64, device=t.device)
    for lo, hi in chunks:
        count += flags(t[lo:hi]).sum()
    return int(count)


def _export_dense(layer: MoELayer, p: str, get=None) -> ExportedLinear:
    info = layer.quant.info
    w = (get or layer.get)(f"{p}_w")
    E, n_out, n_in = w.shape[0], *linear_dims(layer, p)
    if not info.quantized:
        return ExportedLinear(codes=w.to(torch.float64),
                              scales=torch.ones(E, 1, 1, dtype=torch.float64, device=w.device),
                              block=(n_out, n_in))
    codes = element_values(info.element, w, torch.float64)
    s = (get or layer.get)(f"{p}_s")
    scales = (element_values(info.scale_encoding, s, torch.float64)
              if info.scale_element is not None else s.to(torch.float64))
    block = tuple(layer.meta[f"{p}_block"])
    if layer.has(f"{p}_gs"):  # NVFP4: e2m1 pairs, global multipliers per shard
        gs = layer.get(f"{p}_gs")
        return ExportedLinear(codes=codes, scales=scales, block=block,
                              global_scale=gs.repeat_interleave(n_out // gs.shape[1], dim=1))
    return ExportedLinear(codes=codes, scales=scales, block=block)


# --- activation scales and biases -----------------------------------------------------------

def _convert_input_scales(layer: MoELayer) -> dict[str, torch.Tensor]:
    q = layer.quant
    if q.activation not in STATIC_INPUT_MODES:
        return {}
    nvfp4 = q.activation == ACT_NVFP4
    out = {}
    for p, a in (("w13", "a13"), ("w2", "a2")):
        name = input_scale_name(q, p)
        s = layer.get(name).to(torch.float32)
        check_scales(name, s)
        # engines collapse per-expert (and per-shard) static scales to one at load time
        if nvfp4 and scheme_format(q).global_scale == "divide":
            # compressed-tensors input_global_scale g: the quantizer takes min g as stored,
            # the GEMM multiplies by its reciprocal (vLLM's compressed-tensors NVFP4 MoE)
            g = s.min().reshape(1)
            out[f"{a}_global"], out[f"{a}_scale"] = g, 1.0 / g
        elif nvfp4:
            # ModelOpt input_scale s: the GEMM multiplies by max s, the quantizer takes the
            # float32 reciprocal (vLLM's ModelOpt NVFP4 MoE: (1 / input_scale).to(float32))
            top = s.max().reshape(1)
            out[f"{a}_global"], out[f"{a}_scale"] = 1.0 / top, top
        else:
            out[f"{a}_scale"] = s.max().reshape(1)
    return out


def _convert_biases(layer: MoELayer) -> dict[str, torch.Tensor]:
    out = {}
    for name in ("w13_bias", "w2_bias"):
        if layer.has(name):
            out[name] = layer.get(name).to(torch.float32).contiguous()  # finite: base.py
    return out


class LinearConverter(NamedTuple):
    """One layout's way into the common kernel format and back out of it."""

    convert: Callable[[MoELayer, str], tuple[dict[str, torch.Tensor], dict]]
    export: Callable[..., ExportedLinear]


_PACKED = LinearConverter(_convert_int_linear, _export_int)
# One converter per tensor layout (`schemes.LAYOUTS`, the reference's `layouts/` readers):
# the packed integer layouts differ only in what their format records say, which the one
# integer converter reads; "dense" covers every unpacked weight (16-bit, int8, fp8, MX and
# NVFP4's global scales, by the scheme's scale encoding and global_scale).
CONVERTERS: dict[str, LinearConverter] = {
    "gptq": _PACKED, "awq": _PACKED, "ct": _PACKED, "ct-int": _PACKED, "quark-int": _PACKED,
    "modelopt-int": _PACKED,
    "dense": LinearConverter(_convert_dense_linear, _export_dense),
}


__all__ = ["CONVERTERS", "LinearConverter", "convert_to_kernel_format", "decode_e2m1",
           "decode_e4m3", "decode_e8m0", "element_values", "export_canonical", "group_cols",
           "linear_dims", "pack_nibbles", "pow2", "unpack_nibbles", "unpack_words"]
