"""`XpuBackend`: vLLM's XPU WNA16 path (symmetric int4 GPTQ or compressed-tensors weights,
16-bit activations).

The vendor kernel (vllm_xpu_kernels' `xpu_fused_moe(..., is_int4=True)`) takes N-first weights:

    w13_xpu        uint8 [E, 2N, K/2]   two uint4b8 codes per byte, column 2j in the low nibble
    w13_xpu_scale        [E, 2N, K/g]   the file's scales (fp16 / bf16)
    w2_xpu         uint8 [E, K, N/2]
    w2_xpu_scale         [E, K, N/g]
    W[o, k] = (nibble(o, k) - 8) * scale[o, k // g]

GPTQ's qweight [E, K/8, 2N] int32 (8 codes per word along K, least significant first) becomes
that layout by transpose(1, 2) + contiguous + a uint8 view: on a little-endian host byte j of
a word holds codes 2j (low nibble) and 2j + 1. compressed-tensors' weight_packed [E, 2N, K/8]
is N-first already: a view. Elsewhere than on a real XPU with the vendor package a torch
fallback consumes exactly that layout through the torch backend's routing loop.
"""

from __future__ import annotations

import sys

import torch
from moecert.reference.schemes import ACT_NONE, Scheme, SchemeFormat
from moecert.reference.schemes import SCHEMES as ALL_SCHEMES
from moecert.reference.schemes.elements import INT
from moecert.reference.schemes.tensors import in_major, role_names

from .convert import check_scales
from .errors import BackendError
from .layer import MoELayer
from .native import TorchBackend
from .platform import Platform
from .protocol import ExportedLinear
from .quant_config import Variant


def vendor_reads(info: Scheme, fmt: SchemeFormat) -> bool:
    """Whether the vendor kernel's layout comes from this stored form by a transpose and a
    byte view: int4 codes packed along in, eight to an int32 word, least significant first,
    no interleave (GPTQ's qweight, compressed-tensors' weight_packed; not AWQ's)."""
    rec = fmt.format_record
    return (info.weight_element.kind == INT and info.weight_bits == 4
            and rec.packing is not None and rec.pack_dim == "in"
            and rec.bit_order == "lsb-first" and rec.interleave is None)


# the schemes it takes: int4 weights in such a form with 16-bit activations (derived from the
# records: GPTQ int4 and compressed-tensors int4)
SCHEMES = tuple(s.name for s in ALL_SCHEMES.values()
                if ACT_NONE in s.activation_modes
                and any(vendor_reads(s, f) for f in s.formats))
GROUP_SIZES = (-1, 32, 64, 128)
ACTIVATIONS = ("silu", "gelu", "swigluoai")
HOST_BYTE_ORDER = sys.byteorder  # module constant so that tests can simulate a big-endian host


