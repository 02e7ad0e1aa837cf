"""`BaseBackend`: the protocol's bookkeeping shared by every built-in backend (layer creation,
checkpoint validation, the process-once guard, input validation before any kernel launch).
A backend supplies its claims, its conversion and its forward pass."""

from __future__ import annotations

from collections import Counter

import torch
from moecert.reference.schemes import ACTIVATIONS, VariantError

from .errors import BackendError, UnsupportedError, check_layer
from .layer import PROCESSED, MoELayer
from .platform import Platform, platform_of_device
from .quant_config import Variant


class BaseBackend:
    name = "base"
    version = "0"

    # --- what a backend provides ------------------------------------------------------------
    def available(self) -> str | None:
        return None

    def claims(self, variant: Variant, problem, platform: Platform) -> str | None:
        """None if the backend runs (variant, problem) on `platform`, else exactly why not."""
        raise NotImplementedError

    def convert(self, layer: MoELayer) -> None:
        """Checkpoint tensors -> kernel format, in place (called once per load)."""
        raise NotImplementedError

    def forward(self, layer: MoELayer, x: torch.Tensor, topk_weights, topk_ids,
                out: torch.Tensor, expert_num_tokens) -> None:
        """Write the layer's output for validated inputs into `out`."""
        raise NotImplementedError

    # --- the protocol ----------------------------------------------------------------------
    def supports(self, variant: Variant, problem, platform: Platform | None = None
                 ) -> str | None:
        try:  # a scheme name too, for callers outside the harness (its defaults)
            variant = Variant.of(variant)
        except VariantError as e:
            return str(e)
        if problem.activation not in ACTIVATIONS:
            return f"activation {problem.activation} unknown"
        # Shapes no checkpoint can hold are refused before any backend is asked (the oracle,
        # the suites: schemes.checkpoint_shape_issue); loading one names the tensor.
        return self.claims(variant, problem, platform or Platform.current())

    def create_layer(self, checkpoint, problem) -> MoELayer:
        quant = Variant.of(checkpoint)
        device = _checkpoint_device(checkpoint)
        why = self.available() if device.type != "cpu" else None
        why = why or self.claims(quant, problem, platform_of_device(device))
        if why:
            raise UnsupportedError(self.name, why)
        layer = MoELayer(self.name, quant, problem, device)
        self.load_weights(layer, checkpoint)
        return layer

    def load_weights(self, layer: MoELayer, checkpoint) -> None:
        check_layer(layer, MoELayer, self.name)
        quant = Variant.of(checkpoint)
        if quant != layer.quant:
            raise BackendError("checkpoint", f"the layer's quantization {layer.quant}",
                               str(quant))
        layer.load(checkpoint)

    def process_weights_after_loading(self, layer: MoELayer) -> None:
        check_layer(layer, MoELayer, self.name)
        if getattr(layer, PROCESSED, False):
            return  # weights are in kernel format already: converting again would scramble them
        _check_biases(layer)
        self.convert(layer)
        setattr(layer, PROCESSED, True)

    def apply(self, layer: MoELayer, hidden_states, topk_weights, topk_ids, *, out=None,
              **opts) -> torch.Tensor:
        check_layer(layer, MoELayer, self.name)
        if not layer.processed:
            raise BackendError("layer", "process_weights_after_loading before apply",
                               "an unprocessed layer")
        expert_num_tokens = opts.pop("expert_num_tokens", None)
        if opts:
            raise BackendError("apply options", "expert_num_tokens only",
                               ", ".join(sorted(opts)))
        P = layer.problem
        x = _check_activations(layer, hidden_states)
        if P.activation_format == "batched":
            _check_int("expert_num_tokens", expert_num_tokens, (P.E,), layer.device,
                       0, x.shape[1])
            shape = tuple(x.shape)
        else:
            M = x.shape[0]
            _check_float("topk_weights", topk_weights, (M, P.topk), layer.device)
            _check_int("topk_ids", topk_ids, (M, P.topk), layer.device, 0,
                       P.global_num_experts - 1)
            shape = (M, P.K)
        # kernels index the routing tensors as dense row-major arrays: copies of strided views
        topk_weights, topk_ids, expert_num_tokens = (
            t.contiguous() if isinstance(t, torch.Tensor) else t
            for t in (topk_weights, topk_ids, expert_num_tokens))
        if out is None:
            out = torch.empty(shape, dtype=P.torch_dtype, device=layer.device)
        else:
            _check_out(out, shape, P.torch_dtype, layer.device)
        if out.numel():
            self.forward(layer, x, topk_weights, topk_ids, out, expert_num_tokens)
        return out


