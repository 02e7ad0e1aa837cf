"""The checks: each a function of a `CaseRun` returning an `Outcome`, each its own result row,
and each declared once, as a `Check` record in `CHECK_TABLE` (its name, function, depth, whether
it runs on a case the backend does not claim, whether it needs a model layer, what it catches).
`CHECKS`, `LIGHT`, `FULL`, `depth_checks` and `run_check` derive from the table.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..context import CaseRun, StepFailed, exception_text
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

DEPTHS = ("light", "full")  # a case's depth (suites.py): "full" runs the light checks too


@dataclass(frozen=True)
class Check:
    name: str  # the result rows' `check` column and `--check`'s value
    function: Callable[[CaseRun], Outcome]
    depth: str  # DEPTHS: the least depth whose cases run it
    catches: str  # what it asserts: a failure says this does not hold
    # it judges the claim itself, so it runs on a case the backend does not claim (every
    # other check is "unsupported" there)
    unclaimed: bool = False
    # it needs a model layer (its calibrated range): not run on a synthesized checkpoint
    model_layer: bool = False


CHECK_TABLE: tuple[Check, ...] = (
    Check("claims", check_claims, "light", unclaimed=True,
          catches="a claimed case runs; an unclaimed one, forced, raises a clear error"),
    Check("oracle", check_oracle, "light", unclaimed=True,
          catches="the oracle's choice for this case's scheme and shape claims support, and no "
                  "claiming backend ahead of it in the priority list was passed over"),
    Check("accuracy", check_accuracy, "light",
          catches="output against the float64 reference, under the case's tolerance entry"),
    Check("fully_written", check_fully_written, "light",
          catches="no NaN left in the output buffer, which was poisoned with NaN"),
    Check("no_mutation", check_no_mutation, "light",
          catches="inputs and checkpoint tensors bitwise unchanged by load, process, apply"),
    Check("canonical", check_canonical, "full",
          catches="the processed weights, read back in canonical form, bit for bit"),
    Check("determinism", check_determinism, "full",
          catches="a second apply is bitwise equal to the first"),
    Check("process_twice", check_process_twice, "full",
          catches="a second process_weights_after_loading changes no state and no output"),
    Check("token_order", check_token_order, "full",
          catches="permuted tokens give the permuted output (within the tolerance entry)"),
    Check("reload", check_reload, "full",
          catches="a second checkpoint loaded into a processed layer equals a fresh load"),
    Check("exact", check_exact, "full",
          catches="structured inputs whose output is exactly representable, bit for bit"),
    Check("malformed", check_malformed, "full",
          catches="the checkpoint with one value its format rejects is refused, the error "
                  "naming the tensor: every rejected value of the case's format record in turn "
                  "(NaN codes, E8M0 0xFF, non-positive or NaN scales), one at a time"),
    Check("saturation", check_saturation, "full", model_layer=True,
          catches="a model layer with static input scales: hidden states 4x beyond GEMM1's "
                  "calibrated range (inputs.py, regime \"saturated\"), judged against the "
                  "reference under the tolerance entries of that regime (skip on a layer "
                  "without static scales)"),
)

CHECKS: dict[str, Callable[[CaseRun], Outcome]] = {c.name: c.function for c in CHECK_TABLE}
BY_NAME: dict[str, Check] = {c.name: c for c in CHECK_TABLE}
LIGHT = tuple(c.name for c in CHECK_TABLE if c.depth == "light")
FULL = tuple(c.name for c in CHECK_TABLE)  # every depth's, the light ones first
assert len(BY_NAME) == len(CHECK_TABLE) and all(c.depth in DEPTHS for c in CHECK_TABLE)
assert FULL[:len(LIGHT)] == LIGHT, "CHECK_TABLE lists the light checks first"


def depth_checks(case) -> list[str]:
    """Every check a case of its depth runs (what certify counts as a complete case): the
    depth's list, less the checks that need a model layer on a synthesized checkpoint
    (`saturation`: no calibrated range)."""
    names = list(FULL if case.depth == "full" else LIGHT)
    if case.source is None:
        names = [n for n in names if not BY_NAME[n].model_layer]
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
    """One check; an unclaimed case is "unsupported" except for the checks that judge the
    claim itself (`Check.unclaimed`: claims, oracle), and any
    exception a backend raises is an "error" outcome, never the end of the run."""
    unclaimed = name in BY_NAME and BY_NAME[name].unclaimed
    if run.claim is not None and not unclaimed:
        return Outcome("unsupported", run.claim)
    try:
        idle = not unclaimed and routes_nothing(run)
        if idle:
            return Outcome("fail", idle)
        return CHECKS[name](run)
    except StepFailed as e:
        return Outcome("error", str(e))
    except Exception as e:
        return Outcome("error", exception_text(e))


__all__ = ["BY_NAME", "CHECKS", "CHECK_TABLE", "FULL", "LIGHT", "Check", "Outcome", "checks_for",
           "depth_checks", "routes_nothing", "run_check"]
