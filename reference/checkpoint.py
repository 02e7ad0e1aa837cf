"""`Checkpoint`: the tensors one MoE layer holds after loading, plus how to read them."""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from .errors import CheckpointError
from .schemes import FormatRecord, Scheme, Variant, VariantError


@dataclass(init=False)
class Checkpoint:
    """One MoE layer's checkpoint tensors, named as vLLM names them (SPEC section 2), and the
    scheme variant they are stored as.

      variant       the scheme and its attributes (`schemes.Variant`: group size, zero
                    points, checkpoint format, act order, weight strategy, activation mode,
                    MX scale rule), read also as the checkpoint's own attributes
                    (`ckpt.group_size` is `ckpt.variant.group_size`)
      tensors       name -> tensor
      first_expert  the layer's index of this checkpoint's expert 0 (set by slice_experts,
                    so that errors give positions in the whole layer)
      origin        (model folder, decoder layer) the tensors were read from unchanged (set
                    by the loader; None for anything else). An engine adapter may hand the
                    engine the folder itself (its own loader on its own files); whoever
                    changes the tensors clears it.
      bias_after_rounding
                    the layer's arithmetic as a declared reading has it (harness/numerics.py):
                    True where each linear's product is rounded to the activation dtype
                    before its bias is added, the sum rounded again (gpt-oss's own definition,
                    OpenAI's gpt_oss/torch/model.py: the bias follows the tensor-parallel
                    all-reduce of the bf16 product); False (a file's own reading): product
                    plus bias rounded once. No effect without biases.
      sum_in_activation_dtype
                    likewise a declared reading's: True where each expert's output is rounded
                    to the activation dtype, weighted in float32, rounded again and added to
                    an activation-dtype sum expert by expert in increasing expert id (the
                    eager per-expert loop of transformers' modeling code); False: the routed
                    sum exact, rounded once.
      router_weight_in_activation_dtype
                    likewise: True where, with the router weight applied to the input, the
                    weight is first cast to the activation dtype (x * r.to(x.dtype), every
                    vLLM prepare step); False: x * r rounded once.
      router_weight_on_gemm1_output
                    likewise: True where, with the router weight applied to the input, the
                    weight instead multiplies GEMM1's product (before its bias and rounding)
                    and the input is neither scaled nor rounded (vLLM's fused_experts Triton
                    kernel: GEMM1's MUL_ROUTED_WEIGHT epilogue, in float32): (r x) W + b in
                    exact arithmetic, not once the input is quantized or rounded. vLLM's
                    kernel scales GEMM1's bias too, which this reading does not: a biased
                    layer shows it as a failure.
      activation_scale_pow2
                    likewise: True where dynamic 1 x 128 activation scales are rounded up to a
                    power of two (DeepGEMM's UE8M0 scales; vLLM quantizes so wherever DeepGEMM
                    loads, `VLLM_USE_DEEP_GEMM_E8M0` on by default); False: amax / 448.
      gate_activation_in_activation_dtype
                    likewise: True where silu(gate) / gelu(gate) is rounded to the activation
                    dtype before it multiplies up, the product rounded again (vLLM's CUDA
                    `silu_and_mul`: its activation returns the element type; eager
                    `F.silu(gate) * up` on 16-bit tensors); False: act(gate) * up rounded once.
      activation_fp8_float32
                    likewise: True where E4M3 activation codes are computed in float32 from a
                    float32 scale as vLLM's CUDA quantizers do (per tensor x * fl(1 / s), per
                    token x / s, a dynamic s = fl(amax / 448): `qdq_e4m3_float32`); False:
                    the exact ratio rounded.
      activation_round_half_away
                    likewise: True where dynamic per-token int8 activation codes are computed
                    as x * (127 / amax) in float32 and rounded half away from zero (vLLM's
                    per_token_quant_int8, the Triton MoE path's quantizer on CUDA); False:
                    the exact ratio rounded half to even.

    Built from a Variant, or from a scheme name and the variant's attributes (None: the
    scheme's default): `Checkpoint("gptq-int4", tensors, group_size=32)`. A variant attribute
    the scheme does not take is a CheckpointError naming `checkpoint.<attribute>`.
    `dataclasses.replace(ckpt, activation="none")` changes the variant's attribute
    (`Variant.replace`: the attributes the variant took from the defaults resolved again).
    """

    variant: Variant
    tensors: dict[str, torch.Tensor]
    first_expert: int = 0
    origin: tuple[str, int] | None = None
    bias_after_rounding: bool = False
    sum_in_activation_dtype: bool = False
    activation_scale_pow2: bool = False
    router_weight_in_activation_dtype: bool = False
    router_weight_on_gemm1_output: bool = False
    gate_activation_in_activation_dtype: bool = False
    activation_round_half_away: bool = False
    activation_fp8_float32: bool = False

    def __init__(self, scheme: str | Variant | None = None, tensors=None, *,
                 variant: Variant | None = None, first_expert: int = 0,
                 origin: tuple[str, int] | None = None, bias_after_rounding: bool = False,
                 sum_in_activation_dtype: bool = False, activation_scale_pow2: bool = False,
                 router_weight_in_activation_dtype: bool = False,
                 router_weight_on_gemm1_output: bool = False,
                 gate_activation_in_activation_dtype: bool = False,
                 activation_round_half_away: bool = False,
                 activation_fp8_float32: bool = False, **attrs):
        if isinstance(scheme, Variant):
            scheme, variant = None, scheme
        if variant is None:
            variant = checked_variant(scheme, **attrs)
        elif scheme is not None or attrs:  # `replace(ckpt, scheme=..., sym=...)`
            changes = attrs if scheme is None else {**attrs, "scheme": scheme}
            variant = checked_variant(variant, **changes)
        self.variant, self.tensors = variant, tensors
        self.first_expert, self.origin = first_expert, origin
        self.bias_after_rounding = bias_after_rounding
        self.sum_in_activation_dtype = sum_in_activation_dtype
        self.activation_scale_pow2 = activation_scale_pow2
        self.router_weight_in_activation_dtype = router_weight_in_activation_dtype
        self.router_weight_on_gemm1_output = router_weight_on_gemm1_output
        self.gate_activation_in_activation_dtype = gate_activation_in_activation_dtype
        self.activation_round_half_away = activation_round_half_away
        self.activation_fp8_float32 = activation_fp8_float32

    # the variant's attributes, read where a checkpoint is at hand
    scheme = property(lambda self: self.variant.scheme)
    group_size = property(lambda self: self.variant.group_size)
    sym = property(lambda self: self.variant.sym)
    checkpoint_format = property(lambda self: self.variant.checkpoint_format)
    act_order = property(lambda self: self.variant.act_order)
    weight_strategy = property(lambda self: self.variant.weight_strategy)
    activation = property(lambda self: self.variant.activation)
    mx_scale_rule = property(lambda self: self.variant.mx_scale_rule)

    @property
    def info(self) -> Scheme:
        return self.variant.info

    @property
    def record(self) -> FormatRecord:
        """The format record this checkpoint's weights are read with."""
        return self.variant.record

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


def checked_variant(variant: Variant | str, **changes) -> Variant:
    """`variant` (or a scheme name's defaults) with `changes` (`Variant.replace`), a value
    the scheme does not take a CheckpointError naming `checkpoint.<attribute>`: how a
    checkpoint, `synthesize` and the loader check a variant, without an empty Checkpoint."""
    try:
        if isinstance(variant, Variant):
            return variant.replace(**changes) if changes else variant
        return Variant(variant, **changes)
    except VariantError as e:
        raise CheckpointError(f"checkpoint.{e.field}", e.expected, e.found) from None
