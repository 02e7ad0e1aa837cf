"""The inputs' regime: what calibrated or saturated inputs did against a model layer's
static input scales, and the saturation check."""

from __future__ import annotations

from moecert.reference import moe

from ..context import CaseRun, output_scale
from ..inputs import CALIBRATED, GIVEN, SATURATED, Inputs, case_inputs, layer_calibrated_amax
from ..metrics import error_metrics
from .outcome import (
    Outcome,
    judged,
)


def regime_note(run: CaseRun, regime: str, inputs: Inputs) -> str:
    """What the inputs of `regime` did against the layer's calibrated ranges: each GEMM's
    input amax (the reference's, before its activation quantization) as a share of its
    calibrated amax, and which of them saturated."""
    seen: dict = {}
    x, w, ids, counts = inputs.tensors()
    moe(run.checkpoint, x, w, ids, run.problem, expert_num_tokens=counts, record=seen)
    parts, over = [], []
    for which, gemm in (("w13", "GEMM1"), ("w2", "GEMM2")):
        top = layer_calibrated_amax(run.case, which)
        share = seen.get(which, 0.0) / top
        parts.append(f"{gemm} input amax {share:.2f}x its calibrated {top:.3g}")
        if share > 1:
            over.append(gemm)
    if regime == SATURATED:
        state = f"{' and '.join(over) or 'nothing'} beyond the calibrated range: saturation judged"
    else:
        state = (f"{' and '.join(over)} beyond its calibrated range (its codes saturate)"
                 if over else "within the calibrated ranges")
    return f"inputs {regime}: {', '.join(parts)}; {state}"


def check_saturation(run: CaseRun) -> Outcome:
    if run.regime != CALIBRATED:
        why = {GIVEN: "hidden states given by --inputs are used as they are",
               "": "no static input scales to saturate (or not a model folder's layer)"}
        return Outcome("skip", why[run.regime])
    layer = run.layer
    inputs = run.laid_out_inputs(case_inputs(run.case, SATURATED).to(run.device))
    kept = run._kept_checkpoint()
    ckpt = (run.declared_reading(run.case.seed) if run.numerics else
            run.laid_out_checkpoint(kept) if kept is not None else run.checkpoint)
    x, w, ids, counts = inputs.tensors()
    reference = moe(ckpt, x, w, ids, run.problem, expert_num_tokens=counts)
    actual = run.apply(layer, inputs)
    tol = run.tolerance_for(SATURATED)
    ids = {} if inputs.topk_ids is None else {"expert_ids": inputs.topk_ids}
    metrics = error_metrics(actual, reference, atol=tol.atol * output_scale(reference),
                            rtol=tol.rtol, **ids)
    outcome = judged({"metrics": metrics, "verdict": tol.judge(metrics)},
                     f"against the float64 reference; {regime_note(run, SATURATED, inputs)}")
    outcome.regime = SATURATED
    return outcome
