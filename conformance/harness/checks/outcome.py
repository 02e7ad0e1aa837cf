"""A check's outcome, and what several checks compare with."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..comparators import assert_bitwise_equal
from ..context import CaseRun
from ..keepsakes import unchanged


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

def bitwise(actual: torch.Tensor, expected: torch.Tensor, what: str) -> Outcome:
    try:
        assert_bitwise_equal(what, actual, expected)
    except AssertionError as e:
        return failed(str(e))
    return passed(f"{what} bit for bit")


def layer_state(layer) -> dict[str, torch.Tensor]:
    return {n: t.detach().clone() for n, t in layer.state_dict().items()}


def state_difference(a: dict, b: dict) -> str:
    if a.keys() != b.keys():
        return (f"tensors {sorted(set(a) ^ set(b))} present in one layer only")
    bad = [n for n in a if not unchanged(a[n], b[n])]
    return f"tensors {few(bad)}" if bad else ""


def few(items: list, n: int = 5) -> str:
    head = ", ".join(map(str, items[:n]))
    return head + (f" and {len(items) - n} more" if len(items) > n else "")
