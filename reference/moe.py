"""`moe`: the MoE layer in float64, SPEC section 2.

    h_e = q1(x) W13_e^T + b13_e     a_e = act(h_e)     y_e = q2(a_e) W2_e^T + b2_e
    y   = sum_e r_e y_e

h and a are rounded to the activation dtype (a kernel writes both in bf16/fp16) before q2;
the w2 bias sits inside the routed sum (a reading with `bias_after_rounding`, gpt-oss's own
definition, rounds each product before its bias is added and the sum again; one with
`sum_in_activation_dtype` accumulates the routed sum in the activation dtype, expert by
expert); with apply_router_weight_on_input x is scaled by r (and rounded to the activation
dtype) before q1 and the output is not weighted (a reading with
`router_weight_on_gemm1_output` multiplies GEMM1's product by r instead, before its bias and
rounding: equal to (r x) W + b in exact arithmetic); experts that
expert_map sends to -1 contribute nothing.

Vectorized over tokens; the only Python loop is over experts, which are dequantized in
chunks so that a DeepSeek-V3-sized layer fits in memory.
"""

from __future__ import annotations

import itertools

import torch

from .activations import apply_activation
from .canonical import dequantize_canonical
from .checkpoint import Checkpoint
from .dequantize import read_biases, read_input_scale, read_pre_quant_scale
from .errors import CheckpointError
from .layouts import read_linear
from .layouts.check import check_tensors
from .problem import MoEProblem
from .quantize import (
    NVFP4_RANGE,
    nvfp4_activation_scales,
    qdq_mx,
    qdq_nvfp4,
    qdq_per_group,
    qdq_per_tensor,
    qdq_per_token,
)
from .schemes import (
    ACT_DYNAMIC_GROUP,
    ACT_DYNAMIC_TENSOR,
    ACT_DYNAMIC_TOKEN,
    ACT_ELEMENT_MAX,
    ACT_NONE,
    ACT_NVFP4,
    ACT_STATIC_TENSOR,
    MX_ACTIVATION_ELEMENTS,
    STATIC_INPUT_MODES,
)

# float64 weights dequantized at once; 64 MiB measured fastest on the CPU (2 cores: Qwen3-30B
# layer 2.8 s, against 3.5 s at 256 MiB and 5.5 s at 1 GiB), the buffer staying in reuse.
CHUNK_BYTES = 1 << 26


def round_to_activation_dtype(t: torch.Tensor, problem: MoEProblem) -> torch.Tensor:
    """Round float64 values to the problem's bf16/fp16 (RNE), back in float64."""
    return t.to(problem.torch_dtype).to(torch.float64)


def quantize_activation(ckpt: Checkpoint, t: torch.Tensor, which: str) -> torch.Tensor:
    """q1 (which="w13") or q2 (which="w2"): the scheme's activation quantize-dequantize.

    The scaled modes quantize to the scheme's activation element (int8 or e4m3). Static
    per-tensor scales are the maximum of the checkpoint's per-expert input scales, one scale
    for every expert, as engines collapse them at load time. NVFP4: the global scale and the
    GEMM's multiplier as the record's convention reads the stored scales
    (`nvfp4_activation_scales`), shards included.
    """
    mode = ckpt.activation
    element = ckpt.info.activation_element
    if mode == ACT_NONE:
        return t
    if mode == ACT_DYNAMIC_TOKEN:
        return qdq_per_token(t, element, half_away=ckpt.activation_round_half_away,
                             fp8_float32=ckpt.activation_fp8_float32)
    if mode == ACT_DYNAMIC_GROUP:
        return qdq_per_group(t, element, pow2=ckpt.activation_scale_pow2)
    if mode == ACT_DYNAMIC_TENSOR:
        return qdq_per_tensor(t, None, element, fp8_float32=ckpt.activation_fp8_float32)
    if mode == ACT_STATIC_TENSOR:
        return qdq_per_tensor(t, read_input_scale(ckpt, which).max(), element,
                              fp8_float32=ckpt.activation_fp8_float32)
    if mode in MX_ACTIVATION_ELEMENTS:  # MXFP8, MXFP4: E8M0 per 32 by the declared rule
        return qdq_mx(t, ckpt.mx_scale_rule, MX_ACTIVATION_ELEMENTS[mode])
    if mode == ACT_NVFP4:
        g, alpha = nvfp4_activation_scales(read_input_scale(ckpt, which),
                                           ckpt.record.global_scale)
        return qdq_nvfp4(t, g, alpha)
    raise CheckpointError("checkpoint.activation", "a known activation mode", repr(mode))


