"""Quantizers: the producing tools' weight rules (for `synthesize`) and the kernels' activation
quantize-dequantize (for `moe`). Every integer rounding is round half to even (torch.round).

Weight quantizers take float64 [E, out, in] and return a `CanonicalLinear`. Scales are rounded
to their storage dtype before codes are chosen, so a synthesized checkpoint dequantizes to
within half a step of the float weights it came from.
"""

from __future__ import annotations

import torch

from .canonical import CanonicalLinear, broadcast_scale_columns, broadcast_scale_rows
from .elements import (
    mx_scale,
    mx_scale_exponent,
    round_to,
    round_to_e2m1,
    round_to_e4m3,
)
from .schemes import (
    ACT_ELEMENT_MAX,
    ACT_GROUP,
    F4E2M1_MAX,
    F8E4M3_MAX,
    MX_BLOCK,
    NVFP4_BLOCK,
)
from .schemes.elements import INT, get_element

# NVFP4's global scale maps a tensor's amax to the largest block scale times the largest
# element: 448 * 6
NVFP4_RANGE = F8E4M3_MAX * F4E2M1_MAX


def _groups(w: torch.Tensor, cols: int) -> torch.Tensor:
    """[E, out, in] -> [E, out, in/cols, cols]."""
    return w.unflatten(-1, (-1, cols))


def quantize_int_groups(w: torch.Tensor, bits: int, group_size: int, sym: bool, rule: str,
                        scale_dtype: torch.dtype, g_idx: torch.Tensor | None = None,
                        min_zero: int = 0) -> CanonicalLinear:
    """Round-to-nearest per (row, group) with a tool's rule; signed codes and zeros.

    rule "gptq": sym s = amax / ((2^b - 1) / 2), z = 2^(b-1); asym over [min(x,0), max(x,0)]:
                 s = (max - min) / (2^b - 1), z = round(-min / s); u = clamp(round(x/s) + z).
    rule "ct":   sym s = amax / ((qmax - qmin) / 2); asym as gptq with zp = qmin - round(min/s).
    rule "awq":  sym s = amax / (2^(b-1) - 1); asym s = max(max - min, 1e-5) / (2^b - 1) without
                 clipping the range to 0, z = clamp(-round(min / s), 0, 2^b - 1).
    With g_idx (act order) group j holds the columns with g_idx == j. `min_zero` raises the
    unsigned zero point to at least that value (GPTQ v1 stores z - 1, so it needs z >= 1).
    """
    _, n_out, n_in = w.shape
    cols = n_in if group_size == -1 else group_size
    perm = None if g_idx is None else torch.argsort(g_idx, dim=-1, stable=True)
    if perm is not None:  # make each group contiguous
        w = torch.gather(w, 2, perm.unsqueeze(1).expand(-1, n_out, -1))
    x = _groups(w.to(torch.float64), cols)
    maxq, half = (1 << bits) - 1, 1 << (bits - 1)
    lo, hi = x.amin(-1), x.amax(-1)
    if rule == "awq" and not sym:
        scale = (hi - lo).clamp(min=1e-5) / maxq
    else:
        lo, hi = lo.clamp(max=0), hi.clamp(min=0)
        if sym:
            amax = torch.maximum(-lo, hi)
            scale = amax / ((half - 1) if rule == "awq" else maxq / 2)
        else:
            scale = (hi - lo) / maxq
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))  # all-zero groups
    scale = scale.to(scale_dtype).to(torch.float64)
    if sym:
        zero = torch.zeros_like(scale)
    elif rule == "awq":
        zero = (-torch.round(lo / scale)).clamp(0, maxq) - half
    else:
        zero = torch.round(-lo / scale).clamp(min_zero, maxq) - half
    codes = (torch.round(x / scale.unsqueeze(-1)) + zero.unsqueeze(-1)).clamp(-half, half - 1)
    codes = codes.flatten(-2).to(torch.int32)
    if perm is not None:  # back to checkpoint column order
        codes = torch.empty_like(codes).scatter_(2, perm.unsqueeze(1).expand(-1, n_out, -1),
                                                 codes)
    return CanonicalLinear(codes=codes, scales=scale, block=(1, cols),
                           zeros=None if sym else zero.to(torch.int32), g_idx=g_idx)


