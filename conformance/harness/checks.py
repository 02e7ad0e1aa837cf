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

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import torch
from moecert.kernels import NoBackendError, select_backend
from moecert.kernels.oracle import backend_reason, priority
from moecert.kernels.platform import platform_of_device
from moecert.reference import canonicalize, moe
from moecert.reference.canonical import dequantize_canonical
from moecert.reference.schemes import Rejected
from moecert.reference.schemes.tensors import tensor_name

from .comparators import assert_bitwise_equal
from .context import RELOAD_SEED_OFFSET, CaseRun, StepFailed, _scale, fresh_copy, unchanged
from .inputs import CALIBRATED, GIVEN, SATURATED, Inputs, case_inputs, layer_calibrated_amax
from .metrics import error_metrics
from .numerics import describe as describe_numerics

LIGHT = ("claims", "oracle", "accuracy", "fully_written", "no_mutation")
FULL = (*LIGHT, "canonical", "determinism", "process_twice", "token_order", "reload", "exact",
        "malformed", "saturation")
# Checks that judge the case without running it on an unclaimed combination.
_RUN_ANYWAY = ("claims", "oracle")


@dataclass
class Outcome:
    status: str  # pass, fail, error, skip, unsupported
    message: str = ""
    metrics: dict = field(default_factory=dict)
    verdict: object = None  # tolerances.Verdict, where a tolerance entry gated the result
    profile: str = ""  # JSON, where the error sits (metrics.error_profile): failing accuracy
    regime: str | None = None  # the inputs' regime where not the case's own (inputs.py)


def passed(message: str = "") -> Outcome:
    return Outcome("pass", message)


def failed(message: str) -> Outcome:
    return Outcome("fail", message)


def unsupported(run: CaseRun, detail: str) -> Outcome:
    """An unclaimed case that behaved as an unclaimed case should: the backend's reason first."""
    return Outcome("unsupported", f"not claimed: {run.claim}; {detail}")


def judged(result: dict, what: str) -> Outcome:
    v = result["verdict"]
    status = "pass" if v.passed else "fail"
    message = what if v.passed else f"{what}: " + "; ".join(v.failures)
    return Outcome(status, message, result["metrics"], v)


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
        chosen = select_backend(run.quant, run.problem, platform)
    except NoBackendError as e:
        if run.claim is None and run.case.backend in priority(platform, run.quant):
            return failed(f"{run.case.backend} claims this case, but the oracle found "
                          f"nothing: {e}")
        return passed(f"no backend claims it here: {e}")
    why = backend_reason(chosen.backend, run.quant, run.problem, platform)
    if why is not None:
        return failed(f"the oracle chose {chosen.name}, which does not claim it: {why}")
    order = priority(platform, run.quant)
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
                  f"poison, in rows {_few(rows)}")


def check_no_mutation(run: CaseRun) -> Outcome:
    before = run.snapshot
    run.output  # noqa: B018 - load, process and apply have all run
    now = run.watched_tensors()
    changed = [n for n in before if not unchanged(before[n], now.get(n))]
    if changed:
        return failed(f"modified in place: {', '.join(changed)}")
    return passed(f"{len(before)} input and checkpoint tensors unchanged")


# --- weights and state --------------------------------------------------------------------

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
    return _bitwise(again, run.output, "second apply")


def check_process_twice(run: CaseRun) -> Outcome:
    layer = run.layer
    before = _state(layer)
    run.output  # noqa: B018 - the first output, before the second call
    run.backend.process_weights_after_loading(layer)
    differs = _state_difference(before, _state(layer))
    if differs:
        return failed(f"the second process_weights_after_loading changed {differs}")
    return _bitwise(run.apply(layer), run.output, "apply after a second process call")


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
    reference = run.reference_of_draw(seed, second) if not run.numerics else \
        run.reference_for(run.declared_reading(seed, second), run.inputs)  # before the backend
    layer = run.new_layer(run.checkpoint)
    run.backend.load_weights(layer, second)
    run.backend.process_weights_after_loading(layer)
    differs = _state_difference(_state(run.new_layer(second)), _state(layer))
    if differs:
        return failed(f"reloaded layer differs from a fresh load of the same checkpoint: "
                      f"{differs}")
    result = run.judge(run.apply(layer), reference)
    return judged(result, "reloaded layer against the second checkpoint's reference")


def check_exact(run: CaseRun) -> Outcome:
    from .exact import NotExact

    case = exact_case(run.case)
    P = case.problem
    run.layer  # noqa: B018 - its declared numerics
    if "activation" in run.numerics:
        return Outcome("skip", "the structured inputs are exact for the scheme's own "
                       f"activations; the layer declares {describe_numerics(run.numerics)}")
    try:
        s, want = _exact_structure(run, case)
    except NotExact as e:
        return Outcome("skip", f"no exact structure for this case: {e}")
    # copies: the structure is kept for the problem's other backends (SharedSteps)
    ckpt = run.laid_out_checkpoint(fresh_copy(s.checkpoint).to(run.device))
    inputs = run.laid_out_inputs(Inputs(*(None if t is None else t.clone() for t in (
        s.x, s.topk_weights, s.topk_ids, s.expert_num_tokens))).to(run.device))
    out = torch.full_like(want, torch.nan)
    args, opts = inputs.apply_args()
    layer = run.backend.create_layer(ckpt, P)
    run.backend.process_weights_after_loading(layer)
    run.backend.apply(layer, *args, out=out, **opts)
    where = "" if case is run.case else f" (at K={P.K}, N={P.N})"
    return _bitwise(out, want, "structured exact output" + where)


