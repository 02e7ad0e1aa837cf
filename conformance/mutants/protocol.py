"""Mutants of the backend protocol around correct math: processing, reloading, inputs and
claims."""

from __future__ import annotations

import dataclasses

from moecert.kernels.native import TorchBackend
from moecert.kernels.xpu import XpuBackend

from .conversion import swap_halves, swap_w13_halves


class ProcessNotIdempotent(TorchBackend):
    """The kernel wants w13 as [up; gate]; the reorder sits outside the process-once guard
    (vLLM #42768 class), so a second process_weights_after_loading swaps the halves back and
    the kernel then reads gate as up."""

    name = "mutant-process-not-idempotent"

    def process_weights_after_loading(self, layer):
        super().process_weights_after_loading(layer)  # the conversion, guarded
        # the reorder for the kernel, outside the guard: every call swaps again
        layer.meta["w13_reordered"] = swap_w13_halves(layer)

    def _kernel_swaps(self, layer) -> bool:
        return layer.meta.get("w13_reordered", False)

    def expert_weight(self, layer, p, e):
        w = super().expert_weight(layer, p, e)
        return swap_halves(w, 0) if p == "w13" and self._kernel_swaps(layer) else w

    def bias(self, layer, name):
        b = super().bias(layer, name)
        if b is not None and name == "w13_bias" and self._kernel_swaps(layer):
            return swap_halves(b, 1)
        return b

    def canonical_weights(self, layer):
        exported = super().canonical_weights(layer)
        if not self._kernel_swaps(layer):
            return exported
        w13 = exported["w13"]
        fields = {"codes": swap_halves(w13.codes)}
        if w13.scales.shape[1] > 1:
            fields["scales"] = swap_halves(w13.scales)
        if w13.zeros is not None:
            fields["zeros"] = swap_halves(w13.zeros)
        return {**exported, "w13": dataclasses.replace(w13, **fields)}


class ReloadIgnored(TorchBackend):
    """load_weights into a processed layer returns without loading (the loader skips
    parameters already in kernel format): the layer keeps serving the old weights."""

    name = "mutant-reload-ignored"

    def load_weights(self, layer, checkpoint):
        if getattr(layer, "processed", False):
            return
        super().load_weights(layer, checkpoint)


class InputOverwritten(TorchBackend):
    """vLLM's fused_experts(inplace=True) left on: the output is also written into
    hidden_states (standard format)."""

    name = "mutant-input-mutated"

    def apply(self, layer, hidden_states, topk_weights, topk_ids, *, out=None, **opts):
        out = super().apply(layer, hidden_states, topk_weights, topk_ids, out=out, **opts)
        if layer.problem.activation_format == "standard" and hidden_states.shape == out.shape:
            hidden_states.copy_(out)
        return out


class ClaimsAsymmetric(XpuBackend):
    """The XPU int4 path claims asymmetric int4 (the zero-point check left out of its
    claims) but its kernel has no zero points: loading such a checkpoint raises."""

    name = "mutant-claims-asym"

    def claims(self, variant, problem, platform):
        return super().claims(dataclasses.replace(variant, sym=True), problem, platform)
