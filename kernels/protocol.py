"""The backend protocol (SPEC section 3) and the canonical weight form backends may export."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import torch
from moecert.reference.schemes.canonical import CanonicalLinear

from .quant_config import Variant

# `moecert.reference.MoEProblem` and `moecert.reference.Checkpoint` (kernels may not import the
# reference): the layer's shapes and options, and the checkpoint's tensors plus its variant
# (`.variant`, a Variant; .scheme, .group_size, .sym, ... read it;
# `Variant.of(checkpoint)` returns it).
Problem = Any
Checkpoint = Any


@runtime_checkable
class Backend(Protocol):
    """How an inference engine holds a quantized MoE layer: load, process once, apply.

    Register an instance with `register_backend(obj)` or the entry-point group
    `moecert.backends`; `moecert run --backend NAME` then runs it like a built-in. To run an
    existing backend's code for a subset of its schemes, see `claim_subset`.

    Optional members the harness uses when present:
      `canonical_weights(layer) -> dict[str, ExportedLinear]`: the processed layer's weights
        read back out of the kernel format ("w13", "w2"); the `canonical` check compares them
        with the checkpoint bit for bit (skipped without it). See `CanonicalExport`.
      `version: str`: recorded with the results (column `backend_version`, once per backend).
      `describe(layer) -> str`: what this processed layer runs, in the backend's words (an
        engine's chosen experts kernel, a mode); called once per case after
        `process_weights_after_loading`, recorded in every row of the case (column
        `backend_detail`). See `DescribesLayer`.
      `numerics(layer) -> dict`: where the processed layer computes something other than the
        checkpoint's literal scheme, what (keys `NUMERICS_KEYS`); the harness judges the case
        against that reading of the same checkpoint (column `numerics`). See
        `DeclaresNumerics`.
      `reload_declined(layer, checkpoint) -> str | None`: why `checkpoint` cannot be loaded
        into the processed `layer` at all (an engine that reads a model folder itself, handed
        other tensors), else None; the `reload` check then skips with that reason (a check
        the backend cannot run is declined, not an expected failure).
      `supports_model_layer(folder, layer, variant, problem) -> str | None`: the claim for a
        case whose checkpoint is decoder layer `layer` of the model folder `folder` (an
        engine that reads the folder itself, with its own config and loader, may answer
        differently from `supports` for the variant); used instead of `supports` there.
    """

    name: str  # unique in the registry, e.g. "triton", "torch", "vendor-marlin"

    def available(self) -> str | None:
        """None if the backend can run on this machine, else why not (a missing driver)."""

    def supports(self, variant: Variant, problem: Problem) -> str | None:
        """None if the backend claims this quantization on this problem, else exactly why not
        (the reason is shown to users, and unclaimed cases count as unsupported).

        `variant` is the facts' `Variant`, never a bare name: the name is `variant.scheme`
        ("gptq-int4", ...) and its attributes `group_size`, `sym`, `act_order`,
        `checkpoint_format`, `weight_strategy`, `activation`, `mx_scale_rule`, each resolved
        from the scheme's defaults. Comparing the Variant itself with a string raises
        TypeError. Only shapes some checkpoint can hold are asked about
        (the harness and the oracle drop the others first: `schemes.checkpoint_shape_issue`).

        A backend whose claims depend on the platform declares a keyword parameter
        `platform: Platform | None = None`; the oracle and the harness then pass the platform
        being selected for (simulated ones too: `moecert list` asks about every platform) and
        a backend must judge that platform, not the machine it runs on. Without the parameter
        it is called with two arguments.
        """

    def create_layer(self, checkpoint: Checkpoint, problem: Problem) -> torch.nn.Module:
        """A layer on the checkpoint's device with the checkpoint loaded (`load_weights`);
        raises (naming the tensor) for a checkpoint that does not fit the problem, and for a
        case the backend does not claim."""

    def load_weights(self, layer: torch.nn.Module, checkpoint: Checkpoint) -> None:
        """(Re)load checkpoint tensors into `layer`, also into a processed one: the next
        `process_weights_after_loading` converts the new weights (the `reload` check). Never
        modifies the checkpoint's tensors."""

    def process_weights_after_loading(self, layer: torch.nn.Module) -> None:
        """Convert the loaded weights to the kernel format in place; a second call is a no-op."""

    def apply(self, layer: torch.nn.Module, hidden_states: torch.Tensor,
              topk_weights: torch.Tensor, topk_ids: torch.Tensor, *,
              out: torch.Tensor | None = None, **opts) -> torch.Tensor:
        """The layer's output [M, K] (batched format: [E, max_tokens, K]) in the problem's
        dtype; writes into `out` when given and returns it. `opts`: `expert_num_tokens` for
        the batched format."""