def _checkpoint_device(checkpoint) -> torch.device:
    """The device most of the checkpoint's tensors are on; the others are named."""
    tensors = getattr(checkpoint, "tensors", None)
    if not isinstance(tensors, dict) or not tensors:
        raise BackendError("checkpoint", "an object with a non-empty dict of tensors in "
                           ".tensors", type(checkpoint).__name__)
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            raise BackendError(name, "a torch.Tensor", f"{type(t).__module__}.{type(t).__name__}")
    by_device = Counter(t.device for t in tensors.values())
    (device, n), *others = by_device.most_common()
    if others and others[0][1] == n:  # no majority: name them all
        raise BackendError(", ".join(tensors), "every tensor on one device",
                           ", ".join(f"{k} on {t.device}" for k, t in tensors.items()))
    for name, t in tensors.items():
        if t.device != device:
            raise BackendError(name, f"device {device} (the other tensors')", str(t.device))
    return device


def _check_biases(layer: MoELayer) -> None:
    """Biases are added as they are by every backend: they must be finite."""
    for name in ("w13_bias", "w2_bias"):
        if layer.has(name):
            bad = int((~torch.isfinite(layer.get(name))).sum())
            if bad:
                raise BackendError(name, "finite values", f"{bad} non-finite entries")


def _check_activations(layer: MoELayer, x) -> torch.Tensor:
    P = layer.problem
    if not isinstance(x, torch.Tensor):
        raise BackendError("hidden_states", "a torch.Tensor", type(x).__name__)
    if x.dtype != P.torch_dtype:
        raise BackendError("hidden_states", f"dtype {P.torch_dtype} (problem.dtype {P.dtype})",
                           str(x.dtype))
    if x.device != layer.device:
        raise BackendError("hidden_states", f"device {layer.device}", str(x.device))
    if P.activation_format == "batched":
        if x.dim() != 3 or x.shape[0] != P.E or x.shape[2] != P.K:
            raise BackendError("hidden_states", f"batched shape [{P.E}, max_tokens, {P.K}]",
                               str(list(x.shape)))
    elif x.dim() != 2 or x.shape[1] != P.K:
        raise BackendError("hidden_states", f"shape [M, {P.K}]", str(list(x.shape)))
    return x.contiguous()


def _check_float(name, t, shape, device) -> None:
    if not isinstance(t, torch.Tensor):
        raise BackendError(name, f"a float32 tensor of shape {list(shape)}", type(t).__name__)
    if t.dtype != torch.float32:
        raise BackendError(name, "dtype torch.float32", str(t.dtype))
    if tuple(t.shape) != tuple(shape):
        raise BackendError(name, f"shape {list(shape)}", str(list(t.shape)))
    if t.device != device:
        raise BackendError(name, f"device {device}", str(t.device))


def _check_int(name, t, shape, device, lo, hi) -> None:
    if not isinstance(t, torch.Tensor):
        raise BackendError(name, f"an int32 tensor of shape {list(shape)}", type(t).__name__)
    if t.dtype not in (torch.int32, torch.int64):
        raise BackendError(name, "dtype torch.int32 or torch.int64", str(t.dtype))
    if tuple(t.shape) != tuple(shape):
        raise BackendError(name, f"shape {list(shape)}", str(list(t.shape)))
    if t.device != device:
        raise BackendError(name, f"device {device}", str(t.device))
    if t.numel():
        # one reduction, one sync: bad ids must never reach a kernel
        tmin, tmax = torch.stack(torch.aminmax(t)).tolist()
        if tmin < lo or tmax > hi:
            raise BackendError(name, f"values in [{lo}, {hi}]", f"values in [{tmin}, {tmax}]")


def _check_out(out, shape, dtype, device) -> None:
    if not isinstance(out, torch.Tensor):
        raise BackendError("out", "a torch.Tensor", type(out).__name__)
    if tuple(out.shape) != tuple(shape) or out.dtype != dtype or out.device != device:
        raise BackendError("out", f"{dtype} {list(shape)} on {device}",
                           f"{out.dtype} {list(out.shape)} on {out.device}")
    if not out.is_contiguous():
        raise BackendError("out", "a contiguous tensor", "a strided view")
