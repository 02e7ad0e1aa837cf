"""The exact tier: structured inputs on which every backend must match the reference bit for bit.

    s = structured_inputs(case)     # Structured(checkpoint, x, topk_weights, topk_ids,
                                    #            expert_num_tokens): CPU tensors
    backend output == moe(s.checkpoint, ...).to(dtype), every bit, whatever the accumulation
    order; NotExact("why") when the case's options make that impossible to construct.

Why the output is exact. Every value is a dyadic number with few significant bits, and every
step the kernels take is either exact in fp32 or a rounding of an exactly computed value (the
same rounding the reference applies to the same value):

  weights   one non-zero per weight row (a few where the rows cannot otherwise read every
            input column), each +-{1,3} * 2^q; scales are powers of two in the format's own
            storage (E8M0, fp16/bf16/fp32), zero points fill every other column of a group, so
            each GEMM output is one product (or a few on a common grid) plus a bias: exact in
            fp32 in any order, int32 dots times power-of-two scales included.
  q1, q2    int8 dynamic (per token, per tensor): every unit's amax is 127 * 2^p (an anchor
            column in x, an anchor intermediate per expert), so amax/127 = 2^p is exact in fp32
            and float64 alike and round(v / 2^p) is the same integer everywhere. int8 static:
            the input scales are powers of two. MXFP8: the E8M0 exponent and the E4M3 rounding
            of an identical input are deterministic bit operations, nothing to arrange.
  act       silu / gelu: gates are powers of two >= 32, where fp32 silu(g) = gelu(g) = g
            exactly, so act * up = g * up is a bf16/fp16 value and the reference's
            g * (1 - 1e-14) * up rounds to it. swigluoai: gates >= 7 (clamped to exactly 7),
            up values on a 0.5 grid so that 7 * (u + 1) has <= 8 significant bits and the
            sigmoid(11.9) factor (1 - 6.7e-6) rounds away. relu2: h^2 is exact in fp32.
  y         every expert output (GEMM2 + bias) is exact in the activation dtype, since a
            backend may store it there before the top-k sum (vLLM's fused MoE, the grouped
            backend). One column at weight +-2^q only shifts the bf16/fp16 intermediate's bits;
            w2's 3 * 2^q weights, its biases and a second column (N > K) are kept only where
            every output of the expert's actual inputs still fits (_fit_expert).
  router    weights 1, 1/2, 1/4 (also on the input: x * r is exact), so r * y and the top-k
            sum of the exact y are exact in fp32.

The relu2 int8-dynamic anchor uses h = 255 * 2^e: h^2 = 65025 * 2^2e rounds (bf16 and fp16) to
65024 * 2^2e = 127 * 2^(2e+9). `exactness_violations` re-derives every condition above from the
checkpoint's packed tensors (not from the design values) and `structured_inputs` refuses to
return a structure that fails it.

Observability: every x column and every intermediate column is read by some weight row, every
local expert receives tokens when M * topk allows it (routing "skewed" / "sparse" as the case
says), biases are non-zero where the options allow (never on an int8 anchor row), every scale
block draws its own power of two (w1 and w3 rows, groups, 128 x 128 and MX blocks alike).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch
from moecert.reference import (
    CanonicalLinear,
    Checkpoint,
    CheckpointError,
    MoEProblem,
    dequantize,
)
from moecert.reference.activations import apply_activation
from moecert.reference.elements import pow2, round_to
from moecert.reference.layouts import write_linear
from moecert.reference.moe import quantize_activation, round_to_activation_dtype
from moecert.reference.quantize import fp8_block_shape
from moecert.reference.schemes import (
    ACT_DYNAMIC_GROUP,
    ACT_DYNAMIC_TENSOR,
    ACT_DYNAMIC_TOKEN,
    ACT_ELEMENT_MAX,
    ACT_STATIC_TENSOR,
    INT8_MAX,
    STRATEGY_TENSOR,
    checkpoint_shape_issue,
)
from moecert.reference.schemes.elements import ELEMENTS
from moecert.reference.synthesize import random_g_idx

INT8_DYNAMIC = (ACT_DYNAMIC_TOKEN, ACT_DYNAMIC_TENSOR)
E4M3_DYNAMIC = (ACT_DYNAMIC_TOKEN, ACT_DYNAMIC_GROUP, ACT_DYNAMIC_TENSOR)
GATE_FLOOR = {"silu": 32.0, "gelu": 32.0, "swigluoai": 7.0, "swigluoai-split": 7.0}
GATE_VALUES = (32.0, 64.0)  # the largest (64) is the int8 anchor's gate
GATE_COLUMN_VALUES = (16.0, 32.0)
ROUTER_WEIGHTS = (1.0, 0.5, 0.25)
FP32_BITS = 24
# A transcendental activation computed in fp32 is within ~2^-20 of its value (GPU fast exp
# included); its ideal value must round the same when moved by this much more.
ACT_MARGIN = 2.0**-16
# int8-dynamic anchors: non-anchor values stay below these many units of the anchor's 2^p
# (127 for the gated up value, 255 for the relu2 pre-activation), with room for rounding.
ANCHOR_BOUND = {"gated": 120.0, "relu2": 240.0}
AUDIT_MAX_ELEMENTS = 1 << 26  # float64 weights beyond this are not re-derived (memory)


class NotExact(Exception):
    """The case's options make a bit-exact structure impossible; the message says why."""