def calibrated_amax(ckpt: Checkpoint, which: str) -> float | None:
    """The largest input GEMM `which` ("w13" or "w2") was calibrated for, from the static
    input scales (None for a checkpoint without them): static per-tensor s * the element's
    largest value (int8 127, e4m3 448); NVFP4 the GEMM's multiplier alpha (the scales read by
    the record's convention, `nvfp4_activation_scales`) * 6 * 448. Inputs up to it use the
    scales as calibrated; beyond it the codes (NVFP4: block scales and codes) saturate."""
    mode = ckpt.activation
    if mode not in STATIC_INPUT_MODES:
        return None
    stored = read_input_scale(ckpt, which)
    if mode == ACT_NVFP4:
        return float(nvfp4_activation_scales(stored, ckpt.record.global_scale)[1]
                     * NVFP4_RANGE)
    return float(stored.max()) * ACT_ELEMENT_MAX[ckpt.info.activation_element]


def moe(ckpt: Checkpoint, x: torch.Tensor, topk_weights: torch.Tensor | None,
        topk_ids: torch.Tensor | None, problem: MoEProblem, *,
        expert_num_tokens: torch.Tensor | None = None, record: dict | None = None
        ) -> torch.Tensor:
    """float64 output of the MoE layer; `record` (a dict), where given, receives the largest
    magnitude of each GEMM's input before its activation quantization ("w13", "w2").

    standard format: x [M, K], topk_weights/topk_ids [M, topk] (global ids) -> [M, K].
    batched format:  x [E, T, K] with expert_num_tokens [E]; rows t >= count are ignored and
                     come back zero; no router weights (finalize applies them) -> [E, T, K].
    """
    check_tensors(ckpt, problem)
    if problem.activation_format == "batched":
        return _moe_batched(ckpt, x, expert_num_tokens, problem, record)
    M, K, topk = problem.M, problem.K, problem.topk
    _check_tensor("hidden_states", x, (M, K))
    _check_tensor("topk_ids", topk_ids, (M, topk))
    _check_tensor("topk_weights", topk_weights, (M, topk))
    ids = topk_ids.to(torch.int64)
    if ids.numel() and (ids.min() < 0 or ids.max() >= problem.global_num_experts):
        raise CheckpointError("topk_ids", f"ids in [0, {problem.global_num_experts})",
                              f"[{int(ids.min())}, {int(ids.max())}]")
    device = _device(ckpt)
    x64, r = x.to(device, torch.float64), topk_weights.to(device, torch.float64)
    ids = ids.to(device)
    gemm1_weight = None
    if problem.apply_router_weight_on_input and ckpt.router_weight_on_gemm1_output:
        gemm1_weight, r = r, torch.ones_like(r)  # h * r before h is rounded; x as it is
    elif problem.apply_router_weight_on_input:
        if ckpt.router_weight_in_activation_dtype:  # r cast to x's dtype, then x * r
            r = round_to_activation_dtype(r, problem)
        x64, r = round_to_activation_dtype(x64 * r, problem), torch.ones_like(r)
    if problem.expert_map is not None:
        emap = torch.tensor(problem.expert_map, dtype=torch.int64, device=device)
        ids = emap[ids]
    token = torch.arange(M, device=device).repeat_interleave(topk)
    local, weight = ids.flatten(), r.flatten()
    keep = local >= 0
    _note(record, "w13", x64)
    return _routed(ckpt, quantize_activation(ckpt, x64, "w13"), token[keep], local[keep],
                   weight[keep], problem, rows_out=M, record=record,
                   gemm1_weight=None if gemm1_weight is None else gemm1_weight.flatten()[keep])


