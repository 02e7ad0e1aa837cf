"""The exact tier's audit: every condition under which all correct backends agree bit for bit
with the reference (the package docstring says why each holds), re-derived from a structure's
packed tensors through the reference's dequantization, not from the design values."""

from __future__ import annotations

import torch
from moecert.reference import Checkpoint, MoEProblem, dequantize
from moecert.reference.activations import apply_activation
from moecert.reference.moe import quantize_activation, round_to_activation_dtype
from moecert.reference.schemes import (
    ACT_DYNAMIC_TENSOR,
    ACT_DYNAMIC_TOKEN,
    ACT_STATIC_TENSOR,
    INT8_MAX,
)
from moecert.reference.schemes.tensors import input_scale_name

from .encoding import lowbit
from .structured import Structured

GATE_FLOOR = {"silu": 32.0, "gelu": 32.0, "swigluoai": 7.0, "swigluoai-split": 7.0}
FP32_BITS = 24
# A transcendental activation computed in fp32 is within ~2^-20 of its value (GPU fast exp
# included); its ideal value must round the same when moved by this much more.
ACT_MARGIN = 2.0**-16
AUDIT_MAX_ELEMENTS = 1 << 26  # float64 weights beyond this are not re-derived (memory)


def audit(s: Structured, P: MoEProblem, device) -> list[str]:
    """`exactness_violations` of `s`, run on `device`; none where the problem's float64
    weights would pass AUDIT_MAX_ELEMENTS (not re-derived: memory)."""
    if _audit_size(P) > AUDIT_MAX_ELEMENTS:
        return []
    return exactness_violations(_structured_to(s, device), P)


def _structured_to(s: Structured, device) -> Structured:
    def move(t):
        return None if t is None else t.to(device)
    return type(s)(s.checkpoint.to(device), move(s.x), move(s.topk_weights),
                      move(s.topk_ids), move(s.expert_num_tokens))


def _audit_size(P: MoEProblem) -> int:
    return P.E * (P.w13_rows * P.K + P.K * P.N)


def exactness_violations(s: Structured, problem: MoEProblem) -> list[str]:
    """Every condition under which all correct backends agree bit for bit, re-derived from the
    checkpoint's packed tensors (through the reference's dequantization) and the inputs; the
    list of those that fail (empty: the structure is exact).

    Sums: every GEMM output's terms (products and bias), the routed sum's terms (r * y) are
    fp32 values on a common grid whose total stays below 2^24 grid steps, so any order sums
    them exactly. Quantization units: int8 dynamic amax = 127 * 2^p, static scales powers of
    two. Activations: gates in the exact regime, ideal outputs robust to a 2^-16 relative
    error before rounding; relu2's h^2 exact in fp32."""
    P, ckpt = problem, s.checkpoint
    W = dequantize(ckpt)
    out: list[str] = []
    X, token, expert, weight, units = _audit_inputs(s, P, out)
    _check_units(ckpt, X[units], "q1 input", out)
    xq = torch.zeros_like(X)
    if units.any():
        xq[units] = quantize_activation(ckpt, X[units], "w13")
    h = _checked_gemm(xq[token], W["w13"], expert, W.get("w13_bias"), "GEMM1", out)
    hr = round_to_activation_dtype(h, P)
    a = _checked_activation(hr, P, out)
    _check_units(ckpt, a, "q2 input", out)
    aq = quantize_activation(ckpt, a, "w2") if a.numel() else a
    y = _checked_gemm(aq, W["w2"], expert, W.get("w2_bias"), "GEMM2", out)
    _check_activation_dtype(y, P, "expert output (GEMM2 + bias)", out)
    routed = weight.unsqueeze(1) * y
    _check_fp32(routed, "router weight * expert output", out)
    rows = s.x.shape[0] if P.activation_format == "standard" else X.shape[0]
    terms = torch.zeros(rows, max(1, int(torch.bincount(token, minlength=1).max()) if
                                  token.numel() else 1), P.K, dtype=torch.float64,
                        device=X.device)
    slot = _slot_of(token.cpu()).to(X.device)
    terms[token, slot] = routed
    _check_sum(terms.transpose(1, 2), "routed sum", out)
    return out


def _slot_of(token: torch.Tensor) -> torch.Tensor:
    """Position of each assignment among those of its token."""
    slot = torch.zeros_like(token)
    seen: dict[int, int] = {}
    for i, t in enumerate(token.tolist()):
        slot[i] = seen.get(t, 0)
        seen[t] = slot[i].item() + 1
    return slot


def _audit_inputs(s: Structured, P: MoEProblem, out: list[str]):
    """(q1 input X [rows, K] float64, token, local expert, router weight per kept assignment,
    rows the reference quantizes)."""
    if P.activation_format == "batched":
        E, T, K = s.x.shape
        X = s.x.to(torch.float64).reshape(E * T, K)
        valid = (torch.arange(T, device=X.device)
                 < s.expert_num_tokens.to(torch.int64).unsqueeze(1)).flatten()
        rows = torch.arange(E * T, device=X.device)[valid]
        return X, rows, rows // T, X.new_ones(rows.numel()), valid
    X = s.x.to(torch.float64)
    r = s.topk_weights.to(torch.float64)
    if P.apply_router_weight_on_input:
        _check_fp32(X * r, "x * router weight", out)
        X, r = round_to_activation_dtype(X * r, P), torch.ones_like(r)
    ids = s.topk_ids.to(torch.int64)
    if P.expert_map is not None:
        ids = torch.tensor(P.expert_map, dtype=torch.int64, device=ids.device)[ids]
    token = torch.arange(P.M, device=X.device).repeat_interleave(P.topk)
    local, weight = ids.flatten(), r.flatten()
    keep = local >= 0
    return X, token[keep], local[keep], weight[keep], torch.ones(P.M, dtype=torch.bool,
                                                                   device=X.device)


