"""A case's layer inputs, fresh from its seed: hidden states and a routing of the kind the case
names (random, one expert taking every token, half of the experts left empty)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from moecert.reference import make_batched_inputs, make_inputs

from .cases import Case

# Inputs draw from their own stream: seed s must not reuse the checkpoint's random numbers.
_INPUT_SEED_OFFSET = 7919


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


def case_inputs(case: Case) -> Inputs:
    """CPU inputs of `case` (the caller moves them to its device)."""
    P = case.problem
    seed = case.seed + _INPUT_SEED_OFFSET
    if case.source is not None and P.activation_format == "standard":
        return _model_layer_inputs(case, seed)
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


def _model_layer_inputs(case: Case, seed: int) -> Inputs:
    """A model layer's case: the first M rows of its `--inputs` file (else x drawn from the
    seed), routed by the layer's own router ("router"), else as any case is."""
    from .model_layers import model_layer, read_inputs, route

    P, src = case.problem, case.source
    x, weights, ids = make_inputs(P, seed=seed)
    if src.inputs is not None:
        x = read_inputs(src.inputs, P.K)[:P.M].to(P.torch_dtype)
        if x.shape[0] != P.M:
            raise ValueError(f"--inputs {src.inputs}: {x.shape[0]} rows, the case needs {P.M}")
    if case.routing == "router":
        weights, ids = route(model_layer(src.folder, src.layer), x, P.topk)
    elif case.routing != "random" and P.M:
        ids = _route(case, ids, torch.Generator().manual_seed(seed))
    return Inputs(x, weights, ids)
