"""The checks on values built for them: the exact tier's structured inputs, and checkpoint
values their format rejects."""

from __future__ import annotations

from dataclasses import replace

import torch
from moecert.kernels import Variant
from moecert.kernels.oracle import supports_reason
from moecert.kernels.platform import platform_of_device
from moecert.reference import moe
from moecert.reference.schemes import Rejected
from moecert.reference.schemes.tensors import tensor_name

from ..context import CaseRun, fresh_copy
from ..inputs import Inputs
from ..numerics import describe as describe_numerics
from .outcome import (
    Outcome,
    bitwise,
    failed,
    passed,
)


def check_exact(run: CaseRun) -> Outcome:
    from ..exact import NotExact

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
    why = _structure_unclaimed(run, s.checkpoint, P)
    if why:
        return Outcome("skip", why)
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
    return bitwise(out, want, "structured exact output" + where)


def _structure_unclaimed(run: CaseRun, ckpt, problem) -> str | None:
    """Why the backend does not take the structured checkpoint of a model folder's case (a
    synthesized checkpoint of the folder's variant, which an engine adapter claims as it
    claims any synthesized one: `supports`, not the folder's `supports_model_layer`), else
    None. A synthesized case's structure is its own variant, claimed with the case."""
    if run.case.source is None:
        return None
    why = supports_reason(run.backend, Variant.of(ckpt), problem,
                          platform_of_device(run.device))
    if why:
        return (f"{run.backend.name} does not claim a synthesized checkpoint of the folder's "
                f"variant, which the structured inputs need: {why}")
    return None


def _exact_structure(run: CaseRun, case):
    """The structured inputs of `case` (CPU tensors) and the reference's output on them, made
    once per problem where the run shares steps."""
    from ..exact import structured_inputs

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
    record = run.variant.record
    tries = [(r, tensor_name(run.variant, "w13", r.role)) for r in record.rejected]
    tries = [(r, name) for r, name in tries if name in run.checkpoint.tensors]
    if not tries:
        return Outcome("skip", f"no rejected value declared for {run.variant.scheme}'s storage "
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

