"""Torch activations between the two GEMMs and the activation quantize-dequantize modes
(q1 before GEMM1, q2 before GEMM2), for the backends' torch-side steps.

Activations take GEMM1's output h [rows, w13_rows] and return [rows, N]:
    silu, gelu (exact erf)  act(h[:, :N]) * h[:, N:]
    swigluoai               gate = h[:, 0::2], up = h[:, 1::2] (gpt-oss interleave)
    swigluoai-split         gate = h[:, :N], up = h[:, N:]
        g = min(gate, 7), u = clamp(up, -7, 7), (u + 1) * g * sigmoid(1.702 g)
    relu2                   relu(h)^2 on all N rows

Quantize-dequantize modes, on float32 [rows, cols], to the scheme's activation element
(int8: top = 127, e4m3: top = 448):
    none            identity
    dynamic-token   s = amax(|row|) / top
    dynamic-group   s = amax(|row[128 columns]|) / top per token and 1 x 128 group along cols
                    (a last group of cols % 128 columns holds those)
    dynamic-tensor  s = amax(|t|) / top over the whole input
    static-tensor   s given (one scale for every expert)
    mxfp8           per 32 columns an E8M0 scale 2^e (rule floor / even / ceil / rceil), E4M3
                    elements rounded to nearest even, saturating at 448
    mxfp4           the same with E2M1 elements (emax 2), saturating at 6
    nvfp4           the quantizer's global scale g and the GEMM's multiplier alpha (convert.py
                    reads both from the input scales by the record's convention): per 16
                    columns an e4m3 block scale bs = e4m3(g * (amax * (1/6))) (saturating
                    at 448), elements e2m1 (nearest even, saturating at 6) of
                    x * (1 / (bs * (1/g))), times bs * alpha; float32 in vLLM's order
int8 rounding is half to even (torch.round), codes clamped to [-128, 127]; e4m3 is the cast
of t / s clamped to +-448 (round to nearest even, saturating).
"""

from __future__ import annotations

import torch
from moecert.reference.schemes import (
    ACT_DYNAMIC_GROUP,
    ACT_DYNAMIC_TENSOR,
    ACT_DYNAMIC_TOKEN,
    ACT_ELEMENT_MAX,
    ACT_GROUP,
    ACT_NONE,
    ACT_NVFP4,
    ACT_STATIC_TENSOR,
    E8M0_BIAS,
    F4E2M1_MAX,
    F8E4M3_MAX,
    INT8_MAX,
    INT8_MIN,
    MX_ACTIVATION_ELEMENTS,
    MX_BLOCK,
    NVFP4_BLOCK,
    SWIGLUOAI_ALPHA,
    SWIGLUOAI_LIMIT,
)
from moecert.reference.schemes.elements import ELEMENTS, MxScaleRule

from .codecs import pow2


