"""A case's layer inputs, fresh from its seed: hidden states and a routing of the kind the case
names (random, one expert taking every token, half of the experts left empty).

Input regimes. A layer read from a folder with static input scales (FP8 / W8A8 static,
NVFP4 W4A4) was calibrated for inputs up to an amax (`reference.moe.calibrated_amax`: the
input scale times the element's largest value). Unit-variance hidden states would sit
anywhere against that range (a file calibrated on small activations saturates on them, one
calibrated on large ones uses a few codes), so the hidden states of such a layer are drawn
and scaled so that GEMM1's input amax is `REGIME_SHARE[regime]` of its calibrated amax:
"calibrated" (the accuracy and every other check: the scales used as calibrated) and
"saturated" (the `saturation` check: inputs beyond the range on purpose, saturation judged).
GEMM2's input follows from the weights; the checks measure it against its own calibrated
amax and say so. A row's `regime` column names the regime its inputs were drawn in: "" for
a synthesized checkpoint or a layer without static scales (unit-variance draws), "given"
for an `--inputs` file's hidden states (used as they are)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from moecert.reference import make_batched_inputs, make_inputs

from .cases import Case

# Inputs draw from their own stream: seed s must not reuse the checkpoint's random numbers.
_INPUT_SEED_OFFSET = 7919
# GEMM1's input amax as a share of its calibrated amax, per regime (module docstring):
# "calibrated" just inside the range (bf16 rounding of the scaled draw stays inside), and
# "saturated" 4x beyond it (most blocks' scales saturate, not only the largest one's).
REGIME_SHARE = {"calibrated": 0.9, "saturated": 4.0}
CALIBRATED, SATURATED, GIVEN = "calibrated", "saturated", "given"


@dataclass
class Inputs:
    x: torch.Tensor
    topk_weights: torch.Tensor | None
    topk_ids: torch.Tensor | None
    expert_num_tokens: torch.Tensor | None = None

    def to(self, device) -> Inputs:
        return Inputs(*(None if t is None else t.to(device) for t in self.tensors()))

    def tensors(self) -> tuple:
        return (self.x, self.topk_weights, self.topk_ids, self.expert_num_tokens)

    def apply_args(self) -> tuple[tuple, dict]:
        """Positional and keyword arguments of `Backend.apply`."""
        opts = {} if self.expert_num_tokens is None else {
            "expert_num_tokens": self.expert_num_tokens}
        return (self.x, self.topk_weights, self.topk_ids), opts


def input_regime(case: Case) -> str:
    """The regime of `case`'s own inputs (module docstring): "calibrated" for a model layer
    with static input scales, "given" for `--inputs` hidden states, else ""."""
    src = case.source
    if src is None or case.problem.activation_format != "standard":
        return ""
    if src.inputs is not None:
        return GIVEN
    return CALIBRATED if layer_calibrated_amax(case) is not None else ""


def layer_calibrated_amax(case: Case, which: str = "w13") -> float | None:
    """GEMM `which`'s calibrated input amax of the case's model layer (None: no static
    input scales, or no model layer)."""
    from moecert.reference.moe import calibrated_amax

    from .model_layers import model_layer

    if case.source is None:
        return None
    return calibrated_amax(model_layer(case.source.folder, case.source.layer).checkpoint,
                           which)


def case_inputs(case: Case, regime: str | None = None) -> Inputs:
    """CPU inputs of `case` (the caller moves them to its device); `regime` (default: the
    case's own, `input_regime`) scales a model layer's drawn hidden states."""
    P = case.problem
    seed = case.seed + _INPUT_SEED_OFFSET
    if case.source is not None and P.activation_format == "standard":
        return _model_layer_inputs(case, seed, input_regime(case) if regime is None
                                   else regime)
    if P.activation_format == "batched":
        x, counts = make_batched_inputs(P, seed=seed)
        return Inputs(x, None, None, counts)
    x, weights, ids = make_inputs(P, seed=seed)
    if P.topk == 1:
        # a renormalized top-1 weight is exactly 1: a router weight applied twice, or not at
        # all, would not show; top-1 routers (Llama 4) use the sigmoid score as is
        gen = torch.Generator().manual_seed(seed + 1)
        weights = torch.sigmoid(torch.randn(P.M, 1, generator=gen)).to(weights.dtype)
    if case.routing != "random" and P.M:
        ids = _route(case, ids, torch.Generator().manual_seed(seed))
    return Inputs(x, weights, ids)


def _route(case: Case, ids: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Replace the random ids by the case's routing pattern (distinct experts per token)."""
    P = case.problem
    n = P.global_num_experts
    local = [g for g in range(n) if P.expert_map is None or P.expert_map[g] != -1]
    if case.routing == "skewed":
        # every token's first choice is one local expert; the rest drawn from the others
        hot = local[int(torch.randint(len(local), (1,), generator=gen))]
        pool = [g for g in range(n) if g != hot]
        first = [hot]
    else:  # sparse: tokens only ever reach the even global experts
        pool, first = list(range(0, n, 2)), []
        if len(pool) < P.topk:
            pool = list(range(n))  # too few experts to leave any empty
    rows = []
    for _ in range(P.M):
        pick = torch.randperm(len(pool), generator=gen)[:P.topk - len(first)]
        rows.append(first + [pool[i] for i in pick.tolist()])
    return torch.tensor(rows, dtype=ids.dtype)


def _model_layer_inputs(case: Case, seed: int, regime: str) -> Inputs:
    """A model layer's case: the first M rows of its `--inputs` file (else x drawn from the
    seed, scaled to the regime's share of GEMM1's calibrated amax), routed by the layer's
    own router ("router"), else as any case is."""
    from .model_layers import model_layer, read_inputs, route

    P, src = case.problem, case.source
    x, weights, ids = make_inputs(P, seed=seed)
    if src.inputs is not None:
        x = read_inputs(src.inputs, P.K)[:P.M].to(P.torch_dtype)
        if x.shape[0] != P.M:
            raise ValueError(f"--inputs {src.inputs}: {x.shape[0]} rows, the case needs {P.M}")
    elif regime in REGIME_SHARE and P.M:
        top = layer_calibrated_amax(case)
        if top is None:
            raise ValueError(f"{src.label}: regime {regime!r} needs static input scales")
        x32 = x.to(torch.float32)
        x = (x32 * (REGIME_SHARE[regime] * top / x32.abs().max())).to(P.torch_dtype)
    if case.routing == "router":
        weights, ids = route(model_layer(src.folder, src.layer), x, P.topk)
    elif case.routing != "random" and P.M:
        ids = _route(case, ids, torch.Generator().manual_seed(seed))
    return Inputs(x, weights, ids)
