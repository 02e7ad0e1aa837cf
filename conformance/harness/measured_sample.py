"""The sample of a tolerance entry's measurement (tolerances.toml `[entry.measured]`): the
cases it names, on the backend it names, as the reason test
(tests/conformance/harness/test_tolerance_reasons.py) and the planted-bug ladder
(tools/scale_ladder.py) run them."""

from __future__ import annotations

from dataclasses import replace

from .cases import Case
from .suites import build_suite
from .tolerances import Tolerance

SEEDS = (0, 1)


def sample_cases(entry: Tolerance, backend: str | None = None) -> list[Case]:
    """The entry's sample cases (smoke-suite problem ids, in `sample_dtype` if given) on
    `backend` (default: the one the entry was measured on), seed 0."""
    m = entry.measured
    backend = backend or m["backend"]
    cases = []
    for pid in m["sample"]:
        scheme = pid.split("/", 1)[0].split("[", 1)[0]
        found = [c for c in build_suite("smoke", [backend], [scheme])
                 if c.case_id == f"{backend}/{pid}/s0"]
        if not found:
            raise LookupError(f"{entry.key}: sample {pid} is no smoke case of {backend}")
        case = found[0]
        if m.get("sample_dtype"):
            case = replace(case, problem=replace(case.problem, dtype=m["sample_dtype"]))
        cases.append(case)
    return cases