@dataclass
class Structured:
    checkpoint: Checkpoint
    x: torch.Tensor
    topk_weights: torch.Tensor | None
    topk_ids: torch.Tensor | None
    expert_num_tokens: torch.Tensor | None = None


def structured_inputs(case, audit_device: torch.device | str = "cpu") -> Structured:
    """A checkpoint and inputs for `case` (moecert.conformance.harness.cases.Case) on which the
    reference's output is reached bit for bit by any correct backend; deterministic in
    case.seed. Raises NotExact when the options exclude it, CheckpointError when the problem's
    shape cannot hold the scheme at all (as `synthesize` would).

    The structure is always drawn on the CPU (the same bits on every machine); its audit, the
    dense float64 re-derivation, runs on `audit_device` (on a GPU: milliseconds instead of
    seconds of host time per problem, docs/speed.md)."""
    P = case.problem
    attrs = Checkpoint(scheme=case.scheme, tensors={}, **case.attrs)
    _check_shape(attrs, P)
    why = why_not_exact(attrs, P)
    if why:
        raise NotExact(why)
    gen = torch.Generator().manual_seed(case.seed)
    layout = _Layout.draw(gen, P, attrs.activation)
    routing = _route(gen, P, case.routing)
    X, p = _hidden(gen, layout, routing.rows)
    x = X if routing.scale is None else X / routing.scale.unsqueeze(1)  # router on input
    p_min = float(p[routing.valid].min()) if routing.valid.any() else 0.0
    w13, b13 = _design_w13(gen, layout, p_min)
    ckpt = _checkpoint(gen, attrs, P, {"w13": w13}, {"w13_bias": b13})
    tensors = dict(ckpt.tensors)
    if attrs.activation == ACT_STATIC_TENSOR:
        tensors["w13_input_scale"] = _input_scales(gen, P.E, X[routing.valid], attrs)
    a = _intermediate(replace(ckpt, tensors=tensors), X, w13, b13, routing, P)
    if attrs.activation == ACT_STATIC_TENSOR:
        tensors["w2_input_scale"] = _input_scales(gen, P.E, a, attrs)
    aq = _quantize(replace(ckpt, tensors=tensors), a, "w2")
    w2, b2 = _design_w2(gen, P, aq, routing.expert)
    full = _checkpoint(gen, attrs, P, {"w2": w2}, {"w2_bias": b2})
    tensors.update(full.tensors)
    if not P.bias:
        tensors = {n: t for n, t in tensors.items() if not n.endswith("_bias")}
    s = routing.structured(replace(ckpt, tensors=tensors), x.to(P.torch_dtype))
    if _audit_size(P) <= AUDIT_MAX_ELEMENTS:
        problems = exactness_violations(_structured_to(s, audit_device), P)
        if problems:  # a construction bug, never a property of the backend under test
            raise RuntimeError(f"exact tier: the structure for {case.case_id} is not exact: "
                               + "; ".join(problems[:4]))
    return s


def why_not_exact(attrs: Checkpoint, P: MoEProblem) -> str | None:
    """Why no bit-exact structure exists for these options, or None."""
    if attrs.info.global_scale != "none":
        # possible in principle (e2m1 palettes, power-of-two e4m3 block and global scales,
        # NVFP4 activations on their own grid), not built yet
        return (f"{attrs.scheme}: this tier does not construct e2m1 weights with e4m3 block "
                "scales and global scales yet")
    if attrs.info.activation_element == "e4m3" and attrs.activation in E4M3_DYNAMIC:
        return (f"{attrs.activation} e4m3 activations: the scale amax/448 is exact only for "
                "amax = 448 * 2^p in every unit (each row, or each 1x128 group of a row, of x "
                "and of the intermediate); the structure's anchors are built for int8's "
                "127 * 2^p per row (not extended to e4m3 yet)")
    if P.activation.startswith("swigluoai") and attrs.activation in INT8_DYNAMIC:
        return (f"{P.activation} with {attrs.activation} int8 activations: the int8 scale "
                "amax/127 is exact only for amax = 127 * 2^p, and swigluoai's outputs are "
                "7 * (u + 1) * sigmoid(11.9) (clamped gate) or transcendental (gate < 7); "
                "fp32 and float64 scales then differ in the last bit")
    # a value column, a gate column (gated), the int8 anchor (+ relu2's anchor)
    need = 1 + int(P.gated)
    if attrs.activation in INT8_DYNAMIC:
        need += 1 if P.gated else 2
    if P.K < need:
        return f"K = {P.K} leaves no room for {need} column roles (gate, anchors, values)"
    return None


