"""`structured_inputs`: the exact tier's checkpoint and inputs for a case (the package
docstring says why the output is exact): x and the weights designed (design.py), tokens
routed, GEMM1 computed in float64 to size W2 and the static q2 scale, everything encoded in
the scheme's format (encoding.py) and audited (audit.py)."""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from moecert.reference import (
    Checkpoint,
    CheckpointError,
    MoEProblem,
)
from moecert.reference.activations import apply_activation
from moecert.reference.moe import quantize_activation, round_to_activation_dtype
from moecert.reference.schemes import (
    ACT_DYNAMIC_GROUP,
    ACT_DYNAMIC_TENSOR,
    ACT_DYNAMIC_TOKEN,
    ACT_ELEMENT_MAX,
    ACT_STATIC_TENSOR,
    checkpoint_shape_issue,
)
from moecert.reference.schemes.tensors import input_scale_name

from .audit import audit
from .design import (
    INT8_DYNAMIC,
    _design_w2,
    _design_w13,
    _hidden,
    _Layout,
    _pick,
)
from .encoding import encode_checkpoint
from .structured import NotExact, Structured

E4M3_DYNAMIC = (ACT_DYNAMIC_TOKEN, ACT_DYNAMIC_GROUP, ACT_DYNAMIC_TENSOR)
ROUTER_WEIGHTS = (1.0, 0.5, 0.25)


def structured_inputs(case, audit_device: torch.device | str = "cpu") -> Structured:
    """A checkpoint and inputs for `case` (moecert.conformance.harness.cases.Case) on which the
    reference's output is reached bit for bit by any correct backend; deterministic in
    case.seed. Raises NotExact when the options exclude it, CheckpointError when the problem's
    shape cannot hold the scheme at all (as `synthesize` would).

    The structure is always drawn on the CPU (the same bits on every machine); its audit, the
    dense float64 re-derivation, runs on `audit_device` (on a GPU: milliseconds instead of
    seconds of host time per problem, docs/speed.md)."""
    P = case.problem
    attrs = Checkpoint(case.variant, {})  # the case's variant; encode_checkpoint fills it
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
    ckpt = encode_checkpoint(gen, attrs, P, {"w13": w13}, {"w13_bias": b13})
    tensors = dict(ckpt.tensors)
    if attrs.activation == ACT_STATIC_TENSOR:
        tensors[input_scale_name(attrs, "w13")] = _input_scales(gen, P.E, X[routing.valid], attrs)
    a = _intermediate(replace(ckpt, tensors=tensors), X, w13, b13, routing, P)
    if attrs.activation == ACT_STATIC_TENSOR:
        tensors[input_scale_name(attrs, "w2")] = _input_scales(gen, P.E, a, attrs)
    aq = _quantize(replace(ckpt, tensors=tensors), a, "w2")
    w2, b2 = _design_w2(gen, P, aq, routing.expert)
    full = encode_checkpoint(gen, attrs, P, {"w2": w2}, {"w2_bias": b2})
    tensors.update(full.tensors)
    if not P.bias:
        tensors = {n: t for n, t in tensors.items() if not n.endswith("_bias")}
    s = routing.structured(replace(ckpt, tensors=tensors), x.to(P.torch_dtype))
    problems = audit(s, P, audit_device)
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


__all__ = ["E4M3_DYNAMIC", "ROUTER_WEIGHTS", "structured_inputs", "why_not_exact"]