def _checked_gemm(inp, W, expert, bias, what, out) -> torch.Tensor:
    """inp [A, in] times the expert's W [out, in] plus bias, with every term checked. Zero
    weights contribute exact zeros and are left out: terms [A, out, non-zeros (+ bias)]."""
    nonzero = W != 0
    nnz = max(1, int(nonzero.sum(-1).max())) if W.numel() else 1
    cols = torch.topk(nonzero.to(torch.int8), nnz, dim=-1, sorted=False).indices
    values = torch.gather(W, 2, cols)  # [E, out, nnz], zeros where a row has fewer
    A = inp.shape[0]
    terms = inp[torch.arange(A, device=inp.device).view(A, 1, 1), cols[expert]] * values[expert]
    if bias is not None:
        terms = torch.cat([terms, bias[expert].unsqueeze(2)], dim=2)
    _check_fp32(terms, f"{what} products", out)
    _check_sum(terms, f"{what} sums", out)
    return terms.sum(2)


def _check_fp32(t: torch.Tensor, what: str, out: list[str]) -> None:
    bad = t.to(torch.float32).to(torch.float64) != t
    if bad.any():
        i = tuple(bad.nonzero()[0].tolist())
        out.append(f"{what}: {int(bad.sum())} values not exact in fp32 (e.g. {t[i].item()!r} "
                   f"at {list(i)})")


def _check_activation_dtype(t: torch.Tensor, P: MoEProblem, what: str, out: list[str]) -> None:
    """Values a backend may round to the activation dtype (vLLM's fused MoE keeps each
    assignment's output in a bf16/fp16 cache before the top-k sum): that rounding must not
    change them."""
    bad = round_to_activation_dtype(t, P) != t
    if bad.any():
        i = tuple(bad.nonzero()[0].tolist())
        out.append(f"{what}: {int(bad.sum())} values not exact in the activation dtype "
                   f"{P.dtype} (e.g. {t[i].item()!r} at {list(i)})")


def _check_sum(terms: torch.Tensor, what: str, out: list[str]) -> None:
    """terms [..., n]: every partial sum, in any order, exact in fp32."""
    if terms.numel() == 0:
        return
    unit = lowbit(terms).amin(-1)
    total = terms.abs().sum(-1)
    bad = torch.isfinite(unit) & (total / torch.where(torch.isfinite(unit), unit, 1.0)
                                  >= 2.0**FP32_BITS)
    if bad.any():
        out.append(f"{what}: {int(bad.sum())} outputs whose terms span more than 2^24 steps")


def _checked_activation(hr: torch.Tensor, P: MoEProblem, out: list[str]) -> torch.Tensor:
    if not torch.isfinite(hr).all():
        out.append("GEMM1 output overflows the activation dtype")
    ideal = apply_activation(hr, P.activation)
    if P.activation == "relu2":
        _check_fp32(ideal, "relu2 h^2", out)
    else:
        gate = hr[..., 0::2] if P.activation == "swigluoai" else hr[..., : P.N]
        floor = GATE_FLOOR[P.activation]
        bad = (gate != 0) & (gate < floor)
        if bad.any():
            out.append(f"{int(bad.sum())} gates outside {{0}} u [{floor}, inf) "
                       f"(e.g. {gate[bad][0].item()})")
        r = round_to_activation_dtype(ideal, P)
        for f in (1 + ACT_MARGIN, 1 - ACT_MARGIN):
            moved = round_to_activation_dtype(ideal * f, P) != r
            if moved.any():
                out.append(f"{int(moved.sum())} activation outputs within 2^-16 of a rounding "
                           f"boundary (e.g. {ideal[moved][0].item()!r})")
                break
    a = round_to_activation_dtype(ideal, P)
    if not torch.isfinite(a).all():
        out.append("activation output overflows the activation dtype")
    return a


def _check_units(ckpt: Checkpoint, t: torch.Tensor, what: str, out: list[str]) -> None:
    """int8 quantization units whose scale is not exact in fp32."""
    mode = ckpt.activation
    if mode == ACT_DYNAMIC_TOKEN:
        amax = t.abs().amax(-1) if t.numel() else t.new_zeros(0)
    elif mode == ACT_DYNAMIC_TENSOR:
        amax = t.abs().amax().reshape(1) if t.numel() else t.new_zeros(0)
    elif mode == ACT_STATIC_TENSOR:
        name = input_scale_name(ckpt, "w13" if what.startswith("q1") else "w2")
        scale = ckpt.tensors[name].to(torch.float64).max()
        if not _is_pow2(scale.reshape(1)).all():
            out.append(f"{name} max {scale.item()} is not a power of two")
        return
    else:
        return
    bad = (amax != 0) & ~_is_pow2(amax / INT8_MAX)
    if bad.any():
        out.append(f"{what}: {int(bad.sum())} int8 units whose amax is not 127 * 2^p "
                   f"(e.g. {amax[bad][0].item()})")


def _is_pow2(v: torch.Tensor) -> torch.Tensor:
    mant = torch.frexp(v.to(torch.float64))[0]
    return mant.abs() == 0.5
