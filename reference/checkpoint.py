"""`Checkpoint`: the tensors one MoE layer holds after loading, plus how to read them."""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from .errors import CheckpointError
from .schemes import SCHEMES, STRATEGY_GROUP, get_scheme
from .schemes.elements import MX_SCALE_RULES
from .schemes.records import FormatRecord, get_record


@dataclass
class Checkpoint:
    """One MoE layer's checkpoint tensors, named as vLLM names them (SPEC section 2).

    Attributes other than `scheme` and `tensors` default from the scheme:
      group_size         -1 (one group over the input dimension) or the group length
      sym                no zero points stored when True (default: False for AWQ, else True)
      checkpoint_format  "gptq" (v1, stored zero z-1) / "gptq_v2" / "awq" / "ct-0.17" / "ct-0.18"
      act_order          g_idx tensors present (GPTQ desc_act, compressed-tensors actorder)
      weight_strategy    "tensor", "channel", "group" or "block" scales
      activation         activation quantization mode, see `schemes.ACT_*`
      mx_scale_rule      E8M0 rule for MXFP8 activations: a `schemes.elements.MxScaleRule`
                         value, "floor" (OCP), "even", "ceil", "rceil"
      first_expert       the layer's index of this checkpoint's expert 0 (set by slice_experts,
                         so that errors give positions in the whole layer)
      origin             (model folder, decoder layer) the tensors were read from unchanged
                         (set by the loader; None for anything else). An engine adapter may
                         hand the engine the folder itself (its own loader on its own files);
                         whoever changes the tensors clears it.
    """

    scheme: str
    tensors: dict[str, torch.Tensor]
    group_size: int | None = None
    sym: bool | None = None
    checkpoint_format: str | None = None
    act_order: bool = False
    weight_strategy: str | None = None
    activation: str | None = None
    mx_scale_rule: str = "floor"
    first_expert: int = 0
    origin: tuple[str, int] | None = None

    def __post_init__(self):
        if self.scheme not in SCHEMES:
            raise CheckpointError("checkpoint.scheme", f"one of {', '.join(SCHEMES)}",
                                  repr(self.scheme))
        info = get_scheme(self.scheme)
        defaults = info.defaults()
        if self.checkpoint_format is None:
            self.checkpoint_format = defaults["checkpoint_format"]
        _check_attr("checkpoint_format", self.checkpoint_format, info.checkpoint_formats)
        if self.sym is None:
            self.sym = info.format(self.checkpoint_format).sym
        for attr in ("weight_strategy", "activation", "group_size"):
            if getattr(self, attr) is None:
                setattr(self, attr, defaults[attr])
        _check_attr("weight_strategy", self.weight_strategy, info.strategies)
        _check_attr("activation", self.activation, info.activation_modes)
        if info.group_sizes and self.weight_strategy == STRATEGY_GROUP:
            _check_attr("group_size", self.group_size, info.group_sizes)
        if not self.sym and not info.asym:
            raise CheckpointError("checkpoint.sym", f"True for {self.scheme}", "False")
        if self.act_order and not info.act_order:
            raise CheckpointError("checkpoint.act_order", f"False for {self.scheme}", "True")
        if self.mx_scale_rule not in MX_SCALE_RULES:
            raise CheckpointError("checkpoint.mx_scale_rule",
                                  f"{', '.join(MX_SCALE_RULES[:-1])} or {MX_SCALE_RULES[-1]}",
                                  repr(self.mx_scale_rule))

    @property
    def info(self):
        return get_scheme(self.scheme)

    @property
    def record(self) -> FormatRecord:
        """The format record this checkpoint's weights are read with."""
        return get_record(*self.info.format(self.checkpoint_format).record.split("@"))

    @property
    def num_experts(self) -> int:
        sizes = {name: t.shape[0] for name, t in self.tensors.items() if t.dim() > 0}
        if not sizes:
            raise CheckpointError("checkpoint.tensors", "at least one tensor", "none")
        if len(set(sizes.values())) != 1:
            raise CheckpointError("checkpoint.tensors", "the same expert count in dim 0 of "
                                  "every tensor", ", ".join(f"{n}: {e}" for n, e in sizes.items()))
        return next(iter(sizes.values()))

    def tensor(self, name: str) -> torch.Tensor:
        """The tensor called `name`; CheckpointError if it is missing."""
        if name not in self.tensors:
            raise CheckpointError(name, f"a tensor (scheme {self.scheme}, format "
                                  f"{self.checkpoint_format})",
                                  f"missing; present: {', '.join(sorted(self.tensors)) or 'none'}")
        return self.tensors[name]

    def expect(self, name: str, dtype: torch.dtype | tuple[torch.dtype, ...],
               shape: tuple[int, ...]) -> torch.Tensor:
        """The tensor called `name`, checked against a dtype (or several) and a shape."""
        t = self.tensor(name)
        dtypes = dtype if isinstance(dtype, tuple) else (dtype,)
        if t.dtype not in dtypes:
            raise CheckpointError(name, f"dtype {' or '.join(map(str, dtypes))}", str(t.dtype))
        if tuple(t.shape) != tuple(shape):
            raise CheckpointError(name, f"shape {list(shape)}", str(list(t.shape)))
        return t

    def slice_experts(self, start: int, stop: int) -> Checkpoint:
        """The same checkpoint restricted to experts start..stop-1 (views, no copies)."""
        tensors = {n: (t[start:stop] if t.dim() > 0 else t) for n, t in self.tensors.items()}
        return replace(self, tensors=tensors, first_expert=self.first_expert + start,
                       origin=None)

    def to(self, device: torch.device | str) -> Checkpoint:
        return replace(self, tensors={n: t.to(device) for n, t in self.tensors.items()})


def _check_attr(name, value, allowed):
    if allowed and value not in allowed:
        raise CheckpointError(f"checkpoint.{name}", f"one of {allowed}", repr(value))