def _block_amax(w: torch.Tensor, block: tuple[int, int]) -> torch.Tensor:
    """max |w| over blocks of (rows, cols), partial blocks at the edges included."""
    E, n_out, n_in = w.shape
    rows, cols = block
    R, C = -(-n_out // rows), -(-n_in // cols)
    padded = torch.nn.functional.pad(w.abs(), (0, C * cols - n_in, 0, R * rows - n_out))
    return padded.view(E, R, rows, C, cols).amax(dim=(2, 4))


def round_codes(x: torch.Tensor, element: str) -> torch.Tensor:
    """x rounded onto `element`'s codes: integers clamp(round half to even), saturating at
    the element's range; floats the nearest value, ties to even, saturating (`round_to`)."""
    el = get_element(element)
    if el.kind == INT:
        return torch.round(x).clamp(*el.int_range)
    return round_to(x, el, "rne")


def quantize_scaled(w: torch.Tensor, block: tuple[int, int], element: str) -> CanonicalLinear:
    """One fp32 scale per block, s = amax / the element's largest value (INT8 127, FP8 E4M3
    448), codes w / s rounded onto the element (`round_codes`)."""
    w = w.to(torch.float64)
    el = get_element(element)
    scale = (_block_amax(w, block) / el.max).clamp(min=1e-12).to(torch.float32)
    scale = scale.to(torch.float64)
    full = broadcast_scale_columns(broadcast_scale_rows(scale, block[0], w.shape[1]),
                                   block[1], w.shape[2], None)
    codes = round_codes(w / full, element)
    return CanonicalLinear(codes=codes.to(torch.int32) if el.kind == INT else codes,
                           scales=scale, block=block)


def quantize_mx(w: torch.Tensor, rule: str, element: str, rounding: str = "rne"
                ) -> CanonicalLinear:
    """MX: an E8M0 scale 2^exp per 32 along the input dimension, exp by `rule` from the
    block's amax and the element's emax (`mx_scale_exponent`), elements w / 2^exp rounded to
    `element` (E4M3, or E2M1 with ties to even or away, `rounding`), saturating."""
    w = w.to(torch.float64)
    exp = mx_scale_exponent(_groups(w, MX_BLOCK).abs().amax(-1), rule, element)
    scale = mx_scale(exp)
    codes = round_to(w / scale.repeat_interleave(MX_BLOCK, dim=2), element, rounding)
    return CanonicalLinear(codes=codes, scales=scale, block=(1, MX_BLOCK))


def quantize_mxfp8(w: torch.Tensor, rule: str) -> CanonicalLinear:
    """E4M3 elements with an E8M0 scale 2^exp per 32 along the input dimension."""
    return quantize_mx(w, rule, "e4m3")


def nvfp4_global_scale(amax: torch.Tensor, convention: str) -> torch.Tensor:
    """The fp32 global scale a producing tool stores for a tensor of absolute maximum `amax`:
    "multiply" (ModelOpt weight_scale_2, input_scale) amax / (448 * 6), "divide"
    (compressed-tensors weight_global_scale, input_global_scale) (448 * 6) / amax. An amax of
    0 gives 1."""
    a = amax.to(torch.float64)
    safe = torch.where(a > 0, a, torch.full_like(a, NVFP4_RANGE))
    s = safe / NVFP4_RANGE if convention == "multiply" else NVFP4_RANGE / safe
    return s.to(torch.float32)


def nvfp4_multiplier(stored: torch.Tensor, convention: str) -> torch.Tensor:
    """float64 factor w = e2m1 * block scale * factor of a stored global scale."""
    s = stored.to(torch.float64)
    return s if convention == "multiply" else 1.0 / s


def quantize_nvfp4(w: torch.Tensor, shards: int, convention: str) -> CanonicalLinear:
    """NVFP4 with the producing tools' rule (ModelOpt NVFP4QTensor, compressed-tensors
    TENSOR_GROUP): per shard (`shards` equal row blocks: 2 for a gated w13, w1 and w3 each
    their own) a global factor G = the stored fp32 global scale read by `convention`
    (amax / (448 * 6) either way); per 16 along in a block scale
    bs = e4m3(block_amax / (6 G)), 0 -> 1; codes e2m1(w / (bs G)) (RNE, saturating at 6).
    Returns codes (e2m1 values), scales bs [E, out, in/16], block (1, 16), global [E, out]."""
    w = w.to(torch.float64)
    E, n_out, _ = w.shape
    amax = w.abs().view(E, shards, -1).amax(-1)  # [E, shards]
    g = nvfp4_multiplier(nvfp4_global_scale(amax, convention), convention)
    g_rows = g.repeat_interleave(n_out // shards, dim=1)  # [E, out]
    block_amax = _groups(w, NVFP4_BLOCK).abs().amax(-1)  # [E, out, in/16]
    bs = round_to_e4m3(block_amax / (F4E2M1_MAX * g_rows.unsqueeze(-1)))
    bs = torch.where(bs > 0, bs, torch.ones_like(bs))
    step = (bs * g_rows.unsqueeze(-1)).repeat_interleave(NVFP4_BLOCK, dim=2)
    codes = round_to_e2m1(w / step)
    return CanonicalLinear(codes=codes, scales=bs, block=(1, NVFP4_BLOCK), global_scale=g_rows)


# --- activation quantize-dequantize (q1, q2) --------------------------------------------------
# element "int8": codes clamp(round(x / s), -128, 127); "e4m3": the E4M3 value nearest x / s
# (ties to even, saturating at +-448, elements.round_to_e4m3). Dynamic scales are
# s = amax / ACT_ELEMENT_MAX[element] (127 or 448) over the unit: a row, a 1 x 128 group of a
# row, or the whole input.

def qdq_scaled(x: torch.Tensor, den: torch.Tensor, element: str = "int8", num: float = 1.0,
               pow2: bool = False) -> torch.Tensor:
    """The element's code of the ratio x * num / den, times the scale s = den / num; den = 0
    gives 0. Dynamic scales pass den = amax, num = 127 or 448, so that the code is one
    rounding of the exact ratio (x * num is exact for act-dtype inputs): x = 3/8 amax is the
    e4m3 tie 168 and goes to even (160), where x / fl(amax / 448) lands on either side.
    pow2: s rounded up to a power of two, 2^ceil(log2(den / num)) (DeepGEMM's UE8M0 scales),
    the code the element's rounding of x / s (exact: s is a power of two)."""
    safe = torch.where(den > 0, den, torch.ones_like(den))
    if pow2:
        s = torch.exp2(torch.ceil(torch.log2(safe / num)))
        return torch.where(den > 0, round_codes(x / s, element) * s, torch.zeros_like(x))
    q = round_codes(x * num / safe, element)
    return torch.where(den > 0, q * (safe / num), torch.zeros_like(x))


def qdq_per_token(x: torch.Tensor, element: str = "int8", half_away: bool = False,
                  fp8_float32: bool = False) -> torch.Tensor:
    """Dynamic per token: s = max|x_row| / (127 or 448). half_away (int8): the code computed
    as a float32 kernel does, x * fl(127 / amax) in float32, rounded half away from zero,
    where the exact ratio rounds half to even (the two differ at the ratio's exact ties, which
    16-bit inputs make common). fp8_float32 (e4m3): the code of x / s in float32 with
    s = fl(amax / 448), at least E4M3_TOKEN_SCALE_FLOOR (`qdq_e4m3_float32`)."""
    amax = x.abs().amax(-1, keepdim=True)
    if fp8_float32 and element == "e4m3":
        s = torch.clamp(_fl32(amax / ACT_ELEMENT_MAX[element]), min=E4M3_TOKEN_SCALE_FLOOR)
        return qdq_e4m3_float32(x, s, reciprocal=False)
    if not (half_away and element == "int8"):
        return qdq_scaled(x, amax, element, ACT_ELEMENT_MAX[element])
    num = ACT_ELEMENT_MAX[element]
    safe = torch.where(amax > 0, amax, torch.ones_like(amax))
    ratio = x.to(torch.float32) * (num / safe.to(torch.float32))
    codes = (torch.sign(ratio) * torch.floor(ratio.abs() + 0.5)).clamp(-128, 127)
    return torch.where(amax > 0, codes.to(torch.float64) * (safe / num), torch.zeros_like(x))


def qdq_per_group(x: torch.Tensor, element: str, group: int = ACT_GROUP,
                  pow2: bool = False) -> torch.Tensor:
    """Dynamic per token and group of `group` columns along the last dimension (DeepSeek's
    1 x 128): s = max|x[row, group]| / (127 or 448) (pow2: rounded up to a power of two,
    `qdq_scaled`); a last group of cols % group columns holds those columns."""
    cols = x.shape[-1]
    padded = torch.nn.functional.pad(x, (0, -cols % group))  # zeros leave each amax as is
    blocks = padded.unflatten(-1, (-1, group))
    amax = blocks.abs().amax(-1, keepdim=True)
    return qdq_scaled(blocks, amax, element, ACT_ELEMENT_MAX[element],
                      pow2).flatten(-2)[..., :cols]


def qdq_per_tensor(x: torch.Tensor, scale: torch.Tensor | float | None = None,
                   element: str = "int8", fp8_float32: bool = False) -> torch.Tensor:
    """Static (given scale) or dynamic (s = max|x| / (127 or 448) over the whole input) per
    tensor. fp8_float32 (e4m3): the code of x * fl(1 / s) in float32, a dynamic
    s = fl(amax / 448) (`qdq_e4m3_float32`)."""
    if x.numel() == 0:
        return x  # no tokens: nothing to scale (and amax of nothing is undefined)
    if fp8_float32 and element == "e4m3":
        s = (_fl32(x.abs().amax() / ACT_ELEMENT_MAX[element]) if scale is None
             else torch.as_tensor(scale, dtype=torch.float64).to(x.device))
        return qdq_e4m3_float32(x, s, reciprocal=True)
    if scale is None:
        return qdq_scaled(x, x.abs().amax(), element, ACT_ELEMENT_MAX[element])
    return qdq_scaled(x, torch.as_tensor(scale, dtype=x.dtype).to(x.device), element)


# vLLM's per-token fp8 quantizer floors its scale (csrc/quantization/w8a8/fp8/common.cu,
# min_scaling_factor of e4m3): 1 / (448 * 512)
E4M3_TOKEN_SCALE_FLOOR = 1.0 / (448.0 * 512.0)


def qdq_e4m3_float32(x: torch.Tensor, s: torch.Tensor, reciprocal: bool) -> torch.Tensor:
    """E4M3 activations as vLLM's CUDA quantizers compute them from a float32 scale s (a
    float32 value, held in float64): the ratio in float32, x * fl(1 / s) (reciprocal: its
    per-tensor kernels, dynamic and static) or x / s (its per-token kernel), clamped to
    +-448 and rounded to the nearest E4M3 (ties to even); the code times s. The exact ratio
    x * 448 / amax lands on a tie (3/8 amax is 168, between 160 and 176) where the float32
    one may land on either side. s = 0 (a zero input) gives 0."""
    s32 = s.to(torch.float32)
    safe = torch.where(s32 > 0, s32, torch.ones_like(s32))
    x32 = x.to(torch.float32)  # exact: the inputs are 16-bit values
    ratio = x32 * (1.0 / safe) if reciprocal else x32 / safe
    codes = round_to_e4m3(ratio.to(torch.float64).clamp(-F8E4M3_MAX, F8E4M3_MAX))
    return torch.where(s32 > 0, codes * safe.to(torch.float64), torch.zeros_like(x))


def qdq_mx(x: torch.Tensor, rule: str, element: str) -> torch.Tensor:
    """MX activations (MXFP8: element e4m3, MXFP4: e2m1): per 32 along the last dimension an
    E8M0 scale 2^e by `rule` from the block's amax and the element's emax (OCP MX v1.0
    section 6.3 for "floor"), elements x / 2^e rounded to nearest even, saturating at the
    element's largest value (e4m3 448, e2m1 6: section 5.3 conversions saturate)."""
    blocks = x.unflatten(-1, (-1, MX_BLOCK))
    scale = mx_scale(mx_scale_exponent(blocks.abs().amax(-1, keepdim=True), rule, element))
    return (round_to(blocks / scale, element, "rne") * scale).flatten(-2)


def qdq_mxfp8(x: torch.Tensor, rule: str) -> torch.Tensor:
    """MXFP8 activations: per 32 along the last dimension, E8M0 scale by `rule`, E4M3 RNE."""
    return qdq_mx(x, rule, "e4m3")


def _fl32(t: torch.Tensor) -> torch.Tensor:
    """float64 values rounded to float32 and back: one float32 operation's result when `t` is
    the float64 result of +, -, * or / on float32 values (binary64 holds every such exact
    product, and rounding a quotient twice, to binary64 then binary32, is innocuous)."""
    return t.to(torch.float32).to(torch.float64)


def nvfp4_activation_scales(stored: torch.Tensor, convention: str
                            ) -> tuple[torch.Tensor, torch.Tensor]:
    """(g, alpha) of NVFP4 activations from the stored static input scales of one GEMM (every
    expert, w1 / w3 shards included), read by the record's `global_scale` convention as
    engines read them at load time (vLLM's ModelOpt and compressed-tensors NVFP4 MoE):

        "multiply" (ModelOpt input_scale s = amax / (6 * 448)):
            g = fp32(1 / max s)          the quantizer's global scale (an fp32 tensor)
            alpha = max s                what the GEMM's fp32 output is multiplied by
        "divide" (compressed-tensors input_global_scale g = 6 * 448 / amax):
            g = min g (as stored)        alpha = 1 / g

    Both are the largest of the experts' input scales (the engines collapse them to one)."""
    s = stored.to(torch.float64)
    if convention == "multiply":
        top = s.max()
        return _fl32(1.0 / top), top
    g = s.min()
    return g, 1.0 / g


def qdq_nvfp4(x: torch.Tensor, global_scale: torch.Tensor | float,
              alpha: torch.Tensor | float | None = None) -> torch.Tensor:
    """NVFP4 activations with global scale g (`nvfp4_activation_scales`), per 16 along the
    last dimension, in the engines' float32 arithmetic (vLLM / FlashInfer `scaled_fp4_quant`,
    each step one float32 rounding `_fl32`; the reciprocals as IEEE division):

        bs     = e4m3(fp32(g * fp32(amax * fp32(1 / 6))))     (RNE, saturating at 448)
        factor = fp32(1 / fp32(bs * fp32(1 / g)))              (0 where bs is 0)
        code   = e2m1(fp32(x * factor))                        (RNE, saturating at 6)
        value  = code * bs * alpha                             (alpha default 1 / g)

    Why float32 and not float64: a static input scale is an fp32 rounding of amax / 2688
    (ModelOpt), and x * g / bs of act-dtype x often is, exactly, an e2m1 or e4m3 tie; the
    engines' float32 steps round the scale's storage error away and land on the tie (which
    goes to even) where a float64 quotient lands on either side of it, by the sign of that
    error (docs/checkpoints.md, "NVFP4 activations: ties")."""
    g = _fl32(torch.as_tensor(global_scale, dtype=torch.float64, device=x.device))
    a = 1.0 / g if alpha is None else torch.as_tensor(alpha, dtype=torch.float64,
                                                      device=x.device)
    blocks = _fl32(x.to(torch.float64)).unflatten(-1, (-1, NVFP4_BLOCK))
    amax = blocks.abs().amax(-1, keepdim=True)
    bs = round_to_e4m3(_fl32(g * _fl32(amax * _fl32(torch.tensor(1.0 / F4E2M1_MAX,
                                                                  dtype=torch.float64)))))
    safe = torch.where(bs > 0, bs, torch.ones_like(bs))
    factor = torch.where(bs > 0, _fl32(1.0 / _fl32(safe * _fl32(1.0 / g))),
                         torch.zeros_like(bs))
    q = round_to_e2m1(_fl32(blocks * factor))
    return (q * bs * a).flatten(-2)
