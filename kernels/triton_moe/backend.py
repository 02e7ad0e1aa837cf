"""`TritonBackend`: fused MoE in Triton for every scheme, one GEMM kernel for all formats.

    x --q1--> GEMM1 (+b13) --round--> h --act--> a --q2--> GEMM2 (+b2, *r) --> sum over topk

The kernel modules are imported inside convert/forward, never at import time: triton.jit
reads TRITON_INTERPRET when a kernel is defined, so importing them with the registry would
fix the mode before a test (or a user) chooses it.
"""

from __future__ import annotations

import dataclasses
import math
import os

import torch
from moecert.reference.schemes import (
    ACT_DYNAMIC_GROUP,
    ACT_DYNAMIC_TENSOR,
    ACT_DYNAMIC_TOKEN,
    ACT_GROUP,
    ACT_NONE,
    ACT_NVFP4,
    ACT_STATIC_TENSOR,
    MX_ACTIVATION_ELEMENTS,
    MX_BLOCK,
)

from ..base import BaseBackend
from ..layer import MoELayer
from ..platform import Platform
from ..protocol import ExportedLinear
from ..quant_config import Variant

# W4A8: each GEMM's group scales are divided by a power of two near max(scale) / 4096 and the
# factor moves to the activation side (Marlin's a1/a2 global scales). A power of two keeps
# s / F exact in fp32, so the conversion reads back bit for bit.
W4A8_SCALE_TARGET_LOG2 = 12


def _scales_moved_to_activations(info) -> bool:
    """Packed int4 codes times int8 activations (an integer dot): the W4A8 scale move above.
    Read off the record's element fields, not the scheme's name."""
    return info.packed and info.activation_element == "int8"


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