def swigluoai(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    g = gate.clamp(max=SWIGLUOAI_LIMIT)
    u = up.clamp(-SWIGLUOAI_LIMIT, SWIGLUOAI_LIMIT)
    return (u + 1) * g * torch.sigmoid(SWIGLUOAI_ALPHA * g)


def apply_activation(h: torch.Tensor, activation: str) -> torch.Tensor:
    """act(h) for GEMM1's output h [rows, w13_rows] (see the module docstring)."""
    if activation == "relu2":
        return torch.relu(h).square()
    if activation == "swigluoai":
        return swigluoai(h[:, 0::2], h[:, 1::2])
    n = h.shape[-1] // 2
    gate, up = h[:, :n], h[:, n:]
    if activation == "swigluoai-split":
        return swigluoai(gate, up)
    if activation == "silu":
        return torch.nn.functional.silu(gate) * up
    if activation == "gelu":
        return torch.nn.functional.gelu(gate, approximate="none") * up
    raise ValueError(f"unknown activation {activation!r}")


# --- activation quantization ----------------------------------------------------------------

def quantize_scaled(t: torch.Tensor, den: torch.Tensor, element: str = "int8",
                    num: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """(codes, step) with codes * step the quantize-dequantize of t: codes (float32 holding
    the element's values) of t * num / den, broadcast against t, 0 where den = 0; step =
    den / num (1 / num where den = 0). Dynamic modes pass den = amax, num = 127 or 448: t *
    num is exact in float32 for bf16/fp16 values, so the code is one rounding of the exact
    ratio (a true tie, t = 3/8 of the amax for e4m3, goes to even). int8: clamp(round(.),
    -128, 127); e4m3: the cast of the ratio clamped to +-448."""
    positive = den > 0
    safe = torch.where(positive, den, torch.ones_like(den))
    v = t * num / safe
    if element == "int8":
        q = torch.round(v).clamp(INT8_MIN, INT8_MAX)
    elif element == "e4m3":
        q = v.clamp(-F8E4M3_MAX, F8E4M3_MAX).to(torch.float8_e4m3fn).to(torch.float32)
    else:
        raise ValueError(f"unknown activation element {element!r}")
    return torch.where(positive, q, torch.zeros_like(q)), safe / num


def qdq_scaled(t: torch.Tensor, den: torch.Tensor, element: str = "int8", num: float = 1.0
               ) -> torch.Tensor:
    """The element's code of t * num / den times s = den / num (`quantize_scaled`)."""
    q, step = quantize_scaled(t, den, element, num)
    return q * step


def quantize_rows(t: torch.Tensor, mode: str, static_scale: torch.Tensor | None,
                  element: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The row-wise modes' (codes [rows, cols], float32 scale per row [rows]) of float32 `t`
    [rows, cols]: dynamic-token (s = amax(|row|) / top) or static-tensor (s given, one for
    every row); codes * scale[:, None] is `quantize_activation`'s result."""
    if mode == ACT_DYNAMIC_TOKEN:
        q, step = quantize_scaled(t, t.abs().amax(-1, keepdim=True), element,
                                  ACT_ELEMENT_MAX[element])
    elif mode == ACT_STATIC_TENSOR:
        q, step = quantize_scaled(t, static_scale.to(torch.float32).reshape(1, 1), element)
    else:
        raise ValueError(f"activation quantization {mode!r} has no scale per row")
    return q, step.expand(t.shape[0], 1).reshape(-1)


def qdq_groups(t: torch.Tensor, element: str, group: int = ACT_GROUP) -> torch.Tensor:
    """Per token and group of `group` columns: s = amax / top of each (row, group)."""
    cols = t.shape[-1]
    blocks = torch.nn.functional.pad(t, (0, -cols % group)).unflatten(-1, (-1, group))
    amax = blocks.abs().amax(-1, keepdim=True)
    return qdq_scaled(blocks, amax, element, ACT_ELEMENT_MAX[element]).flatten(-2)[..., :cols]


def _floor_log2(a: torch.Tensor) -> torch.Tensor:
    """floor(log2 a) for a > 0, exactly, from the binary exponent."""
    _, exp = torch.frexp(a)
    return exp - 1


def _ceil_log2(a: torch.Tensor) -> torch.Tensor:
    mantissa, exp = torch.frexp(a)
    return torch.where(mantissa == 0.5, exp - 1, exp)


def mx_exponent(amax: torch.Tensor, rule: str, element: str = "e4m3") -> torch.Tensor:
    """Unbiased E8M0 exponent (int32) of blocks with absolute maximum amax (float32 >= 0)
    for MX elements of `element` (largest value max = 1.x * 2^emax: e4m3 448 = 1.75 * 2^8,
    e2m1 6 = 1.5 * 2^2).

    floor: floor(log2 amax) - emax (OCP);  even: amax rounded to the element's mantissa bits
    first;  ceil: ceil(log2 amax) - emax;  rceil: ceil(log2(amax / max)), from the rule's
    declared fields (`schemes.elements.MxScaleRule`). amax = 0 gives -127; clamped to
    [-127, 127].
    """
    rule, el = MxScaleRule.of(rule), ELEMENTS[element]
    safe = torch.where(amax > 0, amax, torch.ones_like(amax))
    if rule.rounds_to_mantissa:
        ulp = pow2(_floor_log2(safe) - el.mantissa_bits)
        safe = torch.round(safe / ulp) * ulp
    log2 = _ceil_log2 if rule.ceil else _floor_log2
    exp = log2(safe / el.max) if rule.of_max else log2(safe) - el.emax
    exp = torch.where(amax > 0, exp, torch.full_like(exp, -E8M0_BIAS))
    return exp.clamp(-E8M0_BIAS, E8M0_BIAS)


def _round_mx_element(v: torch.Tensor, element: str) -> torch.Tensor:
    """v rounded to nearest even on `element`'s grid, saturating at its largest value: e4m3
    through torch's cast (which rounds to nearest even), e2m1 by `round_e2m1`."""
    if element == "e2m1":
        return round_e2m1(v)
    return v.clamp(-F8E4M3_MAX, F8E4M3_MAX).to(torch.float8_e4m3fn).to(torch.float32)


def qdq_mx(t: torch.Tensor, rule: str, element: str) -> torch.Tensor:
    """MX quantize-dequantize along the last dimension (a multiple of 32): MXFP8 (element
    e4m3) or MXFP4 (e2m1) activations."""
    blocks = t.unflatten(-1, (-1, MX_BLOCK))
    amax = blocks.abs().amax(-1, keepdim=True)
    scale = pow2(mx_exponent(torch.nan_to_num(amax, nan=0.0, posinf=0.0), rule, element))
    # values past the element's largest saturate, as the OCP conversion does
    out = _round_mx_element(blocks / scale, element) * scale
    # a non-finite block maximum makes the scale NaN (E8M0 0xFF): the whole block is NaN
    out = torch.where(torch.isfinite(amax), out, torch.full_like(out, torch.nan))
    return out.flatten(-2)


def qdq_mxfp8(t: torch.Tensor, rule: str) -> torch.Tensor:
    """MXFP8 quantize-dequantize along the last dimension (a multiple of 32)."""
    return qdq_mx(t, rule, "e4m3")


def round_e2m1(v: torch.Tensor) -> torch.Tensor:
    """Nearest e2m1 value (0, 0.5, 1, 1.5, 2, 3, 4, 6), ties to even, saturating at 6: the
    grid is 0.5 below 2, 1 below 4, 2 above, and torch.round ties to even on each."""
    mag = v.abs().clamp(max=F4E2M1_MAX)
    q = torch.where(mag < 2, torch.round(mag * 2) / 2,
                    torch.where(mag < 4, torch.round(mag), torch.round(mag / 2) * 2))
    return torch.copysign(q, v)


def quantize_nvfp4(t: torch.Tensor, global_scale: torch.Tensor):
    """NVFP4 activations along the last dimension (a multiple of 16) with the quantizer's
    global scale g (float32 [1], convert.py's `a13_global` / `a2_global`), in the order of
    vLLM's / FlashInfer's `scaled_fp4_quant`, float32 throughout: bs = e4m3(g * (amax *
    (1/6))), factor = 1 / (bs * (1/g)), codes e2m1(t * factor). Returns (e2m1 values
    [..., cols/16, 16], e4m3 block scales bs as float32 [..., cols/16, 1]); the value is
    e2m1 * bs * alpha (alpha: the GEMM's multiplier, `a13_scale` / `a2_scale`)."""
    g = global_scale.to(torch.float32)
    blocks = t.to(torch.float32).unflatten(-1, (-1, NVFP4_BLOCK))
    amax = blocks.abs().amax(-1, keepdim=True)
    sixth = torch.tensor(1.0 / F4E2M1_MAX, dtype=torch.float32, device=t.device)
    bs = (g * (amax * sixth)).clamp(max=F8E4M3_MAX).to(torch.float8_e4m3fn).to(torch.float32)
    safe = torch.where(bs > 0, bs, torch.ones_like(bs))
    factor = torch.where(bs > 0, 1.0 / (safe * (1.0 / g)), torch.zeros_like(bs))
    return round_e2m1(blocks * factor), bs


def qdq_nvfp4(t: torch.Tensor, global_scale: torch.Tensor, alpha: torch.Tensor
              ) -> torch.Tensor:
    """NVFP4 quantize-dequantize along the last dimension (a multiple of 16): codes and block
    scales from `quantize_nvfp4` with global scale g, times bs * alpha."""
    q, bs = quantize_nvfp4(t, global_scale)
    return (q * (bs * alpha.to(torch.float32))).flatten(-2)


def quantize_activation(t: torch.Tensor, mode: str, static_scale: torch.Tensor | None = None,
                        mx_rule: str = "floor", element: str = "int8",
                        global_scale: torch.Tensor | None = None) -> torch.Tensor:
    """q1 / q2: the mode's quantize-dequantize of float32 `t` [rows, cols] to `element`
    (the scheme's activation_element) for the scaled modes; NVFP4 takes the quantizer's
    `global_scale` g and `static_scale` as the GEMM's multiplier alpha."""
    if mode == ACT_NONE:
        return t
    if mode in (ACT_DYNAMIC_TOKEN, ACT_STATIC_TENSOR):
        q, scale = quantize_rows(t, mode, static_scale, element)
        return q * scale.unsqueeze(-1)
    if mode == ACT_DYNAMIC_GROUP:
        return qdq_groups(t, element)
    if mode == ACT_DYNAMIC_TENSOR:
        if t.numel() == 0:
            return t
        return qdq_scaled(t, t.abs().amax(), element, ACT_ELEMENT_MAX[element])
    if mode in MX_ACTIVATION_ELEMENTS:
        return qdq_mx(t, mx_rule, MX_ACTIVATION_ELEMENTS[mode])
    if mode == ACT_NVFP4:
        if global_scale is None:
            raise ValueError("NVFP4 activations need the quantizer's global scale")
        return qdq_nvfp4(t, global_scale, static_scale)
    raise ValueError(f"unknown activation quantization mode {mode!r}")


__all__ = ["apply_activation", "mx_exponent", "qdq_groups", "qdq_mx", "qdq_mxfp8", "qdq_nvfp4",
           "qdq_scaled", "quantize_activation", "quantize_nvfp4", "quantize_rows",
           "quantize_scaled", "round_e2m1"]