class XpuBackend(TorchBackend):
    """The torch backend's forward pass over the vendor layout (`expert_weight`), where
    the vendor kernel does not run."""

    name = "xpu"
    version = "1"

    def available(self) -> str | None:
        return None  # the fallback runs anywhere; the vendor kernel is used where it loads

    def claims(self, variant: Variant, problem, platform: Platform) -> str | None:
        if variant.scheme not in SCHEMES or not vendor_reads(
                variant.info, variant.info.format(variant.checkpoint_format)):
            return (f"scheme {variant.scheme} not supported (symmetric int4 GPTQ or "
                    "compressed-tensors only)")
        if not variant.sym:
            return "zero points not supported (symmetric int4 only)"
        if variant.act_order:
            return "act-order not supported"
        if problem.activation_format != "standard":
            return "batched activation format not supported"
        if variant.group_size not in GROUP_SIZES:
            return f"group size {variant.group_size} not supported (-1, 32, 64 or 128)"
        if problem.K % 8 or problem.N % 8:  # a compressed-tensors file pads words; no byte view
            return "int4 packing needs K % 8 == 0 and N % 8 == 0"
        if problem.activation not in ACTIVATIONS:
            return f"activation {problem.activation} not supported"
        return None

    def convert(self, layer: MoELayer) -> None:
        if HOST_BYTE_ORDER != "little":
            raise BackendError("host byte order", "little-endian (int4 codes are read as "
                               "the bytes of int32 words)", HOST_BYTE_ORDER)
        P = layer.problem
        converted = {}
        for p, (n_out, n_in) in (("w13", (P.w13_rows, P.K)), ("w2", (P.K, P.N))):
            converted.update(_convert_linear(layer, p, n_out, n_in))
        for name in ("w13_bias", "w2_bias"):
            if layer.has(name):
                converted[name] = layer.get(name).to(torch.float32)
        layer.clear()
        for name, t in converted.items():
            layer.put(name, t)
        for p, n_in in (("w13", P.K), ("w2", P.N)):
            layer.meta[f"{p}_group_cols"] = n_in if layer.quant.group_size == -1 else \
                layer.quant.group_size

    def forward(self, layer: MoELayer, x, topk_weights, topk_ids, out,
                expert_num_tokens) -> None:
        kernel = _vendor_kernel() if x.device.type == "xpu" else None
        if kernel is not None:
            _vendor_forward(kernel, layer, x, topk_weights, topk_ids, out)
            return
        super().forward(layer, x, topk_weights, topk_ids, out, expert_num_tokens)

    def expert_weight(self, layer: MoELayer, p: str, e: int) -> torch.Tensor:
        return _dequantize_expert(layer, p, e)

    def canonical_weights(self, layer: MoELayer) -> dict[str, ExportedLinear]:
        out = {}
        for p in ("w13", "w2"):
            u = _nibbles(layer, layer.get(f"{p}_xpu")).to(torch.int32)
            out[p] = ExportedLinear(codes=u - layer.quant.record.code_offset,
                                    scales=layer.get(f"{p}_xpu_scale").to(torch.float64),
                                    block=(1, layer.meta[f"{p}_group_cols"]))
        return out


# --- conversion -----------------------------------------------------------------------------

def _convert_linear(layer: MoELayer, p: str, n_out: int, n_in: int) -> dict[str, torch.Tensor]:
    q = layer.quant
    names = role_names(q, p)  # the layout's tensor names by role (schemes.tensors)
    scale_name, zeros, g_idx = names["scale"], names.get("zeros"), names.get("g_idx")
    words, scales = layer.get(names["weight"]), layer.get(scale_name)
    # GPTQ stores in-major ([E, in/8, out], scales [E, G, out]); compressed-tensors out-major
    # ([E, out, in/8], scales [E, out, G]) already, as the vendor takes them
    if in_major(q, p, "weight"):
        words = words.transpose(1, 2)
    if in_major(q, p, "scale"):
        scales = scales.transpose(1, 2)
    codes = words.contiguous().view(torch.uint8)  # [E, out, in/2]
    scales = scales.contiguous()
    if "shape" in names:
        _check_ct_shape(layer, names["shape"], n_out, n_in)
    if zeros and layer.has(zeros):  # the symmetric zero as stored (GPTQ v1 stores z - 1)
        rec = q.record
        _check_symmetric(zeros, layer.get(zeros), rec.code_offset + rec.stored_zero_offset)
    if g_idx and layer.has(g_idx):
        _check_trivial_g_idx(g_idx, layer.get(g_idx), n_in, scales.shape[2])
    check_scales(scale_name, scales, q.record.scale_sign)
    return {f"{p}_xpu": codes, f"{p}_xpu_scale": scales}


def _check_symmetric(name: str, words: torch.Tensor, stored_zero: int) -> None:
    """Symmetric files may carry zero points; every nibble must be the symmetric zero."""
    nibbles = torch.stack((words & 0xF, *((words >> s) & 0xF for s in range(4, 32, 4))))
    if bool((nibbles != stored_zero).any()):
        raise BackendError(name, f"the symmetric stored zero {stored_zero} in every field "
                           "(symmetric int4 only)",
                           f"stored zeros in [{int(nibbles.min())}, {int(nibbles.max())}]")