class TritonBackend(BaseBackend):
    name = "triton"
    version = "1"

    def available(self) -> str | None:
        if interpreting() or torch.cuda.is_available():
            return None
        return "no CUDA or ROCm device (the CPU needs TRITON_INTERPRET=1)"

    def claims(self, variant: Variant, problem, platform: Platform) -> str | None:
        return _platform_reason(variant, platform)

    def convert(self, layer: MoELayer) -> None:
        from ..convert import convert_to_kernel_format

        convert_to_kernel_format(layer)
        if _scales_moved_to_activations(layer.quant.info):
            for p, gscale in (("w13", "a1_gscale"), ("w2", "a2_gscale")):
                s = layer.get(f"{p}_s")
                _, exp = torch.frexp(s.max().to(torch.float64))
                factor = 2.0 ** (int(exp) - 1 - W4A8_SCALE_TARGET_LOG2)
                layer.put(f"{p}_s", s / factor)  # exact: a power of two
                layer.put(gscale, torch.tensor([factor], dtype=torch.float32,
                                                device=layer.device))
        _tile_weights(layer)
        layer.meta["triton_plan"] = _build_plan(layer)

    def describe(self, layer: MoELayer) -> str:
        return describe(layer)

    def canonical_weights(self, layer: MoELayer) -> dict[str, ExportedLinear]:
        from ..convert import PREFIXES, export_canonical

        # the codes as the common kernel format holds them, out of the kernel's tiles
        plain = {f"{p}_q": _stored_int4(layer, p) for p in PREFIXES
                 if layer.has(f"{p}_q") and layer.get(f"{p}_q").dim() == 5}
        # and those in a layout of the backend's own (e2m1 planes, fp6's six-bit planes)
        plain |= {k: t for p in PREFIXES for k, t in stored_tensors(layer, p).items()}
        exported = export_canonical(layer, plain)
        if _scales_moved_to_activations(layer.quant.info):
            for p, gscale in (("w13", "a1_gscale"), ("w2", "a2_gscale")):
                factor = layer.get(gscale).to(torch.float64)
                exported[p] = dataclasses.replace(exported[p],
                                                  scales=exported[p].scales * factor)
        return exported

    def forward(self, layer: MoELayer, x, topk_weights, topk_ids, out, expert_num_tokens
                ) -> None:
        from . import align, configs, fused_moe, heuristics, quant

        plan = _plan(layer)
        P = layer.problem
        E, K = P.E, P.K
        if P.activation_format == "batched":
            T = x.shape[1]
            a_in = x.reshape(E * T, K)
            n, row_div, router, rows_out = E * T, 1, None, E * T
            source, mode = expert_num_tokens, align.BATCHED
        else:
            M = x.shape[0]
            a_in = x
            router = topk_weights.reshape(-1)
            if P.apply_router_weight_on_input:  # topk == 1; one rounding of the exact product
                a_in = (x.double() * topk_weights.double()).to(x.dtype)
                router = None
            n, row_div, rows_out, T = topk_ids.numel(), P.topk, M, 1
            source = topk_ids.reshape(-1)
            mode = align.IDS if plan["expert_map"] is None else align.MAPPED
        may_drop = mode != align.IDS

        # dynamic-tensor scales span the kept rows only: the mask is needed just then
        kept = None
        if may_drop and layer.quant.activation == ACT_DYNAMIC_TENSOR:
            kept = _kept(plan, P, source, mode, T)
        input_rows_valid = kept if mode == align.BATCHED else None
        if plan["w13_pre"] is not None:  # one GEMM1 input row per assignment, pre-scaled
            a_in = _pre_scaled(a_in, plan, "w13", source, mode, T, row_div)
            row_div = 1
        a1, a1_scale, g1, act1 = _quantize(layer, plan, quant, a_in, "w13",
                                           input_rows_valid)
        # the prefill dispatch: both linears decoded per call, the W16 tile on them
        dense = plan["dense_bytes"] is not None and heuristics.dequantizes(n, E, plan["w13"])
        w13 = _dense(plan, "w13", x.device) if dense else plan["w13"]
        # both GEMMs quantize their input the same way: act1 is GEMM2's kind too
        config1, config2 = heuristics.pick_configs(n, E, w13["kind"], act1,
                                                  (P.w13_rows, K), (K, P.N),
                                                  heuristics.weight_key(w13))
        block_m = config1["BLOCK_M"]
        assert config2["BLOCK_M"] == block_m, "both GEMMs share the row alignment"
        sorted_ids, block_expert, num_padded = align.align_assignments(
            source, E, block_m, n=n, mode=mode, expert_map=plan["expert_map"],
            tokens_per_expert=T)
        # dropped rows are never written by GEMM1: zeros keep the activation finite there
        # (act(0) = 0 for every activation, so a fused one's zeros are the same)
        alloc = torch.zeros if may_drop else torch.empty
        # the activation in GEMM1's epilogue unless the tile's entry says it times slower
        pairs = configs.fused_activation() if config1.get("FUSED_ACT", True) else None
        if pairs:  # act(h) from GEMM1's epilogue, no h in memory
            inter = alloc(n, P.N, dtype=x.dtype, device=x.device)
            fused_moe.moe_gemm(a1, a1_scale, g1, w13, inter, sorted_ids, block_expert,
                               num_padded, None, a_row_div=row_div, act=act1, config=config1,
                               activation=P.activation, pairs=pairs)
        else:
            h = alloc(n, P.w13_rows, dtype=x.dtype, device=x.device)
            fused_moe.moe_gemm(a1, a1_scale, g1, w13, h, sorted_ids, block_expert,
                               num_padded, None, a_row_div=row_div, act=act1, config=config1)
            inter = quant.activation(h, P.activation, P.N)
        if plan["w2_pre"] is not None:
            inter = _pre_scaled(inter, plan, "w2", source, mode, T, 1)
        a2, a2_scale, g2, act2 = _quantize(layer, plan, quant, inter, "w2", kept)
        y = (torch.zeros if may_drop else torch.empty)(n, K, dtype=torch.float32,
                                                       device=x.device)
        # (w2 decoded over w13's workspace: GEMM1 has read it, one stream)
        w2 = _dense(plan, "w2", x.device, w13["q"]) if dense else plan["w2"]
        fused_moe.moe_gemm(a2, a2_scale, g2, w2, y, sorted_ids, block_expert,
                           num_padded, router, a_row_div=1, act=act2, config=config2)
        # the routed sum in fp32, cast once
        if n == rows_out:
            out.copy_(y.view(out.shape))
        else:
            quant.routed_sum(y, out, n // rows_out)


def describe(layer: MoELayer) -> str:
    """The result column `backend_detail`: the fused kernel, and where the layer takes the
    prefill dispatch, from how many rows per expert (heuristics.dequantizes) and whether its
    decode rounds the weights."""
    from . import dequant, fused_moe, heuristics

    plan = _plan(layer)
    c = plan["w13"]["constexprs"]
    words = ("; plane scales in words" if c["SCALE_WORDS"] else "") + (
        "; lean e2m1 step" if c["LEAN"] else "") + (
        "; sign-carrying e2m1 words" if c["CARRY"] else "") + (
        "; block scales pre-decoded to bf16 at load" if c["SCALE_BF16"] else "") + (
        "; zero points in the scale words" if plan["w13"]["zero_words"] is not None else "") + (
        "; fp6 codes in six-bit planes" if c["FP6_EXP"] else "")
    dtype = str(layer.problem.torch_dtype).removeprefix("torch.")
    act = activation_kind(layer.quant)
    rounds = fused_moe.one_dot_rounds(plan["w13"], act) and fused_moe.one_dot_run(
        plan["w13"], act, heuristics.PREFILL_NIBBLE_TILE)
    fused = f"fused Triton MoE GEMM ({heuristics.weight_key(plan['w13'])}{words})" + (
        f"; prefill tile: (q - zero) * scale rounded to {dtype} in the decode" if rounds else "")
    if plan["dense_bytes"] is None:
        return fused
    rows = heuristics.dequant_rows(plan["w13"])
    how = "((q - zero) * scale, rounded once)" if dequant.rounds(plan["w13"]) else "(exact)"
    return (f"{fused}; from {rows} rows per expert: weights dequantized per call to "
            f"{dtype} {how}, W16 tile")


def _dense(plan: dict, p: str, device: torch.device, workspace: torch.Tensor | None = None
           ) -> dict:
    """Linear `p` decoded into `workspace` (a new one of plan["dense_bytes"] when None): its
    W16 description (dequant.dequantize)."""
    from . import dequant, fused_moe

    weights = plan[p]
    if workspace is None:
        workspace = torch.empty(plan["dense_bytes"] // weights["compute"].itemsize,
                                dtype=weights["compute"], device=device)
    return dequant.dequantize(weights, workspace, fused_moe.int4_pairs_run_on(device))


def _dense_bytes(layer: MoELayer, w13: dict, w2: dict) -> int | None:
    """The workspace the prefill dispatch needs for this layer (both linears decode there:
    e2m1 exactly, int4 planes rounded; 16-bit activations; within
    heuristics.DEQUANT_WORKSPACE_BYTES), else None."""
    from . import dequant, heuristics

    if layer.quant.activation != ACT_NONE or not (dequant.decodes(w13)
                                                  and dequant.decodes(w2)):
        return None
    shapes = [dequant.dense_shape(w) for w in (w13, w2)]
    if dequant.int4_planes_in(w13) and min(n * k for _, n, k in shapes) < (
            heuristics.DEQUANT_INT4_WEIGHTS):  # small int4 experts: the fused tile is as fast
        return None
    elements = max(math.prod(shape) for shape in shapes)
    size = elements * layer.problem.torch_dtype.itemsize
    return size if size <= heuristics.DEQUANT_WORKSPACE_BYTES else None


def _tile_weights(layer: MoELayer) -> None:
    """Integer codes into the kernel's tiled layout where it has one (layout.weight_tile),
    in the nibble order the device's tuned file gives the linear (`tuned_spans`): the layer
    keeps one copy of the weights, `canonical_weights` reads them back out."""
    from ..convert import PREFIXES
    from . import kinds, layout

    if layer.quant.info.element == "e2m1":
        _tile_fp4(layer)
        return
    if _fp6_planes_fit(layer):
        _plane_fp6(layer)
        return
    if not layer.quant.packed or layer.meta["bits"] != 4:
        return
    spans = tuned_spans(layer)
    for p in PREFIXES:
        q = layer.get(f"{p}_q")
        tile = layout.weight_tile(kinds.W_INT4, q)
        if tile is None:
            continue
        span = spans.get(p, 0) if span_fits(layer, p, spans.get(p, 0)) else 0
        if span:
            q = layout.plane_nibbles(q, span)
        layer.put(f"{p}_q", layout.tile_weights(q, *tile))
        layer.meta[f"{p}_nib_span"] = span


def _tile_fp4(layer: MoELayer) -> None:
    """E2M1 codes in nibble planes over layout.FP4_SPAN columns where they fit (every
    linear whose K is a multiple of it), in tiles where those divide: one fixed order, no
    tuning (the planes' decode is the fast one, docs/speed.md "Change 9")."""
    from ..convert import PREFIXES
    from . import configs, kinds, layout

    scale_kind = (kinds.S_E4M3 if layer.quant.info.scale_encoding == "e4m3"
                  else kinds.S_E8M0)
    # MX activations take their E8M0 scale per 32-column tile (A_MX): the tile stays 32
    mx_act = layer.quant.activation in MX_ACTIVATION_ELEMENTS
    for p in PREFIXES:
        q = layer.get(f"{p}_w")
        K = 2 * q.shape[2]
        cols = layer.meta[f"{p}_block"][1]
        span = layout.FP4_SPAN
        if mx_act or not layout.nib_span_fits(kinds.W_FP4, K, cols, False, span,
                                                 scale_kind):
            layer.meta[f"{p}_nib_span"] = 0
            continue
        q = layout.plane_nibbles(q, span)
        # issue 44's third candidate: each nibble's sign where the multiply carries it (bf16)
        carry = configs.fp4_carry() and layer.problem.torch_dtype == torch.bfloat16
        if carry:
            q = layout.carry_bits(q)
        layer.meta[f"{p}_carry"] = carry
        tile = layout.weight_tile(kinds.W_FP4, q)
        layer.put(f"{p}_w", q if tile is None else layout.tile_weights(q, *tile))
        layer.meta[f"{p}_nib_span"] = span
        # the scales as an [E, N, K / block] view of [E, K / block, N] storage: a plane's
        # scales for BLOCK_N rows are then one coalesced run, not BLOCK_N single bytes
        # (MOECERT_TRITON_FP4_SCALE_WORDS=0); by default a span's four plane scales in one
        # word per row (layout.scale_words)
        s = layer.get(f"{p}_s")
        if _scale_bf16_fits(layer, scale_kind, cols, span):
            _store_scale_bf16(layer, p, scale_kind, cols)
        elif configs.fp4_scale_words():
            layer.put(f"{p}_s", layout.scale_words(s.view(torch.uint8), cols))
            layer.meta[f"{p}_scale_dtype"] = s.dtype
        else:
            layer.put(f"{p}_s", s.transpose(1, 2).contiguous().transpose(1, 2))


def _fp6_planes_fit(layer: MoELayer) -> bool:
    """Whether the layer's fp6 weights (widened to e4m3 by the conversion) go back to six
    bits a weight (layout.plane_fp6), decoded times their scales in the kernel (issue 44's
    fifteenth round): bf16 (the decode's packed fma), CUDA sm80+ or the interpreter, both
    linears' K a multiple of layout.FP6_SPAN, every E8M0 byte in the element's
    gemm_kernel.e8m0_words_range, and MOECERT_TRITON_FP6_PLANES=1: a candidate, off by default
    (no faster than the e4m3 bytes on an H200, docs/speed.md round fifteen)."""
    from ..convert import PREFIXES
    from . import configs, fused_moe, gemm_kernel, layout

    el = layer.quant.info.weight_element
    if el.name not in gemm_kernel.FP6_ELEMENTS.values() or not configs.fp6_planes_wanted():
        return False
    if layer.problem.torch_dtype != torch.bfloat16 or not fused_moe.fp6_planes_run_on(
            layer.device):
        return False
    for p in PREFIXES:
        w, s = layer.get(f"{p}_w"), layer.get(f"{p}_s")
        if (w.dtype != torch.float8_e4m3fn or w.shape[2] % layout.FP6_SPAN
                or tuple(layer.meta[f"{p}_block"]) != (1, MX_BLOCK)
                or not fused_moe.e8m0_words(s.view(torch.uint8), el.name)):
            return False
    return True


def _plane_fp6(layer: MoELayer) -> None:
    """Each linear's e4m3 weights as their fp6 codes in six-bit planes; meta["{p}_fp6"] the
    element's exponent bits (`_weights`, `stored_tensors`)."""
    from ..convert import PREFIXES
    from . import layout

    el = layer.quant.info.weight_element
    for p in PREFIXES:
        w = layer.get(f"{p}_w")
        out = torch.empty(*w.shape[:2], w.shape[2] * 3 // 4, dtype=torch.uint8, device=w.device)
        for e in range(w.shape[0]):  # an expert at a time: the codes never held whole (the
            # widened bytes and the planes are the peak, as the widening's own was)
            out[e] = layout.plane_fp6(layout.fp6_codes(w[e], el.name), el.exp_bits)
        layer.put(f"{p}_w", out)
        layer.put(f"{p}_s", layer.get(f"{p}_s").contiguous())
        layer.meta[f"{p}_fp6"] = el.exp_bits


def _scale_bf16_fits(layer: MoELayer, scale_kind: int, cols: int, span: int) -> bool:
    """Whether MOECERT_TRITON_FP4_SCALE_BF16 stores this linear's scales decoded into bf16
    (issue 44's fourth candidate): MXFP4 in any layer (its fp32 pair sums and its bf16 fold
    read the bf16 value alike), NVFP4 in bf16 layers (an fp16 layer's decode multiplies in
    fp16: it would convert each scale again in the loop; not built); the kernel reads pairs
    of a span's blocks, so two or four blocks per span (NVFP4 16 columns, MXFP4 32)."""
    from . import configs, kinds

    wanted = configs.fp4_scale_bf16()
    if wanted is None:
        wanted = configs.scale_bf16_by_default(layer.problem.torch_dtype == torch.bfloat16)
    if not wanted:
        return False
    if scale_kind == kinds.S_E4M3 and layer.problem.torch_dtype != torch.bfloat16:
        return False
    return span // cols == (4 if scale_kind == kinds.S_E4M3 else 2)


def _store_scale_bf16(layer: MoELayer, p: str, scale_kind: int, cols: int) -> None:
    """Linear `p`'s block scales as bf16 values (layout.scale_bf16), NVFP4's times the LEAN
    fold where the kernel's LEAN step will read them so (fused_moe.lean_scale_fold)."""
    from . import configs, fused_moe, kinds, layout

    s = layer.get(f"{p}_s")
    fold = fused_moe.lean_scale_fold(scale_kind, layer.problem.torch_dtype,
                                     configs.fp4_lean())
    element = "e4m3" if scale_kind == kinds.S_E4M3 else "e8m0"
    layer.put(f"{p}_s", layout.scale_bf16(s.view(torch.uint8), cols, element, fold))
    layer.meta[f"{p}_scale_dtype"] = s.dtype
    layer.meta[f"{p}_scale_fold"] = fold
    layer.meta[f"{p}_scale_element"] = element


def _stored_fp4(layer: MoELayer, p: str) -> torch.Tensor:
    """Linear `p`'s e2m1 codes [E, N, K / 2] in the checkpoint's nibble order."""
    from . import layout

    q = layer.get(f"{p}_w")
    if q.dim() == 5:
        q = layout.untile_weights(q)
    if layer.meta.get(f"{p}_carry"):
        q = layout.uncarry_bits(q)
    span = layer.meta.get(f"{p}_nib_span", 0)
    return layout.unplane_nibbles(q, span) if span else q


def stored_tensors(layer: MoELayer, p: str) -> dict[str, torch.Tensor]:
    """Linear `p`'s tensors that this backend keeps in a layout of its own, in the common
    kernel format's (convert.py): e2m1 codes out of planes and tiles, and block scales out of
    words; fp6 codes out of six-bit planes, widened to e4m3 again. What reading the layer as
    the torch backend does needs in their place (canonical_weights, the tuner's bound);
    empty where the layer holds the common format."""
    from . import layout

    if exp_bits := layer.meta.get(f"{p}_fp6"):
        el = layer.quant.info.weight_element
        codes = layout.unplane_fp6(layer.get(f"{p}_w"), exp_bits)
        return {f"{p}_w": layout.fp6_widened(codes, el.name)}
    if layer.quant.info.element != "e2m1":
        return {}
    out = {f"{p}_w": _stored_fp4(layer, p)}
    if layer.get(f"{p}_s").dim() == 4:  # layout.scale_words or scale_bf16
        out[f"{p}_s"] = _stored_fp4_scales(layer, p)
    return out


def _stored_fp4_scales(layer: MoELayer, p: str) -> torch.Tensor:
    """Linear `p`'s block scales [E, N, K / block] out of their words (layout.scale_words) or
    their bf16 values (layout.scale_bf16): the checkpoint's codes."""
    from . import layout

    packed, cols = layer.get(f"{p}_s"), layer.meta[f"{p}_block"][1]
    if packed.dtype == torch.bfloat16:
        s = layout.unscale_bf16(packed, cols, layer.meta[f"{p}_scale_element"],
                                layer.meta[f"{p}_scale_fold"])
    else:
        s = layout.unscale_words(packed, cols)
    return s.view(layer.meta[f"{p}_scale_dtype"])


def tuned_spans(layer: MoELayer) -> dict[str, int]:
    """The nibble span of each int4 linear in the device's tuned file, under the layer's
    activation kind and the key whose tiles it reads (heuristics.tuned_key; {} when it has
    none), or the one MOECERT_TRITON_NIB_SPAN forces."""
    from . import configs, heuristics, kinds

    P = layer.problem
    if (forced := configs.forced_nib_span()) is not None:
        return {p: forced for p in configs.LINEARS}
    return configs.tuned_spans(heuristics.tuned_key(configs.LayerKey(
        heuristics.int4_weight_name(layer.has("w13_zp")),
        kinds.ACT_NAMES[activation_kind(layer.quant)], P.E, (P.w13_rows, P.K), (P.K, P.N))))


def span_fits(layer: MoELayer, p: str, span: int) -> bool:
    """Whether linear `p`'s int4 codes can be stored in nibble planes over `span` columns."""
    from . import kinds, layout

    K = layer.problem.K if p == "w13" else layer.problem.N
    return span == 0 or layout.nib_span_fits(
        kinds.W_INT4, K, layer.meta[f"{p}_group_cols"], layer.has(f"{p}_g_idx"), span)


def _stored_int4(layer: MoELayer, p: str) -> torch.Tensor:
    """Linear `p`'s int4 codes [E, N, K / 2] in the checkpoint's nibble order, out of the
    kernel's tiles (and nibble planes)."""
    from . import layout

    q = layout.untile_weights(layer.get(f"{p}_q"))
    span = layer.meta.get(f"{p}_nib_span", 0)
    return layout.unplane_nibbles(q, span) if span else q


def int4_variants(layer: MoELayer, p: str) -> dict[int, dict]:
    """Linear `p`'s kernel descriptions in each nibble order it can be stored in, {span:
    description}: what `moecert tune` times side by side. Only the layer's own order for
    anything but tiled int4 codes."""
    from . import layout

    if not (layer.quant.packed and layer.get(f"{p}_q").dim() == 5):
        return {layer.meta.get(f"{p}_nib_span", 0): _weights(layer, p)}
    plain = _stored_int4(layer, p)
    tile = layer.get(f"{p}_q").shape[3:]
    out = {}
    for span in (0, layout.NIB_SPAN):
        if span_fits(layer, p, span):
            codes = layout.plane_nibbles(plain, span) if span else plain
            out[span] = _weights(layer, p, layout.tile_weights(codes, *tile),
                                 span)
    return out


def _plan(layer: MoELayer) -> dict:
    """Everything forward needs from the layer that does not change between calls (weight
    descriptions, the expert map on the device), built once: at the end of convert, or on
    first use for a layer put into the kernel format some other way. A reload clears meta."""
    plan = layer.meta.get("triton_plan")
    if plan is None:
        plan = layer.meta["triton_plan"] = _build_plan(layer)
    return plan


def _build_plan(layer: MoELayer) -> dict:
    from . import fused_moe

    P = layer.problem
    emap = None
    if P.expert_map is not None:
        emap = torch.tensor(P.expert_map, dtype=torch.int32, device=layer.device)
    names = ("a1_gscale", "a2_gscale", "a13_scale", "a2_scale", "a13_global", "a2_global",
             "w13_pre", "w2_pre")
    w13, w2 = _weights(layer, "w13"), _weights(layer, "w2")
    # the dtype each GEMM takes int8 activation codes in (W4A8: fused_moe.int8_codes_dtype)
    codes = {f"{p}_codes": fused_moe.int8_codes_dtype(w, layer.device)
             for p, w in (("w13", w13), ("w2", w2))}
    return {"w13": w13, "w2": w2, "expert_map": emap, **codes,
            "dense_bytes": _dense_bytes(layer, w13, w2),
            **{name: layer.get(name) if layer.has(name) else None for name in names}}


def _pre_scaled(t: torch.Tensor, plan: dict, p: str, source: torch.Tensor, mode, T: int,
                row_div: int) -> torch.Tensor:
    """GEMM input `t` of linear `p` with one row per assignment (row i // row_div of `t`
    for assignment i), each row's columns times its expert's pre_quant_scale (ModelOpt AWQ;
    convert.py's `{p}_pre`), multiplied in fp32 and rounded once to `t`'s dtype. Experts of
    another rank (expert_map -1) take scale 1: their rows are never read."""
    from . import align

    pre = plan[f"{p}_pre"]
    if mode == align.BATCHED:  # row i of the [E * T] rows belongs to expert i // T
        experts = torch.arange(t.shape[0], device=t.device) // T
    else:
        experts = source.long()
        if mode == align.MAPPED:
            experts = plan["expert_map"][experts].long()
    rows = t if row_div == 1 else t.repeat_interleave(row_div, dim=0)
    scale = torch.where((experts >= 0).unsqueeze(1), pre[experts.clamp(min=0)],
                        torch.ones((), dtype=pre.dtype, device=pre.device))
    return (rows.to(torch.float32) * scale).to(t.dtype)


def _kept(plan, P, source, mode, T) -> torch.Tensor:
    """bool [n]: assignments that reach an expert of this rank (batched: rows t < count)."""
    from . import align

    if mode == align.BATCHED:
        t = torch.arange(T, device=source.device)
        return (t < source.unsqueeze(1)).flatten()
    return plan["expert_map"][source.long()] >= 0


def _platform_reason(variant: Variant, platform: Platform) -> str | None:
    # e4m3 weights, or e4m3 activations (an fp8 x fp8 dot; W4AFP8's int4 weights become e4m3)
    # e4m3 in the kernel format: e4m3 elements, or elements widened to e4m3 (convert.py: fp6)
    el = variant.info.weight_element
    e4m3_w = el.storage == torch.float8_e4m3fn or el.units > 1
    fp8 = e4m3_w or variant.info.activation_element == "e4m3"
    what = "weights" if e4m3_w else "activations"
    if platform.kind == "xpu":
        return "platform cuda or rocm only"
    if platform.kind == "cpu":
        if platform.simulated or not interpreting():
            return "platform cuda or rocm only (cpu needs TRITON_INTERPRET=1)"
        return None
    if platform.kind == "cuda":
        major, minor = platform.capability
        if (major, minor) < (8, 0):
            return f"compute capability >= 8.0 needed (sm{major}{minor})"
        if fp8 and (major, minor) < (8, 9):
            return f"fp8 e4m3 {what} need compute capability >= 8.9 (sm{major}{minor})"
        return None
    # rocm: float8_e4m3fn (OCP) tensors are assumed to load and upcast in Triton on gfx950,
    # which has OCP fp8; gfx942 (MI300) is fnuz hardware and is not assumed to handle
    # e4m3fn. Untested on any ROCm device.
    if fp8 and platform.arch != "gfx950":
        return (f"fp8 e4m3fn {what} need rocm gfx950 (OCP fp8); {platform.arch} is assumed "
                "to lack e4m3fn in Triton (gfx942 has e4m3fnuz)")
    return None


def activation_kind(quant) -> int:
    """The kernel's activation kind (kinds.A*) of a layer's activation quantization: what
    `_quantize` hands the GEMM, and the key of the layer's tuned entries."""
    from . import kinds

    mode = quant.activation
    if mode in (ACT_NONE, ACT_NVFP4):  # NVFP4: e2m1 * e4m3 values in the 16-bit dtype
        return kinds.A16
    if mode in MX_ACTIVATION_ELEMENTS:
        return kinds.A_MX
    if quant.info.activation_element == "e4m3":
        return kinds.A_FP8_G if mode == ACT_DYNAMIC_GROUP else kinds.A_FP8
    return kinds.A_INT8


def _quantize(layer: MoELayer, plan: dict, quant, t: torch.Tensor, which: str,
              valid_rows: torch.Tensor | None):
    """q1 / q2: (GEMM input, its scales, global factor or None, the activation kind)."""
    mode = layer.quant.activation
    kind = activation_kind(layer.quant)
    if mode == ACT_NONE:
        return t, None, None, kind
    if mode in MX_ACTIVATION_ELEMENTS:  # MXFP8 / MXFP4: element values and E8M0 per 32
        values, scales = quant.quantize_mx(t, layer.quant.mx_scale_rule,
                                           MX_ACTIVATION_ELEMENTS[mode])
        return values, scales, None, kind
    static = plan["a13_scale" if which == "w13" else "a2_scale"]
    if mode == ACT_NVFP4:
        # torch ops (the torch backend's quantizer): per 16 columns e2m1 * e4m3 block scale,
        # exact in t's dtype (fused_moe's S_E4M3 note); the multiplier alpha (`static`)
        # multiplies the GEMM's fp32 accumulator instead of each value (q * bs * alpha would
        # round in bf16)
        from ..activations import quantize_nvfp4

        q, bs = quantize_nvfp4(t.to(torch.float32),
                               plan["a13_global" if which == "w13" else "a2_global"])
        return (q * bs).flatten(-2).to(t.dtype), None, static, kind
    if layer.quant.info.activation_element == "e4m3":
        if mode == ACT_DYNAMIC_GROUP:
            codes, scales = quant.quantize_fp8(t, "group", ACT_GROUP)
            return codes.view(torch.uint8), scales, None, kind
        fp8_kind = {ACT_DYNAMIC_TOKEN: "token", ACT_STATIC_TENSOR: "static",
                    ACT_DYNAMIC_TENSOR: "tensor"}.get(mode)
        if fp8_kind is None:
            raise ValueError(f"e4m3 activation quantization {mode!r}")
        codes, scales = quant.quantize_fp8(t, fp8_kind, ACT_GROUP, given=static,
                                           valid_rows=valid_rows)
        return codes.view(torch.uint8), scales, None, kind
    gscale = plan["a1_gscale" if which == "w13" else "a2_gscale"]
    dtype = plan[f"{which}_codes"]
    if mode == ACT_DYNAMIC_TOKEN:
        codes, scales = quant.quantize_int8(t, "token", dtype=dtype)
    elif mode == ACT_STATIC_TENSOR:
        codes, scales = quant.quantize_int8(t, "static", given=static, dtype=dtype)
    elif mode == ACT_DYNAMIC_TENSOR:
        codes, scales = quant.quantize_int8(t, "tensor", valid_rows=valid_rows, dtype=dtype)
    else:
        raise ValueError(f"activation quantization {mode!r}")
    return codes, scales, gscale, kind


def _weights(layer: MoELayer, p: str, codes: torch.Tensor | None = None,
             nib_span: int | None = None) -> dict:
    """The kernel's description of linear `p` in the layer's kernel format (int4 `codes`
    and their nibble span in place of the layer's: int4_variants)."""
    from . import configs, fused_moe, kinds

    q = layer.quant
    compute = layer.problem.torch_dtype
    opt = {name: layer.get(f"{p}_{name}") for name in ("zp", "g_idx", "bias")
           if layer.has(f"{p}_{name}")}
    if q.packed:
        bits = layer.meta["bits"]
        return fused_moe.describe_weights(
            kinds.W_INT4 if bits == 4 else kinds.W_UINT8,
            layer.get(f"{p}_q") if codes is None else codes,
            compute, s=layer.get(f"{p}_s"), scale_cols=layer.meta[f"{p}_group_cols"],
            sym_zero=1 << (bits - 1),
            nib_span=layer.meta.get(f"{p}_nib_span", 0) if nib_span is None else nib_span,
            zero_sums=(activation_kind(q) == kinds.A16 and configs.zero_sums_allowed()),
            **opt)
    if not q.info.quantized:
        return fused_moe.describe_weights(kinds.W16, layer.get(f"{p}_w"), compute, **opt)
    scale_kind = {"float": kinds.S_FLOAT, "e8m0": kinds.S_E8M0,
                  "e4m3": kinds.S_E4M3}[q.info.scale_encoding]
    # the kernel format's weight dtype (convert.py: int8 codes, e4m3 values, e2m1 pairs in
    # uint8; fp6 arrives widened to e4m3) and the scale encoding say the kind
    w_dtype = layer.get(f"{p}_w").dtype
    fp6_exp = layer.meta.get(f"{p}_fp6", 0)  # fp6 codes in six-bit planes: uint8 too
    kind = kinds.W_MXFP8 if fp6_exp else {torch.int8: kinds.W_INT8, torch.uint8: kinds.W_FP4}.get(
        w_dtype, kinds.W_MXFP8 if scale_kind == kinds.S_E8M0 else kinds.W_FP8)
    s = layer.get(f"{p}_s")
    if scale_kind == kinds.S_E4M3 and s.dtype != torch.bfloat16:  # decoded from its bits
        s = s.view(torch.uint8)
    if layer.has(f"{p}_gs"):  # the kernel's multiply is fp32 (one rounding of the factor)
        opt["gscale"] = layer.get(f"{p}_gs").to(torch.float32).contiguous()
    rows, cols = layer.meta[f"{p}_block"]
    return fused_moe.describe_weights(kind, layer.get(f"{p}_w"), compute, s=s,
                                      scale_rows=rows, scale_cols=cols, scale_kind=scale_kind,
                                      nib_span=layer.meta.get(f"{p}_nib_span", 0),
                                      carry=layer.meta.get(f"{p}_carry", False),
                                      scale_fold=layer.meta.get(f"{p}_scale_fold", 0),
                                      fp6_exp=fp6_exp, **opt)