@runtime_checkable
class CanonicalExport(Protocol):
    """The optional export of a backend's processed weights (the `canonical` check)."""

    def canonical_weights(self, layer: torch.nn.Module) -> dict[str, ExportedLinear]:
        """{"w13": ..., "w2": ...}: the processed layer's weights read back out of the kernel
        format, exactly (no float rounding beyond the kernel format's own)."""


@runtime_checkable
class DescribesLayer(Protocol):
    """The optional description of a processed layer (column `backend_detail`)."""

    def describe(self, layer: torch.nn.Module) -> str:
        """One line: what runs for this layer, e.g. the kernel an engine's own selection
        chose for it ("CPU (CPUExpertsInt4); CPU AMX gate forced")."""


# The keys a `numerics(layer)` declaration may hold (conformance/harness/numerics.py reads them):
#   activation          an activation mode of the scheme table the kernel quantizes its GEMM
#                       inputs with (an int4 checkpoint run with int8 per-token activations:
#                       "dynamic-token", judged as w4a8-int8)
#   weight_scale_dtype  the torch dtype name the kernel keeps the weight scales in ("bfloat16")
#   w13_requantized     True: per-tensor w1/w3 shard scales collapsed to their maximum and
#                       the fp8 / int8 weights requantized to it; a float dtype name
#                       ("float16"): each shard dequantized in that dtype first, its scale
#                       cast to it (vLLM's per_tensor_dequantize on CUDA)
#   weights_dequantized a 16-bit float dtype name ("bfloat16", "float16"): the engine
#                       dequantized the checkpoint's weights to it at load and runs the
#                       unquantized layer (transformers' FineGrainedFP8 without an fp8 GPU)
#   bias_after_rounding True: each linear's product is rounded to the activation dtype
#                       before its bias is added, and the sum rounded again (gpt-oss's own
#                       definition: OpenAI's reference adds the bias after the tensor-parallel
#                       all-reduce of the bf16 product; transformers' gpt-oss experts)
#   sum_in_activation_dtype True: each expert's output rounded to the activation dtype,
#                       weighted in float32 and rounded again, and the routed sum accumulated
#                       in the activation dtype expert by expert, in increasing expert id
#                       (transformers' eager experts: `index_add_` into a bf16 buffer)
#   activation_scale_pow2 True: dynamic 1 x 128 activation group scales rounded up to a power
#                       of two (DeepGEMM's UE8M0 scales, vLLM's default where DeepGEMM loads)
#   router_weight_in_activation_dtype True: with the router weight applied to the input, the
#                       weight cast to the activation dtype first (x * r.to(x.dtype))
#   router_weight_on_gemm1_output True: with the router weight applied to the input, the weight
#                       multiplies GEMM1's output before rounding, the input unscaled
#                       (vLLM's fused_experts kernel: MUL_ROUTED_WEIGHT on GEMM1)
#   gate_activation_in_activation_dtype True: act(gate) rounded to the activation dtype before
#                       it multiplies up (vLLM's CUDA silu_and_mul)
#   activation_round_half_away True: dynamic per-token int8 activation codes computed as
#                       x * (127 / amax) in float32, rounded half away from zero (vLLM's
#                       per_token_quant_int8 on CUDA)
#   activation_fp8_float32 True: E4M3 activation codes computed in float32 from a float32
#                       scale (per tensor x * fl(1 / s), per token x / s; a dynamic
#                       s = fl(amax / 448)): vLLM's CUDA scaled_fp8_quant kernels
NUMERICS_KEYS = ("activation", "weight_scale_dtype", "w13_requantized", "weights_dequantized",
                 "bias_after_rounding", "sum_in_activation_dtype", "activation_scale_pow2",
                 "router_weight_in_activation_dtype", "router_weight_on_gemm1_output",
                 "gate_activation_in_activation_dtype", "activation_round_half_away",
                 "activation_fp8_float32")


@runtime_checkable
class DeclaresNumerics(Protocol):
    """The optional declaration of a processed layer's numerics (column `numerics`)."""

    def numerics(self, layer: torch.nn.Module) -> dict:
        """{key: value} for each way the layer's computation differs from the checkpoint's
        scheme (keys `NUMERICS_KEYS`); {} when it computes the scheme as written. Called
        once per case after `process_weights_after_loading`."""


# A processed layer's weights of one linear in the canonical form, read back out of the kernel
# format: the reference's own type (the format facts package), so that the two cannot drift.
#     W[e, o, i] = (codes[e, o, i] - zeros[e, o, gi]) * scales[e, o // rows, gi] * global[e, o]
#     gi = g_idx[e, i] if g_idx is not None else i // cols,   (rows, cols) = block
# codes are signed int32 (integer formats) or float64 element values (fp8, 16-bit).
ExportedLinear = CanonicalLinear