def _note(record: dict | None, which: str, t: torch.Tensor) -> None:
    if record is not None:
        record[which] = float(t.abs().max()) if t.numel() else 0.0


def _moe_batched(ckpt, x, expert_num_tokens, problem, record=None):
    E, K = problem.E, problem.K
    if x.dim() != 3 or x.shape[0] != E or x.shape[2] != K:
        raise CheckpointError("hidden_states", f"batched shape [{E}, max_tokens, {K}]",
                              str(list(x.shape)))
    _check_tensor("expert_num_tokens", expert_num_tokens, (E,))
    T = x.shape[1]
    counts = expert_num_tokens.to(torch.int64)
    if (counts < 0).any() or (counts > T).any():
        raise CheckpointError("expert_num_tokens", f"counts in [0, {T}]", str(counts.tolist()))
    device = _device(ckpt)
    rows = x.to(device, torch.float64).reshape(E * T, K)
    valid = (torch.arange(T, device=device) < counts.to(device).unsqueeze(1)).flatten()
    row_ids = torch.arange(E * T, device=device)[valid]
    experts = torch.arange(E, device=device).repeat_interleave(T)[valid]
    xq = torch.zeros_like(rows)
    _note(record, "w13", rows[row_ids])
    xq[row_ids] = quantize_activation(ckpt, rows[row_ids], "w13")
    out = _routed(ckpt, xq, row_ids, experts, torch.ones(row_ids.numel(), dtype=torch.float64,
                                                         device=device), problem, E * T, record)
    return out.view(E, T, K)


def _routed(ckpt: Checkpoint, xq: torch.Tensor, token: torch.Tensor, expert: torch.Tensor,
            weight: torch.Tensor, problem: MoEProblem, rows_out: int,
            record: dict | None = None, gemm1_weight: torch.Tensor | None = None
            ) -> torch.Tensor:
    """Sum over assignments (token[i], expert[i], weight[i]) of weight * expert output;
    `gemm1_weight[i]`, where given, multiplies assignment i's GEMM1 product (before its bias
    and rounding)."""
    order = torch.argsort(expert, stable=True)
    token, expert, weight = token[order], expert[order], weight[order]
    if gemm1_weight is not None:
        gemm1_weight = gemm1_weight[order]
    counts = torch.bincount(expert, minlength=problem.E).tolist()
    starts = [0, *itertools.accumulate(counts)]
    biases = read_biases(ckpt)
    pre = {p: read_pre_quant_scale(ckpt, p) for p in ("w13", "w2")}
    # GEMM1 and the activation for every assignment, then q2 over all of them at once
    # (a dynamic per-tensor scale spans every expert's intermediate).
    inter = torch.empty(token.numel(), problem.N, dtype=torch.float64, device=xq.device)
    round_gate = ((lambda t: round_to_activation_dtype(t, problem))
                  if ckpt.gate_activation_in_activation_dtype else None)
    for e, w13 in _expert_weights(ckpt, "w13", counts, problem.w13_rows * problem.K):
        lo, hi = starts[e], starts[e + 1]
        h = _pre_scaled(xq[token[lo:hi]], pre["w13"], e) @ w13.T
        if gemm1_weight is not None:  # the product scaled, the bias not: (r x) W + b
            h = h * gemm1_weight[lo:hi].unsqueeze(1)
        if "w13_bias" in biases:
            h = _biased(h, biases["w13_bias"][e], ckpt, problem)
        h = round_to_activation_dtype(h, problem)
        inter[lo:hi] = round_to_activation_dtype(
            apply_activation(h, problem.activation, round_gate=round_gate), problem)
    _note(record, "w2", inter)
    inter = quantize_activation(ckpt, inter, "w2")
    out = torch.zeros(rows_out, problem.K, dtype=torch.float64, device=xq.device)
    for e, w2 in _expert_weights(ckpt, "w2", counts, problem.K * problem.N):
        lo, hi = starts[e], starts[e + 1]
        y = _pre_scaled(inter[lo:hi], pre["w2"], e) @ w2.T
        if "w2_bias" in biases:
            y = _biased(y, biases["w2_bias"][e], ckpt, problem)
        if ckpt.sum_in_activation_dtype:
            _add_rounded(out, token[lo:hi], weight[lo:hi].unsqueeze(1) * round_to_activation_dtype(
                y, problem), problem)
            continue
        out.index_add_(0, token[lo:hi], weight[lo:hi].unsqueeze(1) * y)
    return out