def _check_shape(attrs: Checkpoint, P: MoEProblem) -> None:
    """CheckpointError where no checkpoint of the scheme has these dimensions, as
    `synthesize` refuses them."""
    issue = checkpoint_shape_issue(attrs, P)
    if issue:
        raise CheckpointError(issue.tensor, issue.expected, issue.found)


# --- layout of x's columns and the rows' exponents -----------------------------------------

@dataclass
class _Layout:
    """Column roles of x: gate columns hold a constant power of two (gates are token-free);
    `anchor` holds +-127 * 2^p (the int8 dynamic q1 amax), `relu_anchor` 85 * 2^p (relu2's
    int8 q2 anchor 85 * 3 = 255); value columns vary per token."""

    problem: MoEProblem
    mode: str
    gate_cols: torch.Tensor
    gate_values: torch.Tensor
    value_cols: torch.Tensor
    anchor: int | None
    relu_anchor: int | None

    @property
    def dynamic(self) -> bool:
        return self.mode in INT8_DYNAMIC

    @classmethod
    def draw(cls, gen, P: MoEProblem, mode: str) -> _Layout:
        cols = torch.randperm(P.K, generator=gen)
        n_gate = min(max(1, P.K // 8), P.N) if P.gated else 0
        gate, rest = cols[:n_gate], cols[n_gate:]
        anchor = relu_anchor = None
        if mode in INT8_DYNAMIC:
            anchor, rest = int(rest[0]), rest[1:]
            if not P.gated:
                relu_anchor, rest = int(rest[0]), rest[1:]
        return cls(P, mode, gate, _pick(gen, GATE_COLUMN_VALUES, (n_gate,)), rest, anchor,
                   relu_anchor)


def _pick(gen, values, shape) -> torch.Tensor:
    """float64 tensor of `shape` drawn uniformly from `values`."""
    v = torch.tensor(values, dtype=torch.float64)
    return v[torch.randint(len(values), shape, generator=gen)]


def _signs(gen, shape) -> torch.Tensor:
    return _pick(gen, (-1.0, 1.0), shape)


def _hidden(gen, layout: _Layout, rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The q1 input X [rows, K] (x after the router weight when it applies) and each row's
    exponent p. int8 dynamic: anchor +-127 * 2^p, values k * 2^p (exact int8 codes k); other
    modes: values +-{1, 3} * 2^(j + p), multiples of 1/2 (static scale 1/2, swigluoai grid).
    Gate columns hold their constant (a multiple of every row's 2^p, below its anchor)."""
    P = layout.problem
    if layout.dynamic:
        # per token: each row its own 2^p; per tensor: one 2^p, so that every row's values
        # stay multiples of the one scale and each row keeps its anchor through q1
        per_row = layout.mode == ACT_DYNAMIC_TOKEN
        p = _pick(gen, (-1.0, 0.0, 1.0), (rows if per_row else 1, 1)).expand(rows, 1)
        limit = _value_limit(layout)
        ks = [k for k in (16, 24, 40, 48, 56, 80, 96, 112) if k <= limit] or [1, 2, 3]
        X = _signs(gen, (rows, P.K)) * _pick(gen, ks, (rows, P.K)) * pow2(p)
        X[:, layout.anchor] = _signs(gen, (rows,)) * INT8_MAX * pow2(p[:, 0])
        if layout.relu_anchor is not None:
            X[:, layout.relu_anchor] = 85 * pow2(p[:, 0])
    else:
        p = _pick(gen, (-1.0, 0.0), (rows, 1))
        X = _signs(gen, (rows, P.K)) * _pick(gen, (1.0, 3.0), (rows, P.K)) * pow2(
            _pick(gen, (0.0, 1.0, 2.0), (rows, P.K)) + p)
    X[:, layout.gate_cols] = layout.gate_values
    return X, p[:, 0]


def _value_nnz(layout: _Layout) -> int:
    """Non-zeros per value row: enough for the value rows to read every value column."""
    P = layout.problem
    rows = P.N - (0 if not layout.dynamic else 1 if P.gated else 2)  # less the anchor rows
    return max(1, -(-layout.value_cols.numel() // max(rows, 1)))


def _value_limit(layout: _Layout) -> float:
    """Largest int8 code k of a value column such that no non-anchor value passes the anchor:
    nnz * k * max|w| / 2^q* + |b| / 2^(p+q*) <= bound (max|w| = 0.75 or 1.5 * 2^q*, |b| <= 3
    units)."""
    gated = layout.problem.gated
    bound = ANCHOR_BOUND["gated" if gated else "relu2"]
    w_ratio = 0.75 if gated else 1.5
    return (bound - 3) / (_value_nnz(layout) * w_ratio)


# --- routing ----------------------------------------------------------------------------------

@dataclass
class _Routing:
    """Who computes what. Standard: `ids`/`weights` [M, topk]; batched: `counts` [E]. `rows`
    is the number of q1 input rows, `valid` which of them the reference quantizes, `token`,
    `expert`, `weight` the kept assignments (row, local expert, router weight)."""

    problem: MoEProblem
    rows: int
    valid: torch.Tensor
    token: torch.Tensor
    expert: torch.Tensor
    weight: torch.Tensor
    ids: torch.Tensor | None = None
    weights: torch.Tensor | None = None
    counts: torch.Tensor | None = None
    scale: torch.Tensor | None = None  # router weight per row when applied on the input

    def structured(self, ckpt: Checkpoint, x: torch.Tensor) -> Structured:
        P = self.problem
        if P.activation_format == "batched":
            T = self.rows // P.E
            return Structured(ckpt, x.view(P.E, T, P.K), None, None, self.counts)
        return Structured(ckpt, x, self.weights, self.ids)


def _route(gen, P: MoEProblem, kind: str) -> _Routing:
    if P.activation_format == "batched":
        return _route_batched(gen, P, kind)
    n = P.global_num_experts
    emap = torch.tensor(P.expert_map if P.expert_map is not None else range(n))
    local = [g for g in range(n) if emap[g] >= 0]
    remote = [g for g in range(n) if emap[g] < 0]

    def perm(xs):
        return [xs[i] for i in torch.randperm(len(xs), generator=gen).tolist()]

    first: list[int] = []
    half = perm(local)[: (len(local) + 1) // 2] + remote
    if kind == "skewed":  # every token's first choice is one local expert
        first = [local[int(torch.randint(len(local), (1,), generator=gen))]]
        order = perm([g for g in range(n) if g != first[0]])
    elif kind == "sparse" and len(local) > 1 and len(half) >= P.topk:  # half the experts idle
        order = perm(half)
    else:  # local experts first: every one is hit as soon as M * topk >= E
        order = perm(local) + perm(remote)
    rest = P.topk - len(first)
    ids = torch.tensor([first + [order[(t * rest + i) % len(order)] for i in range(rest)]
                        for t in range(P.M)], dtype=torch.int64).view(P.M, P.topk)
    ids = ids[torch.randperm(P.M, generator=gen)]
    weights = _pick(gen, ROUTER_WEIGHTS, (P.M, P.topk))
    scale = None
    if P.apply_router_weight_on_input:
        scale, route_w = weights[:, 0], torch.ones_like(weights)
    else:
        route_w = weights
    local_ids = emap[ids].flatten()
    keep = local_ids >= 0
    token = torch.arange(P.M).repeat_interleave(P.topk)
    return _Routing(P, P.M, torch.ones(P.M, dtype=torch.bool), token[keep], local_ids[keep],
                    route_w.flatten()[keep], ids.to(torch.int32), weights.to(torch.float32),
                    scale=scale)


def _route_batched(gen, P: MoEProblem, kind: str) -> _Routing:
    T = max(P.M, 1)
    counts = torch.randint(1, T + 1, (P.E,), generator=gen)
    if kind == "skewed":
        counts[:] = 1
        counts[int(torch.randint(P.E, (1,), generator=gen))] = T
    elif kind == "sparse":
        counts[torch.randperm(P.E, generator=gen)[: P.E // 2]] = 0
    valid = (torch.arange(T) < counts.unsqueeze(1)).flatten()
    rows = torch.arange(P.E * T)[valid]
    return _Routing(P, P.E * T, valid, rows, rows // T, torch.ones(rows.numel(),
                    dtype=torch.float64), counts=counts.to(torch.int32))


# --- weight designs (float64 values, one non-zero per row) ----------------------------------

def _gate_up_rows(P: MoEProblem) -> tuple[torch.Tensor, torch.Tensor]:
    """w13 row of gate j and of up j: interleaved for swigluoai, gate rows first otherwise."""
    j = torch.arange(P.N)
    if P.activation == "swigluoai":
        return 2 * j, 2 * j + 1
    return j, P.N + j


def _design_w13(gen, layout: _Layout, p_min: float):
    """(values [E, rows, K], bias [E, rows]); p_min: the smallest row exponent of x."""
    P = layout.problem
    E, R, K = P.E, P.w13_rows, P.K
    W = torch.zeros(E, R, K, dtype=torch.float64)
    b = torch.zeros(E, R, dtype=torch.float64)
    gate_rows, value_rows = _gate_up_rows(P) if P.gated else (None, torch.arange(P.N))
    swiglu = P.activation.startswith("swigluoai")
    q_star = -2.0  # int8 anchor weight exponent
    for e in range(E):
        anchor_j = int(torch.randint(P.N, (1,), generator=gen)) if layout.dynamic else None
        if P.gated:
            _design_gates(gen, layout, W[e], b[e], gate_rows, anchor_j)
        rows = value_rows
        if anchor_j is not None:  # one value row reads the anchor column, without a bias
            r = int(value_rows[anchor_j])
            if P.gated:
                W[e, r, layout.anchor] = 2.0**q_star
            else:  # relu2: 85 * 2^p * 3 * 2^q* = 255 * 2^(p+q*)
                W[e, r, layout.relu_anchor] = 3 * 2.0**q_star
            rows = torch.cat([value_rows[:anchor_j], value_rows[anchor_j + 1:]])
            if not P.gated and rows.numel():  # relu2: a row of its own reads the q1 anchor,
                W[e, rows[0], layout.anchor] = float(_signs(gen, (1,))) * 2.0**q_star
                rows = rows[1:]  # 127 units, below the relu2 anchor's 255
        if layout.dynamic:  # |w| <= 0.75 (gated) or 1.5 (relu2) * 2^q*: see _value_limit
            exps = [q_star - 2] if P.gated else [q_star - 1]
            mant, bias_unit = (1.0, 3.0), 2.0 ** (p_min + q_star)
        elif swiglu:  # up on a 1/2 grid: 7 * (u + 1) keeps <= 8 significant bits
            exps, mant, bias_unit = [0.0], (1.0, 3.0), 0.5
        elif P.gated:
            exps, mant, bias_unit = [-2.0, -1.0], (1.0, 3.0), 2.0**-3
        else:
            exps, mant, bias_unit = [-1.0], (1.0, 3.0), 2.0**-2
        _design_rows(gen, W[e], rows, layout.value_cols, exps, mant)
        if P.bias and rows.numel():
            b[e, rows] = _signs(gen, (rows.numel(),)) * _pick(gen, (1.0, 3.0), (rows.numel(),)) \
                * bias_unit * (torch.rand(rows.numel(), generator=gen) < 0.85)
    return W, b


def _design_gates(gen, layout: _Layout, W, b, gate_rows, anchor_j) -> None:
    """Gate j = 32 or 64 (the int8 anchor's gate 64, the largest): a gate column times a power
    of two, plus (with bias) the same value again, or the bias alone."""
    P = layout.problem
    target = _pick(gen, GATE_VALUES, (P.N,))
    if anchor_j is not None:
        target[anchor_j] = max(GATE_VALUES)
    which = torch.arange(P.N) % layout.gate_cols.numel()  # every gate column is read
    which = which[torch.randperm(P.N, generator=gen)]
    kind = torch.randint(4, (P.N,), generator=gen) if P.bias else torch.zeros(P.N, dtype=int)
    first = torch.zeros(layout.gate_cols.numel(), dtype=torch.long).scatter_reduce(
        0, which, torch.arange(P.N), "amin", include_self=False)
    kind[first] %= 3  # the first reader of each gate column reads it (not bias-only)
    for j in range(P.N):
        r, c, g = int(gate_rows[j]), int(layout.gate_cols[which[j]]), float(target[j])
        k = int(kind[j])
        if k == 3:  # bias only
            b[r] = g
            continue
        product = g / 2 if k == 2 else g
        W[r, c] = product / float(layout.gate_values[which[j]])
        b[r] = g - product


def _design_rows(gen, W, rows: torch.Tensor, cols: torch.Tensor, exps, mant) -> None:
    """Rows `rows` of W read `cols` (every column by some row): each row nnz non-zeros
    +-m * 2^q, one exponent q per row."""
    n = rows.numel()
    if n == 0 or cols.numel() == 0:
        return
    nnz = max(1, -(-cols.numel() // n))
    slots = torch.cat([cols[torch.randperm(cols.numel(), generator=gen)],
                       cols[torch.randint(cols.numel(), (n * nnz,), generator=gen)]])[: n * nnz]
    slots = slots.view(nnz, n).T  # row i reads slots[i]
    q = _pick(gen, exps, (n, 1))
    values = _signs(gen, (n, nnz)) * _pick(gen, mant, (n, nnz)) * pow2(q)
    for i in range(nnz):
        W[rows, slots[:, i]] = values[:, i]


def _design_w2(gen, P: MoEProblem, aq: torch.Tensor, expert: torch.Tensor):
    """(values [E, K, N], bias [E, K]): each row reads intermediate columns (all of them across
    the rows), scaled so that outputs land near 2^5; bias about 1/16 of that. Then fitted to
    the expert's inputs aq [A, N] (local expert of each row `expert`): every output exact in
    the activation dtype (_fit_expert)."""
    top = float(aq.abs().max()) if aq.numel() else 1.0
    ex = torch.frexp(torch.tensor(max(top, 2.0**-20), dtype=torch.float64))[1].item() - 1
    q = 4 - ex
    W = torch.zeros(P.E, P.K, P.N, dtype=torch.float64)
    for e in range(P.E):
        _design_rows(gen, W[e], torch.arange(P.K), torch.arange(P.N), [q, q - 1], (1.0, 3.0))
    unit = q + ex - 4
    b = _signs(gen, (P.E, P.K)) * _pick(gen, (1.0, 3.0), (P.E, P.K)) * 2.0**unit
    b = b * (torch.rand(P.E, P.K, generator=gen) < 0.85)
    for e in range(P.E):
        rows = aq[expert == e]
        if rows.numel():
            _fit_expert(gen, P, W[e], b[e] if P.bias else torch.zeros_like(b[e]), rows, unit)
    return W, b


# Bias candidates when the drawn one does not fit: +-{1, 3} * 2^j, j this far below its unit.
BIAS_STEPS_DOWN = 8


def _fit_expert(gen, P: MoEProblem, W, b, A, unit: int) -> None:
    """Make every output of one expert, y = A W^T + b for its inputs A [n, N], exact in the
    activation dtype (in place), where a backend may round it before the top-k sum. A row
    reading one column with weight +-2^q keeps the bf16/fp16 intermediate's bits, only
    shifted; a weight 3 * 2^q or a bias may need more than the dtype's mantissa. Failing rows:
    weights 3 * 2^q -> 2^q, then a bias among the candidates that fit (0 if none), then (rows
    reading several columns) columns another row also reads dropped, a lone column moved to a
    row where it fits."""
    def fits(y):  # [n, rows, ...] -> [rows, ...]
        return (round_to_activation_dtype(y, P) == y).all(0)

    y0 = A @ W.T
    bad = ~fits(y0 + b)
    if not bad.any():
        return
    W[bad] = torch.where(_lowbit(W[bad]) != W[bad].abs(), W[bad] / 3, W[bad])
    y0 = A @ W.T
    bad = ~fits(y0 + b)
    if bad.any() and P.bias:
        mant = torch.tensor([1.0, 3.0, -1.0, -3.0], dtype=torch.float64)
        cands = (mant.view(-1, 1) * pow2(torch.arange(unit - BIAS_STEPS_DOWN, unit + 1.0))
                 ).flatten()
        ok = fits(y0[:, bad, None] + cands)  # [bad rows, candidates]
        pick = torch.rand(ok.shape, generator=gen) * ok
        chosen = torch.where(ok.any(1), cands[pick.argmax(1)], 0.0)
        b[bad] = chosen
        bad = ~fits(y0 + b)
    for r in bad.nonzero().flatten().tolist():
        _fit_row(gen, P, W, b, A, r, fits)


def _fit_row(gen, P: MoEProblem, W, b, A, r: int, fits) -> None:
    """Row r reads several columns and its sum is not exact in the activation dtype: it keeps
    its first column and bias 0; a column no other row reads moves to a random row whose
    output still fits, at weight +-2^q of that row's exponent (one q per row, as drawn)."""
    b[r] = 0
    extra = W[r].nonzero().flatten()[1:]
    W[r, extra] = 0
    for c in extra.tolist():
        if (W[:, c] != 0).any():
            continue  # read by another row too
        unit = _lowbit(W).amin(1)  # each row's 2^q (inf: an empty row)
        cand = torch.stack([unit, -unit], 1).nan_to_num(posinf=0.0)  # [K, 2]
        ok = fits((A @ W.T + b).unsqueeze(2) + A[:, c, None, None] * cand) & (cand != 0)
        if not ok.any():
            raise NotExact(
                f"N = {P.N} > K = {P.K}: some w2 row must add two intermediate columns, and "
                f"for column {c} of an expert's inputs no row's sum stays exact in {P.dtype} "
                "(where a backend may round each expert output before the top-k sum); the "
                "intermediates use the dtype's whole mantissa")
        options = ok.nonzero()
        k, j = (int(v) for v in options[torch.randint(len(options), (1,), generator=gen)][0])
        W[k, c] = cand[k, j]


# --- GEMM1 in float64, to size W2 and the static q2 scale ------------------------------------

def _quantize(ckpt: Checkpoint, t: torch.Tensor, which: str) -> torch.Tensor:
    if t.numel() == 0:
        return t
    return quantize_activation(ckpt, t, which)


def _intermediate(ckpt, X, w13, b13, routing: _Routing, P: MoEProblem) -> torch.Tensor:
    """round(act(round(q1(X) W13^T + b13))) for every kept assignment [A, N]."""
    xq = torch.zeros_like(X)
    xq[routing.valid] = _quantize(ckpt, round_to_activation_dtype(X[routing.valid], P), "w13")
    h = torch.einsum("ak,ark->ar", xq[routing.token], w13[routing.expert])
    h = round_to_activation_dtype(h + b13[routing.expert], P)
    return round_to_activation_dtype(apply_activation(h, P.activation), P)


def _input_scales(gen, E: int, t: torch.Tensor, attrs: Checkpoint) -> torch.Tensor:
    """Static per-expert scales [E] fp32: powers of two, the largest 2^ceil(log2(amax/top))
    (top 127 for int8, 448 for e4m3; the one engines use) held by one expert, the others 1/2
    or 1/4 of it."""
    amax = float(t.abs().max()) if t.numel() else 0.0
    code_max = ACT_ELEMENT_MAX[attrs.info.activation_element]
    top = 1.0 if amax == 0 else 2.0 ** _ceil_log2(amax / code_max)
    s = top * _pick(gen, (1.0, 0.5, 0.25), (E,))
    s[int(torch.randint(E, (1,), generator=gen))] = top
    return s.to(torch.float32)


def _ceil_log2(v: float) -> int:
    m, e = torch.frexp(torch.tensor(v, dtype=torch.float64))
    return int(e) - 1 if float(m) == 0.5 else int(e)


# --- encoding into the scheme's storage --------------------------------------------------------

def _checkpoint(gen, attrs: Checkpoint, P: MoEProblem, linears: dict, biases: dict
                ) -> Checkpoint:
    tensors = {}
    for prefix, values in linears.items():
        tensors.update(write_linear(_encode(gen, values, attrs, prefix), prefix, attrs,
                                    P.torch_dtype))
    for name, b in biases.items():
        tensors[name] = b.to(P.torch_dtype)
    return replace(attrs, tensors=tensors)


def _encode(gen, V: torch.Tensor, attrs: Checkpoint, prefix: str) -> CanonicalLinear:
    """The canonical linear holding values V [E, out, in] in `attrs`'s format: power-of-two
    scales per scale block, codes V / scale (integers or E4M3 values), zero points filling
    every empty column of a group."""
    E, n_out, n_in = V.shape
    info = attrs.info
    if not info.quantized:
        return CanonicalLinear(codes=V.clone(), scales=torch.ones(E, 1, 1, dtype=torch.float64),
                               block=(n_out, n_in))
    if info.packed:
        return _encode_int_groups(gen, V, attrs)
    if info.scale_block:
        block = (1, info.scale_block)
    else:
        shards = (info.element == "e4m3" and prefix == "w13" and attrs.weight_strategy ==
                  STRATEGY_TENSOR and n_out % 2 == 0)
        block = fp8_block_shape(attrs.weight_strategy, n_out, n_in, shards)
    element = info.element
    codes, scales = _encode_blocks(gen, V, block, element)
    return CanonicalLinear(codes=codes, scales=scales, block=block)


def _lowbit(v: torch.Tensor) -> torch.Tensor:
    """The lowest set bit 2^k of each non-zero value with <= 53 significant bits; inf for 0."""
    low = torch.full_like(v, torch.inf, dtype=torch.float64)
    nonzero = v != 0
    mant, exp = torch.frexp(v[nonzero].to(torch.float64))
    n = (mant.abs() * 2.0**53).to(torch.int64)
    low[nonzero] = (n & -n).to(torch.float64) * pow2(exp - 53)
    return low


# E4M3 codes take top / scale in [16, 128), a narrower window than its range allows (kept:
# the tier's structures for the fp8 schemes); every other float element takes the widest
# window `float_codes` derives from its record.
_E4M3_WINDOW = (-6, -4)


def float_codes(element: str) -> tuple[Callable, float, tuple[int, int]]:
    """(rounding, largest value, the range of log2(scale) - floor(log2 top)) of a float
    element, from its record. A block's values are +-{1, 3} * 2^q of one q, so its codes are
    1.5 * 2^-d and 2^(-1-d) (top 3 * 2^q, d = log2(scale) - floor(log2 top)), or 2^-d
    (top 2^q): the largest, 1.5 * 2^-d, must not pass the element's max (d >= -floor(log2(max
    / 1.5))), the smallest, 2^(-1-d), must be a multiple of its subnormal step 2^(1 - bias -
    mbits) (d <= bias + mbits - 2). E2M1: [-2, 0] (codes {6, 3, 1.5} with 2^q / scale >=
    1/2), E2M3: [-2, 2], E3M2: [-4, 3]."""
    el = ELEMENTS[element]
    window = (-math.floor(math.log2(el.max / 1.5)), el.exp_bias + el.mantissa_bits - 2)
    if el.storage == torch.float8_e4m3fn:
        window = _E4M3_WINDOW
    return (lambda x: round_to(x, el)), el.max, window


def _block_scales(gen, low: torch.Tensor, top: torch.Tensor, code_max: float, integer: bool,
                  element: str = "e4m3") -> torch.Tensor:
    """Power-of-two scales for blocks whose non-zeros have lowest bit `low` and largest
    magnitude `top`: integer codes need scale <= low and top / scale <= code_max; float codes
    take top / scale in their element's range (`float_codes`). Empty blocks draw a scale near
    1."""
    empty = torch.isinf(low)
    if integer:
        ratio = torch.where(empty, 1.0, top / low)
        if (ratio > code_max).any():
            raise RuntimeError(f"exact tier: values span {float(ratio.max())} steps of their "
                               f"block, more than the {code_max} codes of the format")
        room = torch.floor(torch.log2(code_max / ratio)).clamp(0, 2)
        shift = torch.floor(torch.rand(low.shape, generator=gen) * (room + 1))
        s = torch.where(empty, 1.0, low) * pow2(-shift)
    else:
        ex = torch.frexp(torch.where(empty, 1.0, top))[1] - 1
        lo, hi = float_codes(element)[2]
        s = pow2(ex + torch.randint(lo, hi + 1, low.shape, generator=gen))
    wild = pow2(torch.randint(-3, 2, low.shape, generator=gen))
    return torch.where(empty, wild, s)


def _encode_blocks(gen, V: torch.Tensor, block: tuple[int, int], element: str):
    """(codes, scales [E, R, C]) for one scale per (rows x cols) block of V."""
    E, n_out, n_in = V.shape
    rows, cols = block
    R, C = -(-n_out // rows), -(-n_in // cols)
    pad = torch.nn.functional.pad(V, (0, C * cols - n_in, 0, R * rows - n_out))
    blocks = pad.view(E, R, rows, C, cols)
    low = _lowbit(blocks).amin(dim=(2, 4))
    top = blocks.abs().amax(dim=(2, 4))
    integer = element == "int8"
    s = _block_scales(gen, low, top, INT8_MAX, integer, element)
    full = s.repeat_interleave(rows, 1)[:, :n_out].repeat_interleave(cols, 2)[:, :, :n_in]
    codes = V / full
    if integer:
        _expect_codes((codes == torch.round(codes)) & (codes.abs() <= INT8_MAX), "int8 codes")
        codes = codes.to(torch.int32)
    else:
        rounding, top_code, _ = float_codes(element)
        _expect_codes((rounding(codes) == codes) & (codes.abs() <= top_code),
                      f"{element.upper()} codes")
    return codes, s


def _encode_int_groups(gen, V: torch.Tensor, attrs: Checkpoint) -> CanonicalLinear:
    """GPTQ / AWQ / compressed-tensors: scales and zero points per (row, group), groups by
    k // g or by a random act-order g_idx."""
    E, n_out, n_in = V.shape
    bits = attrs.info.weight_bits
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    cols = n_in if attrs.group_size == -1 else attrs.group_size
    G = n_in // cols
    g_idx = random_g_idx(gen, E, n_in, attrs.group_size) if attrs.act_order else None
    groups = (torch.arange(n_in) // cols).expand(E, n_in) if g_idx is None else g_idx
    index = groups.unsqueeze(1).expand(E, n_out, n_in)
    init = torch.full((E, n_out, G), torch.inf, dtype=torch.float64)
    low = init.scatter_reduce(2, index, _lowbit(V), "amin")
    top = torch.zeros(E, n_out, G, dtype=torch.float64).scatter_reduce(2, index, V.abs(), "amax")
    s = _block_scales(gen, low, top, float(hi), integer=True)
    codes = V / torch.gather(s, 2, index)
    _expect_codes((codes == torch.round(codes)) & (codes.abs() <= hi), f"int{bits} codes")
    codes = codes.to(torch.int32)
    zeros = None
    if not attrs.sym:
        cmin = torch.zeros(E, n_out, G, dtype=torch.int32).scatter_reduce(2, index, codes, "amin")
        cmax = torch.zeros(E, n_out, G, dtype=torch.int32).scatter_reduce(2, index, codes, "amax")
        # GPTQ v1 stores z - 1: the true (unsigned) zero must be >= 1
        zmin = lo + 1 if attrs.record.zero_domain == "unsigned-minus-one" else lo
        z_lo, z_hi = torch.clamp(lo - cmin, min=zmin), hi - cmax
        span = (z_hi - z_lo + 1).to(torch.float64)
        zeros = z_lo + torch.floor(torch.rand(span.shape, generator=gen) * span).to(torch.int32)
        codes = codes + torch.gather(zeros, 2, index)
    return CanonicalLinear(codes=codes, scales=s, block=(1, cols), zeros=zeros, g_idx=g_idx)


def _expect_codes(ok: torch.Tensor, what: str) -> None:
    if not bool(ok.all()):
        raise RuntimeError(f"exact tier: {int((~ok).sum())} weights are not {what} of their "
                           "power-of-two scale")


# --- the audit ------------------------------------------------------------------------------

def _structured_to(s: Structured, device) -> Structured:
    def move(t):
        return None if t is None else t.to(device)
    return Structured(s.checkpoint.to(device), move(s.x), move(s.topk_weights),
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
    unit = _lowbit(terms).amin(-1)
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
        name = "w13_input_scale" if what.startswith("q1") else "w2_input_scale"
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


__all__ = ["NotExact", "Structured", "exactness_violations", "structured_inputs",
           "why_not_exact"]
