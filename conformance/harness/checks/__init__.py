"""The checks: each a function of a `CaseRun` returning an `Outcome`, each its own result row.

    claims         a claimed case runs; an unclaimed one, forced, raises a clear error
    oracle         the oracle's choice for this case's scheme and shape claims support, and no
                   claiming backend ahead of it in the priority list was passed over
    accuracy       output against the float64 reference, under the case's tolerance entry
    fully_written  no NaN left in the output buffer, which was poisoned with NaN
    no_mutation    inputs and checkpoint tensors bitwise unchanged by load, process, apply
    canonical      the processed weights, read back in canonical form, bit for bit
    determinism    a second apply is bitwise equal to the first
    process_twice  a second process_weights_after_loading changes no state and no output
    token_order    permuted tokens give the permuted output (within the tolerance entry)
    reload         a second checkpoint loaded into a processed layer equals a fresh load
    exact          structured inputs whose output is exactly representable, bit for bit
    malformed      the checkpoint with one value its format rejects is refused, the error
                   naming the tensor: every rejected value of the case's format record in
                   turn (NaN codes, E8M0 0xFF, non-positive or NaN scales), one at a time
    saturation     a model layer with static input scales: hidden states 4x beyond GEMM1's
                   calibrated range (inputs.py, regime "saturated"), judged against the
                   reference under the tolerance entries of that regime (skip on a layer
                   without static scales; not run on a synthesized checkpoint)
"""

from __future__ import annotations

from collections.abc import Callable

from ..context import CaseRun, StepFailed
from .outcome import Outcome
from .output import (
    check_accuracy,
    check_claims,
    check_fully_written,
    check_no_mutation,
    check_oracle,
)
from .regime import check_saturation
from .state import (
    check_canonical,
    check_determinism,
    check_process_twice,
    check_reload,
    check_token_order,
)
from .values import check_exact, check_malformed

LIGHT = ("claims", "oracle", "accuracy", "fully_written", "no_mutation")
FULL = (*LIGHT, "canonical", "determinism", "process_twice", "token_order", "reload", "exact",
        "malformed", "saturation")
# Checks that judge the case without running it on an unclaimed combination.
_RUN_ANYWAY = ("claims", "oracle")

CHECKS: dict[str, Callable[[CaseRun], Outcome]] = {
    "claims": check_claims, "oracle": check_oracle, "accuracy": check_accuracy,
    "fully_written": check_fully_written, "no_mutation": check_no_mutation,
    "canonical": check_canonical, "determinism": check_determinism,
    "process_twice": check_process_twice, "token_order": check_token_order,
    "reload": check_reload, "exact": check_exact, "malformed": check_malformed,
    "saturation": check_saturation,
}
assert tuple(CHECKS) == FULL


def depth_checks(case) -> list[str]:
    """Every check a case of its depth runs (what certify counts as a complete case): the
    depth's list, less `saturation` on a synthesized checkpoint (no calibrated range)."""
    names = list(FULL if case.depth == "full" else LIGHT)
    if case.source is None:
        names = [n for n in names if n != "saturation"]
    return names


def checks_for(run: CaseRun, only=None) -> list[str]:
    names = depth_checks(run.case)
    if only:
        names = [n for n in names if n in only] or [n for n in only if n in CHECKS]
    return names


def routes_nothing(run: CaseRun) -> str | None:
    """Why a model folder's case tests nothing, or None: its inputs route no token to any
    expert of the layer held here (no rows, or every routed expert outside the expert_map).
    A synthesized suite's M = 0 case tests that a kernel takes an empty batch; a case on a
    real layer is there to judge its experts, and one that reaches none must not pass."""
    if run.case.source is None or run.problem.activation_format != "standard":
        return None
    ids = run.inputs.topk_ids
    local = run.problem.expert_map
    if ids is not None and ids.numel():
        if local is None:
            return None
        import torch

        held = torch.as_tensor(local, device=ids.device)[ids.long()] >= 0
        if bool(held.any()):
            return None
    src = run.case.source
    return (f"the inputs route no token to any expert of layer {src.layer} of {src.model} "
            f"(M = {run.problem.M}): the case tests nothing")


def run_check(name: str, run: CaseRun) -> Outcome:
    """One check; an unclaimed case is "unsupported" except for the claims checks, and any
    exception a backend raises is an "error" outcome, never the end of the run."""
    if run.claim is not None and name not in _RUN_ANYWAY:
        return Outcome("unsupported", run.claim)
    try:
        idle = name not in _RUN_ANYWAY and routes_nothing(run)
        if idle:
            return Outcome("fail", idle)
        return CHECKS[name](run)
    except StepFailed as e:
        return Outcome("error", str(e))
    except Exception as e:
        return Outcome("error", f"{type(e).__name__}: {e}")


__all__ = ["CHECKS", "FULL", "LIGHT", "Outcome", "checks_for", "depth_checks", "routes_nothing",
           "run_check"]