def _exact_structure(run: CaseRun, case):
    """The structured inputs of `case` (CPU tensors) and the reference's output on them, made
    once per problem where the run shares steps."""
    from .exact import structured_inputs

    def make():
        s = structured_inputs(case, audit_device=run.device)
        ckpt = run.laid_out_checkpoint(s.checkpoint.to(run.device))
        inputs = run.laid_out_inputs(
            Inputs(s.x, s.topk_weights, s.topk_ids, s.expert_num_tokens).to(run.device))
        want = moe(run.declared_reading(0, ckpt), *inputs.tensors()[:3], case.problem,
                   expert_num_tokens=inputs.expert_num_tokens).to(case.problem.torch_dtype)
        return s, want
    if run.shared is None:
        return make()
    return run.shared.get(run.key, f"exact|{describe_numerics(run.numerics)}", make)


# The exact tier's structure is built densely in float64 on the host (seconds at K=1024,
# N=512); with one non-zero product per output, a longer K adds no accumulation to test, so
# larger cases run it at this K and N (multiples of every group and block size).
EXACT_MAX_DIM = 256


def exact_case(case):
    P = case.problem
    if P.K <= EXACT_MAX_DIM and P.N <= EXACT_MAX_DIM:
        return case
    return replace(case, problem=replace(P, K=min(P.K, EXACT_MAX_DIM),
                                         N=min(P.N, EXACT_MAX_DIM)))


def check_malformed(run: CaseRun) -> Outcome:
    """Each value the format record rejects (`FormatRecord.rejected`), written into w13's
    tensor of its role at index 0, one checkpoint per value: each must be refused with an
    error naming the tensor. A backend that reads one as a number computes with it (E8M0
    0xFF, the NaN block scale and a padding value, taken as 2^128)."""
    record = run.quant.record
    tries = [(r, tensor_name(run.quant, "w13", r.role)) for r in record.rejected]
    tries = [(r, name) for r, name in tries if name in run.checkpoint.tensors]
    if not tries:
        return Outcome("skip", f"no rejected value declared for {run.quant.scheme}'s storage "
                       f"({record.key})")
    refused, faults = [], []
    for rejected, name in tries:
        fault = _refuses(run, rejected, name)
        (faults if fault else refused).append(fault or f"{name} holding {rejected.what}")
    if faults:
        return failed("; ".join(faults) + (f" (refused: {', '.join(refused)})" if refused
                                           else ""))
    return passed(f"refused each of {len(refused)} rejected values, naming the tensor: "
                  + ", ".join(refused))


def _refuses(run: CaseRun, rejected: Rejected, name: str) -> str | None:
    """None if the backend refuses the checkpoint with `rejected` written into tensor `name`
    and names the tensor, else what it did."""
    # the written value makes the tensors no longer the model folder's (origin cleared: an
    # engine adapter must take these tensors, not re-read the folder)
    ckpt = replace(fresh_copy(run.checkpoint), origin=None)
    t = ckpt.tensors[name]
    at = (0,) * t.dim()
    if rejected.bits is None:
        t[at] = rejected.value
    else:  # a bit pattern of one storage byte (element codes: e4m3, E8M0)
        t.view(torch.uint8)[at] = rejected.bits
    try:
        run.apply(run.new_layer(ckpt))
    except Exception as e:
        if name in str(e):
            return None
        return (f"refused a {name} holding {rejected.what}, but the error does not name it: "
                f"{type(e).__name__}: {e}")
    return f"accepted a {name} holding {rejected.what} and computed with it"


# --- the inputs' regime ------------------------------------------------------------------

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
    metrics = error_metrics(actual, reference, atol=tol.atol * _scale(reference),
                            rtol=tol.rtol, **ids)
    outcome = judged({"metrics": metrics, "verdict": tol.judge(metrics)},
                     f"against the float64 reference; {regime_note(run, SATURATED, inputs)}")
    outcome.regime = SATURATED
    return outcome


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


def run_check(name: str, run: CaseRun) -> Outcome:
    """One check; an unclaimed case is "unsupported" except for the claims checks, and any
    exception a backend raises is an "error" outcome, never the end of the run."""
    if run.claim is not None and name not in _RUN_ANYWAY:
        return Outcome("unsupported", run.claim)
    try:
        return CHECKS[name](run)
    except StepFailed as e:
        return Outcome("error", str(e))
    except Exception as e:
        return Outcome("error", f"{type(e).__name__}: {e}")


# --- helpers ------------------------------------------------------------------------------

def _bitwise(actual: torch.Tensor, expected: torch.Tensor, what: str) -> Outcome:
    try:
        assert_bitwise_equal(what, actual, expected)
    except AssertionError as e:
        return failed(str(e))
    return passed(f"{what} bit for bit")


def _state(layer) -> dict[str, torch.Tensor]:
    return {n: t.detach().clone() for n, t in layer.state_dict().items()}


def _state_difference(a: dict, b: dict) -> str:
    if a.keys() != b.keys():
        return (f"tensors {sorted(set(a) ^ set(b))} present in one layer only")
    bad = [n for n in a if not unchanged(a[n], b[n])]
    return f"tensors {_few(bad)}" if bad else ""


def _few(items: list, n: int = 5) -> str:
    head = ", ".join(map(str, items[:n]))
    return head + (f" and {len(items) - n} more" if len(items) > n else "")


__all__ = ["CHECKS", "FULL", "LIGHT", "Outcome", "checks_for", "depth_checks", "run_check"]
