"""The checks of the processed weights and the layer's state: canonical form, a second
apply, a second process call, permuted tokens, a reload."""

from __future__ import annotations

import dataclasses

import torch
from moecert.reference import canonicalize
from moecert.reference.canonical import dequantize_canonical

from ..comparators import assert_bitwise_equal
from ..context import RELOAD_SEED_OFFSET, CaseRun
from ..inputs import Inputs
from .outcome import (
    Outcome,
    bitwise,
    failed,
    judged,
    layer_state,
    passed,
    state_difference,
)


def check_canonical(run: CaseRun) -> Outcome:
    export = getattr(run.backend, "canonical_weights", None)
    if export is None:
        return Outcome("skip", f"{run.backend.name} exposes no canonical_weights")
    exported = export(run.layer)
    want = canonicalize(run.declared_reading(run.case.seed, run.checkpoint))
    for p in ("w13", "w2"):
        mine = dataclasses.replace(exported[p], block=tuple(exported[p].block))
        try:
            assert_bitwise_equal(f"{p} weights", dequantize_canonical(mine).cpu(),
                                 dequantize_canonical(want[p]).cpu())
        except AssertionError as err:
            return failed(f"processed weights differ from the checkpoint's: {err}")
    return passed("both linears' dequantized weights bit for bit")


def check_determinism(run: CaseRun) -> Outcome:
    again = run.apply(run.layer)
    return bitwise(again, run.output, "second apply")


def check_process_twice(run: CaseRun) -> Outcome:
    layer = run.layer
    before = layer_state(layer)
    run.output  # noqa: B018 - the first output, before the second call
    try:
        run.backend.process_weights_after_loading(layer)
        differs = state_difference(before, layer_state(layer))
        if differs:
            return failed(f"the second process_weights_after_loading changed {differs}")
        return bitwise(run.apply(layer), run.output, "apply after a second process call")
    finally:
        run.retire_layer()  # the checks after this one judge a layer processed once


def check_token_order(run: CaseRun) -> Outcome:
    x, w, ids, counts = run.inputs.tensors()
    if run.problem.activation_format == "batched" or x.shape[0] < 2:
        return Outcome("skip", "needs two or more tokens in the standard format")
    perm = torch.randperm(x.shape[0], generator=torch.Generator().manual_seed(run.case.seed))
    perm = perm.to(x.device)
    shuffled = run.apply(run.layer, Inputs(x[perm], w[perm], ids[perm], counts))
    unshuffled = torch.empty_like(shuffled)
    unshuffled[perm] = shuffled
    return judged(run.judge(unshuffled, run.output.to(torch.float64)),
                  "permuted tokens against the first output")


def check_reload(run: CaseRun) -> Outcome:
    seed = run.case.seed + RELOAD_SEED_OFFSET
    second = run.checkpoint_for(seed)
    run.layer  # noqa: B018 - its declared numerics say which reading is judged
    # a backend that cannot load this second checkpoint at all (an engine reading a model
    # folder itself gets the folder's tensors rotated, no longer the folder) says why: a check
    # it cannot run is declined, not failed
    hook = getattr(run.backend, "reload_declined", None)
    why = hook(run.layer, second) if hook is not None else None
    if why:
        return Outcome("skip", f"{run.backend.name} declines the reload: {why}")
    reference = run.reference_of_draw(seed, second) if not run.numerics else \
        run.reference_for(run.declared_reading(seed, second), run.inputs)  # before the backend
    layer = run.new_layer(run.checkpoint)
    run.backend.load_weights(layer, second)
    run.backend.process_weights_after_loading(layer)
    differs = state_difference(layer_state(run.new_layer(second)), layer_state(layer))
    if differs:
        return failed(f"reloaded layer differs from a fresh load of the same checkpoint: "
                      f"{differs}")
    result = run.judge(run.apply(layer), reference)
    return judged(result, "reloaded layer against the second checkpoint's reference")

