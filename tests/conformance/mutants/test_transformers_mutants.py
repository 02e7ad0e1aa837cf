"""The judge judged on transformers (issue 36): planted bugs wrapped around transformers' own
experts (`conformance/mutants/wrapped.py` around `transformers`) are caught wherever
transformers' claims reach them, and the unwrapped transformers backends raise no alarm beyond
the findings listed in conformance/harness/xfail-transformers.toml. Runs where transformers is
installed (`tox -e transformers`); skipped elsewhere. `-s` prints the detection table."""

from __future__ import annotations

import functools

import pytest
from moecert.conformance.harness.cases import Case
from moecert.conformance.harness.execute import run_cases
from moecert.conformance.harness.suites import build_suite
from moecert.conformance.harness.xfail import XfailList
from moecert.conformance.mutants import FLAGGED
from moecert.conformance.mutants.wrapped import WRAPPED, wrap
from moecert.kernels import register_backend
from moecert.kernels.registry import unregister_backend
from moecert.reports.schema import FAILING, problem_id

pytest.importorskip("transformers", reason="needs transformers (tox -e transformers)")

# eager only: the three implementations gave the same verdict on every smoke variant
# (docs/transformers.md), and each inner backend costs minutes on CI's 2 cores (both eager
# and grouped_mm: 23 passed, 2 skipped in 19 min under load, 2026-11-28)
INNER = ("transformers",)
XFAIL = "conformance/harness/xfail-transformers.toml"
# unquantized, FineGrainedFP8 (dequantized to bf16 at load) and compressed-tensors W4A16
# (decompressed at load): the schemes transformers runs as the scheme or as its declared
# reading
SCHEMES = ("bf16", "fp8-w8a8", "ct-int4")


@functools.cache
def _rows(backend: str, checks: tuple[str, ...] | None) -> tuple:
    cases = build_suite("smoke", backends=[backend], schemes=list(SCHEMES))
    return tuple(run_cases(cases, checks=checks))


def _case(row):
    case = Case.from_json(row["case_json"])
    return case.variant, case.problem


def _key(row) -> tuple[str, str]:
    return problem_id(row["case_id"]), row["check"]


CHECKS = tuple(sorted({c for cls in WRAPPED for c in cls.expected_checks}))


@pytest.mark.parametrize("inner", INNER)
def test_unwrapped_transformers_raises_no_alarm_beyond_the_listed_findings(inner):
    rows = XfailList.load(XFAIL).apply([dict(r) for r in _rows(inner, CHECKS)])
    alarms = [(r["case_id"], r["check"], r["message"][:160]) for r in rows
              if r["status"] in FAILING]
    assert not alarms
    assert any(r["status"] == "pass" and r["check"] == "accuracy" for r in rows)


_TABLE: list[dict] = []


@pytest.fixture(scope="module", autouse=True)
def _print_table():
    yield
    if _TABLE:
        print("\nWrapped planted bugs around transformers (smoke, narrowed):")
        for t in _TABLE:
            print(f"  {t['mutant']:<56} reached {t['reached']:>3}  caught {t['caught']:>3}"
                  f"  by {', '.join(t['checks']) or '-'}")


@pytest.mark.parametrize("inner", INNER)
@pytest.mark.parametrize("cls", WRAPPED, ids=[c.kind for c in WRAPPED])
def test_wrapped_bug_is_caught_where_transformers_claims_reach_it(cls, inner):
    mutant = wrap(cls.kind, inner)
    register_backend(mutant)
    try:
        rows = _rows(mutant.name, cls.expected_checks)
    finally:
        unregister_backend(mutant.name)
    base = {_key(r): r["status"] for r in _rows(inner, CHECKS)}
    reached = [r for r in rows if r["check"] in cls.expected_checks
               and base.get(_key(r)) == "pass" and mutant.applies(*_case(r))]
    caught = [r for r in reached if r["status"] in FLAGGED]
    _TABLE.append({"mutant": mutant.name, "reached": len(reached), "caught": len(caught),
                   "checks": sorted({r["check"] for r in caught})})
    if not reached:
        pytest.skip(f"{cls.kind}: no case of {SCHEMES} that {inner} passes reaches "
                    f"{', '.join(cls.expected_checks)}")
    assert caught, f"{mutant.name} ({cls.bug}) passed every reached check"
