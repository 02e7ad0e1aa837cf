"""Planted bugs around any inner backend: `wrap(kind, inner)` is a backend that runs `inner`
(a registered backend's name, e.g. vLLM's `vllm-cpu-forced`) with one bug of the classes
`MUTANTS` plants in the torch backend, placed where an engine's glue would put it: in the
checkpoint it hands the kernel, in the routing it passes, or in the output it returns. It
claims what `inner` claims. The judge of the judge on an engine moecert does not own: every
wrapped bug the engine's claims reach must be flagged
(tests/conformance/mutants/test_vllm_mutants.py).
"""

from __future__ import annotations

import dataclasses

import torch
from moecert.kernels.delegate import DelegatingBackend
from moecert.reference.schemes.tensors import declared_tensors


class WrappedMutant(DelegatingBackend):
    """`inner` with one planted bug; subclasses override a hook."""

    kind = ""
    bug = ""
    expected_checks: tuple[str, ...] = ()

    def __init__(self, inner: str):
        super().__init__(inner, f"wrapped-{self.kind}@{inner}")
        self._problem_of: dict[int, object] = {}  # layer id -> its problem (for routing)

    def applies(self, quant, problem) -> bool:
        """Whether the bug changes anything on a case of `quant` and `problem`."""
        return True

    # hooks -----------------------------------------------------------------------------
    def checkpoint(self, ckpt):
        return ckpt

    def routing(self, topk_weights, topk_ids, problem):
        return topk_weights, topk_ids

    def output(self, out, hidden_states):
        return out

    # the protocol --------------------------------------------------------------------------
    def create_layer(self, checkpoint, problem):
        layer = super().create_layer(self.checkpoint(checkpoint), problem)
        self._problem_of[id(layer)] = problem
        return layer

    def load_weights(self, layer, checkpoint):
        self.delegate.load_weights(layer, self.checkpoint(checkpoint))

    def apply(self, layer, hidden_states, topk_weights, topk_ids, *, out=None, **opts):
        w, ids = self.routing(topk_weights, topk_ids, self._problem_of.get(id(layer)))
        y = self.delegate.apply(layer, hidden_states, w, ids, out=out, **opts)
        return self.output(y, hidden_states)


def _tensors(ckpt, fn) -> object:
    decls = declared_tensors(ckpt)
    # changed tensors are no longer a model folder's: origin cleared, so that an engine
    # adapter takes them instead of re-reading the folder
    return dataclasses.replace(ckpt, origin=None, tensors={
        n: fn(n, decls[n].role, t) if n in decls else t for n, t in ckpt.tensors.items()})


class ScalesX1005(WrappedMutant):
    kind = "scales-x1.005"
    bug = "Every float weight scale handed to the kernel 0.5% high."
    expected_checks = ("accuracy",)

    def applies(self, quant, problem) -> bool:
        return quant.info.scale_encoding == "float"

    def checkpoint(self, ckpt):
        return _tensors(ckpt, lambda n, role, t: (t.double() * 1.005).to(t.dtype)
                        if role == "scale" and t.is_floating_point() else t)


class BiasDropped(WrappedMutant):
    kind = "bias-dropped"
    bug = "The w13 bias handed to the kernel as zeros."
    expected_checks = ("accuracy",)

    def applies(self, quant, problem) -> bool:
        return bool(problem.bias)

    def checkpoint(self, ckpt):
        return _tensors(ckpt, lambda n, role, t: torch.zeros_like(t) if n == "w13_bias" else t)


class ExpertIdsShifted(WrappedMutant):
    kind = "expert-ids-shifted"
    bug = "topk ids passed one expert off (e + 1 mod E), as a global/local id mix-up does."
    expected_checks = ("accuracy",)

    def routing(self, topk_weights, topk_ids, problem):
        if topk_ids is None or problem is None:
            return topk_weights, topk_ids
        return topk_weights, (topk_ids + 1) % problem.E


class LastRowUnwritten(WrappedMutant):
    kind = "last-row-unwritten"
    bug = "The output's last row left as the buffer held it."
    expected_checks = ("fully_written", "accuracy")

    def apply(self, layer, hidden_states, topk_weights, topk_ids, *, out=None, **opts):
        if out is None or out.shape[0] == 0:
            return super().apply(layer, hidden_states, topk_weights, topk_ids, out=out,
                                 **opts)
        keep = out[-1].clone()
        y = super().apply(layer, hidden_states, topk_weights, topk_ids, out=out, **opts)
        out[-1] = keep
        return y


class InputOverwritten(WrappedMutant):
    kind = "input-overwritten"
    bug = "The kernel writes its output into hidden_states too."
    expected_checks = ("no_mutation",)

    def output(self, out, hidden_states):
        if hidden_states.shape == out.shape:
            hidden_states.copy_(out)
        return out


WRAPPED = (ScalesX1005, BiasDropped, ExpertIdsShifted, LastRowUnwritten, InputOverwritten)


def wrap(kind: str, inner: str) -> WrappedMutant:
    """The wrapped mutant `kind` around the registered backend `inner`."""
    for cls in WRAPPED:
        if cls.kind == kind:
            return cls(inner)
    raise KeyError(f"unknown wrapped mutant {kind!r}; known: "
                   f"{', '.join(c.kind for c in WRAPPED)}")


__all__ = ["WRAPPED", "WrappedMutant", "wrap"]