def _check_trivial_g_idx(name: str, g_idx: torch.Tensor, n_in: int, groups: int) -> None:
    trivial = torch.arange(n_in, device=g_idx.device) // (n_in // groups)
    if not torch.equal(g_idx.to(torch.int64), trivial.expand_as(g_idx)):
        raise BackendError(name, "k // group_size (act-order not supported)",
                           "a permuted group map")


def _check_ct_shape(layer: MoELayer, name: str, n_out: int, n_in: int) -> None:
    if layer.has(name):
        shape = layer.get(name)
        if bool((shape[:, 0] != n_out).any()) or bool((shape[:, 1] != n_in).any()):
            raise BackendError(name, f"({n_out}, {n_in}) for every expert",
                               str(shape.unique(dim=0).tolist()))


# --- the torch fallback over the XPU layout -----------------------------------------------

def _nibbles(layer: MoELayer, q: torch.Tensor) -> torch.Tensor:
    """uint8 [..., in/2] -> unsigned codes [..., in], low nibble first."""
    u = torch.stack((q & 0xF, q >> 4), dim=-1).flatten(-2)
    # The vendor wrapper rewrites the weights it is given to two's complement int4 once
    # (u -> u - 8, i.e. u ^ 8 per nibble) and marks the tensor: undo it when reading back.
    if getattr(layer.get("w13_xpu"), "xpu_fused_moe", False):
        u = u ^ layer.quant.record.code_offset
    return u


def _dequantize_expert(layer: MoELayer, p: str, e: int) -> torch.Tensor:
    q = layer.get(f"{p}_xpu")[e]  # [out, in/2]
    n_out = q.shape[0]
    u = _nibbles(layer, q).to(torch.float32) - layer.quant.record.code_offset
    s = layer.get(f"{p}_xpu_scale")[e].to(torch.float32)  # [out, G]
    cols = layer.meta[f"{p}_group_cols"]
    return (u.view(n_out, -1, cols) * s.unsqueeze(-1)).view(n_out, -1)


# --- the vendor kernel (real XPU only) ----------------------------------------------------

def _vendor_kernel():
    try:  # the package exists only on XPU installs
        from vllm_xpu_kernels.fused_moe_interface import xpu_fused_moe
    except ImportError:
        return None
    return xpu_fused_moe


def _vendor_forward(kernel, layer: MoELayer, x, topk_weights, topk_ids, out) -> None:
    # UNTESTED here (no XPU machine): keyword call of vllm_xpu_kernels' xpu_fused_moe as vLLM
    # makes it for int4 (weights N-first uint8, scales [E, out, K/g], biases in the act dtype).
    P = layer.problem
    if P.apply_router_weight_on_input:  # the engine scales the input before the experts
        x = (x.to(torch.float32) * topk_weights).to(x.dtype)
        topk_weights = torch.ones_like(topk_weights)
    expert_map = (None if P.expert_map is None else
                  torch.tensor(P.expert_map, dtype=torch.int32, device=x.device))

    def bias(name):
        return layer.get(name).to(x.dtype) if layer.has(name) else None
    kernel(hidden_states=x, w13=layer.get("w13_xpu"), w2=layer.get("w2_xpu"),
           topk_weights=topk_weights, topk_ids=topk_ids, n_experts_per_token=P.topk,
           activation=P.activation, num_experts=P.E,
           w13_scales=layer.get("w13_xpu_scale").to(x.dtype),
           w2_scales=layer.get("w2_xpu_scale").to(x.dtype),
           w13_bias=bias("w13_bias"), w2_bias=bias("w2_bias"), expert_map=expert_map,
           output=out, is_int4=True)


__all__ = ["XpuBackend"]
