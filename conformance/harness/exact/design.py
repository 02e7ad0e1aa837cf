"""The exact tier's designs (the package docstring says why each is exact): the column roles
of x (gate columns, the int8 anchors, value columns) and the float64 weights, one non-zero per
row, fitted so that every expert output is exact in the activation dtype."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from moecert.reference import MoEProblem
from moecert.reference.elements import pow2
from moecert.reference.moe import round_to_activation_dtype
from moecert.reference.schemes import ACT_DYNAMIC_TENSOR, ACT_DYNAMIC_TOKEN, INT8_MAX

from .encoding import lowbit
from .structured import NotExact

INT8_DYNAMIC = (ACT_DYNAMIC_TOKEN, ACT_DYNAMIC_TENSOR)
GATE_VALUES = (32.0, 64.0)  # the largest (64) is the int8 anchor's gate
GATE_COLUMN_VALUES = (16.0, 32.0)
# int8-dynamic anchors: non-anchor values stay below these many units of the anchor's 2^p
# (127 for the gated up value, 255 for the relu2 pre-activation), with room for rounding.
ANCHOR_BOUND = {"gated": 120.0, "relu2": 240.0}


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
    W[bad] = torch.where(lowbit(W[bad]) != W[bad].abs(), W[bad] / 3, W[bad])
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
        unit = lowbit(W).amin(1)  # each row's 2^q (inf: an empty row)
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
