"""`MoEProblem`: the per-case options of one MoE layer call (SPEC section 2)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .errors import CheckpointError
from .schemes import ACTIVATION_DTYPES, ACTIVATION_FORMATS, ACTIVATIONS, GATED_ACTIVATIONS

_TORCH_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass(frozen=True)
class MoEProblem:
    """Shape and options of one MoE call.

    E is the number of experts held by this rank (the checkpoint's first dimension). With
    `expert_map` (length = global expert count, entries a local index or -1), topk ids are
    global and experts mapped to -1 contribute nothing.
    """

    M: int
    K: int
    N: int
    E: int
    topk: int
    dtype: str = "bf16"
    activation: str = "silu"
    bias: bool = False
    apply_router_weight_on_input: bool = False
    expert_map: tuple[int, ...] | None = None
    activation_format: str = "standard"
    seed: int = 0

    def __post_init__(self):
        for field in ("M", "K", "N", "E", "topk"):
            value = getattr(self, field)
            if not isinstance(value, int) or value < (0 if field == "M" else 1):
                raise CheckpointError(f"problem.{field}", "a positive int (M may be 0)",
                                      repr(value))
        if self.topk > self.global_num_experts:
            raise CheckpointError("problem.topk", f"<= {self.global_num_experts} experts",
                                  str(self.topk))
        _check_choice("problem.dtype", self.dtype, ACTIVATION_DTYPES)
        _check_choice("problem.activation", self.activation, ACTIVATIONS)
        _check_choice("problem.activation_format", self.activation_format, ACTIVATION_FORMATS)
        if self.apply_router_weight_on_input and self.topk != 1:
            raise CheckpointError("problem.apply_router_weight_on_input", "topk == 1",
                                  f"topk == {self.topk}")
        if self.expert_map is not None:
            local = [i for i in self.expert_map if i != -1]
            if sorted(local) != list(range(self.E)):
                raise CheckpointError(
                    "problem.expert_map", f"each local expert 0..{self.E - 1} exactly once, "
                    "others -1", str(self.expert_map))

    @property
    def torch_dtype(self) -> torch.dtype:
        return _TORCH_DTYPES[self.dtype]

    @property
    def gated(self) -> bool:
        return self.activation in GATED_ACTIVATIONS

    @property
    def w13_rows(self) -> int:
        """Rows of w13: gate and up (2N) for gated activations, N otherwise."""
        return 2 * self.N if self.gated else self.N

    @property
    def global_num_experts(self) -> int:
        return len(self.expert_map) if self.expert_map is not None else self.E


def _check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise CheckpointError(name, f"one of {', '.join(choices)}", repr(value))
