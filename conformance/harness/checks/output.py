"""The checks of what a case runs: its claim, the oracle's choice, the output."""

from __future__ import annotations

import json

import torch
from moecert.kernels import NoBackendError, select_backend
from moecert.kernels.oracle import backend_reason, priority
from moecert.kernels.platform import platform_of_device

from ..context import CaseRun, StepFailed
from ..inputs import CALIBRATED, GIVEN, layer_calibrated_amax
from ..keepsakes import unchanged
from ..numerics import describe as describe_numerics
from .outcome import (
    Outcome,
    failed,
    few,
    judged,
    passed,
    unsupported,
)
from .regime import regime_note

# --- claims and the oracle ---------------------------------------------------------------

def check_claims(run: CaseRun) -> Outcome:
    if run.claim is None:
        run.output  # noqa: B018 - raises StepFailed (an error row) if the claimed case cannot run
        return passed("claimed, and it ran")
    try:
        ckpt = run.checkpoint
    except StepFailed as e:
        return unsupported(run, f"no valid checkpoint exists either: {e}")
    try:
        layer = run.new_layer(ckpt)
        args, opts = run.inputs.apply_args()
        out = run.backend.apply(layer, *args, **opts)
    except Exception as e:
        if not str(e).strip():
            return failed(f"not claimed, and forcing it raised {type(e).__name__} with no "
                          "message")
        return unsupported(run, f"forcing it raised {type(e).__name__}: {e}")
    shape = list(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
    return failed(f"not claimed ({run.claim}), but forcing it returned numbers {shape} "
                  "instead of raising")


def check_oracle(run: CaseRun) -> Outcome:
    platform = platform_of_device(run.device)
    try:
        chosen = select_backend(run.variant, run.problem, platform)
    except NoBackendError as e:
        if run.claim is None and run.case.backend in priority(platform, run.variant):
            return failed(f"{run.case.backend} claims this case, but the oracle found "
                          f"nothing: {e}")
        return passed(f"no backend claims it here: {e}")
    why = backend_reason(chosen.backend, run.variant, run.problem, platform)
    if why is not None:
        return failed(f"the oracle chose {chosen.name}, which does not claim it: {why}")
    order = priority(platform, run.variant)
    mine = run.case.backend
    if run.claim is None and mine in order and order.index(mine) < order.index(chosen.name):
        return failed(f"the oracle passed over {mine}, which claims it and ranks before "
                      f"{chosen.name}: {chosen.reasons.get(mine)}")
    return passed(f"the oracle chose {chosen.name} on {platform}")


# --- the output ---------------------------------------------------------------------------

def check_accuracy(run: CaseRun) -> Outcome:
    expected = run.expected  # after the layer: what it declares decides the reading
    what = "against the float64 reference"
    if run.numerics:
        what += f" of the declared reading ({describe_numerics(run.numerics)})"
    if run.regime in (CALIBRATED, GIVEN) and layer_calibrated_amax(run.case) is not None:
        what += f"; {regime_note(run, run.regime, run.inputs)}"
    outcome = judged(run.judge(run.output, expected), what)
    if outcome.status == "fail":  # where the error sits, for the report's picture
        outcome.profile = json.dumps(run.error_profile(run.output, expected))
    return outcome


def check_fully_written(run: CaseRun) -> Outcome:
    out, ref = run.output, run.reference
    left = torch.isnan(out) & ~torch.isnan(ref)
    if not left.any():
        return passed(f"all {out.numel()} elements written")
    rows = left.reshape(-1, out.shape[-1]).any(-1).nonzero().flatten().tolist()
    return failed(f"{int(left.sum())} of {out.numel()} output elements still hold the NaN "
                  f"poison, in rows {few(rows)}")


def check_no_mutation(run: CaseRun) -> Outcome:
    before = run.snapshot
    run.output  # noqa: B018 - load, process and apply have all run
    now = run.watched_tensors()
    changed = [n for n in before if not unchanged(before[n], now.get(n))]
    if changed:
        return failed(f"modified in place: {', '.join(changed)}")
    return passed(f"{len(before)} input and checkpoint tensors unchanged")