def _pre_scaled(t: torch.Tensor, pre: torch.Tensor | None, e: int) -> torch.Tensor:
    """A GEMM input times expert e's pre-quant scale per column (none: as is)."""
    return t if pre is None else t * pre[e]


def _biased(product: torch.Tensor, bias: torch.Tensor, ckpt: Checkpoint,
            problem: MoEProblem) -> torch.Tensor:
    """product + bias: exact (rounded once, later), or where the checkpoint is read with
    `bias_after_rounding` the product rounded to the activation dtype, the bias added and
    the sum rounded again (OpenAI's gpt-oss: bf16 einsum, then `+= bias` in bf16)."""
    if not ckpt.bias_after_rounding:
        return product + bias
    return round_to_activation_dtype(round_to_activation_dtype(product, problem) + bias, problem)


def _add_rounded(out: torch.Tensor, rows: torch.Tensor, weighted: torch.Tensor,
                 problem: MoEProblem) -> None:
    """out[rows] += weighted, each term rounded to float32 then to the activation dtype and
    each sum rounded to it: one expert's index_add_ into an activation-dtype buffer (experts
    come in increasing id). `rows` ascending (token-major order kept by the stable sort); a
    token routed twice to one expert adds its terms one after the other, in top-k order."""
    part = round_to_activation_dtype(weighted.to(torch.float32).to(torch.float64), problem)
    while rows.numel():
        first = torch.ones_like(rows, dtype=torch.bool)
        first[1:] = rows[1:] != rows[:-1]
        out[rows[first]] = round_to_activation_dtype(out[rows[first]] + part[first], problem)
        rows, part = rows[~first], part[~first]


def _expert_weights(ckpt: Checkpoint, prefix: str, counts: list[int], elements: int):
    """(expert, float64 [out, in] weights) for every expert with tokens, dequantized in chunks
    of experts whose float64 weights fit in CHUNK_BYTES, into one reused buffer."""
    busy = [e for e, c in enumerate(counts) if c]
    chunk = max(1, CHUNK_BYTES // (elements * 8))
    buffer = None
    i = 0
    while i < len(busy):
        lo = busy[i]
        hi = min(lo + chunk, len(counts))
        linear = read_linear(ckpt.slice_experts(lo, hi), prefix)
        if buffer is None:
            buffer = torch.empty(chunk * elements, dtype=torch.float64,
                                 device=linear.codes.device)
        w = dequantize_canonical(linear, out=buffer)
        while i < len(busy) and busy[i] < hi:
            yield busy[i], w[busy[i] - lo]
            i += 1


def _check_tensor(name: str, t: torch.Tensor | None, shape: tuple[int, ...]) -> None:
    if t is None:
        raise CheckpointError(name, f"a tensor of shape {list(shape)}", "None")
    if tuple(t.shape) != tuple(shape):
        raise CheckpointError(name, f"shape {list(shape)}", str(list(t.shape)))
    if t.is_floating_point() and not torch.isfinite(t).all():
        raise CheckpointError(name, "finite values", "non-finite entries")


def _device(ckpt: Checkpoint) -> torch.device:
    return next(iter(ckpt.tensors.values())).device
