"""The harness tested by planted bugs (issue 4): the smoke suite, narrowed to the schemes a
mutant's bug lives in, flags every mutant of conformance/mutants/ and nothing on the correct
backends the mutants are copies of, nor on the legitimate twins (mutants/legit.py: a correct
backend with a production kernel's rounding of weights and scales to the activation dtype).

A detection is a flagged row (fail, error, crash, timeout) of the mutant whose counterpart on
the correct base backend (same case, same check) was not flagged: a harness problem that
hits both is not a detection. Run with `-s` and without `-n` to see the detection table
(mutant x check that caught it) at the end of the module.
"""

from __future__ import annotations

import functools
import math

import pandas as pd
import pytest
import torch
from moecert.conformance.harness.execute import run_cases
from moecert.conformance.harness.suites import build_suite
from moecert.conformance.mutants import (
    FLAGGED,
    LEGIT,
    MUTANTS,
    base_of,
    detection_table,
    detections,
    make_backend,
    register_mutants,
)
from moecert.kernels import backend_names, get_backend
from moecert.kernels.registry import unregister_backend
from moecert.reference import MoEProblem
from moecert.reference.schemes import scheme_variants

# Bases whose kernels run interpreted on a CPU (seconds per apply): their mutants and they
# run only the suite's full-depth case of each target's default variant.
SLOW_BASES = ("triton",)

# Mutants the smoke suite cannot see yet, and why. Strict: once the suite catches one, its
# test fails (XPASS) until the entry is removed.
KNOWN_GAPS: dict[str, str] = {}

_ROWS: dict[str, list[dict]] = {}  # backend -> its rows, for the table at the end


def _cases(backend: str, schemes: tuple[str, ...]):
    """The narrowed smoke suite (for a slow base only the default variant's full case)."""
    cases = build_suite("smoke", backends=[backend], schemes=list(schemes))
    if backend in SLOW_BASES or base_of(backend) in SLOW_BASES:
        cases = [c for c in cases if c.depth == "full" and not c.attrs]
    return cases


@functools.cache
def _scheme_rows(backend: str, scheme: str) -> tuple[dict, ...]:
    rows = tuple(run_cases(_cases(backend, (scheme,)), device="cpu"))
    _ROWS.setdefault(backend, []).extend(rows)
    return rows


def _smoke_rows(backend: str, schemes) -> list[dict]:
    """The smoke suite's rows for `backend` on `schemes` (once per process)."""
    return [r for s in schemes for r in _scheme_rows(backend, s)]


@pytest.fixture(scope="module", autouse=True)
def _registry_restored():
    """Mutants registered here are gone after this module: a later module of the same worker
    that runs every registered backend must not meet them."""
    before = set(backend_names())
    yield
    for name in [*MUTANTS, *LEGIT]:
        if name not in before:
            unregister_backend(name)


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    """One torch thread: with two xdist workers on two cores, torch's own threads spin
    against each other (a 9-row index_add_ measured 119 ms with 2 threads, 8 us with 1)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module", autouse=True)
def _print_detection_table():
    yield
    mutant_rows = [r for b, rows in _ROWS.items() if b in MUTANTS for r in rows]
    base_rows = [r for b, rows in _ROWS.items() if b not in MUTANTS and b not in LEGIT
                 for r in rows]
    if mutant_rows:
        with pd.option_context("display.width", 250, "display.max_columns", 30,
                               "display.max_rows", 100):
            print("\nDetection table (smoke, narrowed to each mutant's targets):")
            print(detection_table(mutant_rows, base_rows))


# --- the mutants themselves -------------------------------------------------------------

# The planted bugs, pinned: deleting (or renaming) one must fail here, not silently drop its
# parametrized tests. Adding one: add its name.
MUTANT_NAMES = frozenset("mutant-" + n for n in (
    "a2-static-scale-unloaded",
    "act-order-ignored",
    "act-order-w2-ignored",
    "awq-order",
    "batched-counts-ignored",
    "bias-dropped",
    "bias-in-scale-slot",
    "biases-not-loaded",
    "claims-asym",
    "e8m0-0xff-as-scale",
    "e8m0-bias",
    "expert-map-ignored",
    "fp4-nibbles-swapped",
    "fp6-codes-reversed",
    "fp6-element-swapped",
    "fp8-block-scales-transposed",
    "fp8-groups-along-m",
    "gate-up-swapped",
    "gptq-v1-zero",
    "group-shift",
    "input-mutated",
    "int8-weight-sign",
    "last-row-unwritten",
    "mxfp4-act-as-mxfp8",
    "mxfp8-scale-rule",
    "nondeterministic-sum",
    "nvfp4-a2-gscale-from-a1",
    "nvfp4-ct-global-not-inverted",
    "nvfp4-shard-global-collapsed",
    "partial-block-dropped",
    "per-token-as-per-tensor",
    "pre-quant-scale-dropped",
    "process-not-idempotent",
    "reload-ignored",
    "router-weight-twice",
    "scales-x1.005",
    "swigluoai-alpha",
    "swigluoai-gate-up-swapped",
    "swigluoai-layout",
    "w13-scales-perm-n-for-k",
    "w13-scales-swapped",
    "w13-shard-scales-collapsed",
    "w2-bias-after-router",
    "w4a8-a1-gscale-dropped",
    "w4afp8-codes-as-uint4b8",
    "zero-points-ignored",
))


def test_mutant_table():
    assert set(MUTANTS) == MUTANT_NAMES, (sorted(set(MUTANTS) - MUTANT_NAMES),
                                          sorted(MUTANT_NAMES - set(MUTANTS)))
    for name, m in MUTANTS.items():
        assert name.startswith("mutant-") and name == m.name
        assert make_backend(m).name == name
        assert m.targets and m.expected_checks and m.bug.strip()
    names = register_mutants()
    first = {n: get_backend(n) for n in names}
    assert register_mutants() == names  # idempotent: the registered objects stay
    assert all(get_backend(n) is first[n] for n in names)
    assert set(names) <= set(backend_names())


_PROBLEMS = [
    MoEProblem(M=5, K=128, N=128, E=4, topk=2),
    MoEProblem(M=5, K=160, N=96, E=4, topk=2, activation="relu2", bias=True),
    MoEProblem(M=5, K=128, N=64, E=4, topk=1, apply_router_weight_on_input=True),
    MoEProblem(M=5, K=128, N=128, E=2, topk=2, expert_map=(0, -1, 1, -1)),
    MoEProblem(M=5, K=128, N=128, E=4, topk=2, activation_format="batched"),
]


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_claims_are_the_base_claims(name):
    """A mutant claims exactly what its base claims (the claims mutant: strictly more)."""
    m = MUTANTS[name]
    mutant, base = make_backend(m), get_backend(m.base)
    differs = [(q, P) for scheme in sorted({*m.targets, "bf16", "gptq-int4"})
               for q in scheme_variants(scheme) for P in _PROBLEMS
               if (mutant.supports(q, P) is None) != (base.supports(q, P) is None)]
    if "claims" in m.expected_checks:  # its bug: claims more than the base
        assert differs and all(mutant.supports(q, P) is None for q, P in differs)
    else:
        assert not differs


# --- the smoke suite against them -------------------------------------------------------

def _mutant_params():
    for name in MUTANTS:
        marks = ()
        if name in KNOWN_GAPS:
            marks = pytest.mark.xfail(reason=KNOWN_GAPS[name], strict=True)
        yield pytest.param(name, marks=marks, id=name)


@pytest.mark.parametrize("name", list(_mutant_params()))
def test_smoke_flags_mutant(name):
    m = MUTANTS[name]
    register_mutants([name])
    rows = _smoke_rows(name, m.targets)
    base = _smoke_rows(m.base, m.targets)
    assert rows, f"the smoke suite has no case of {m.targets} for {name}"
    caught = detections(rows, base)
    assert caught, (f"{name} ({m.bug}) passed every check of the smoke suite on "
                    f"{', '.join(m.targets)}")
    checks = sorted({r["check"] for r in caught})
    print(f"\n{name}: caught by {', '.join(checks)} ({len(caught)} rows)")
    assert set(checks) & set(m.expected_checks), (
        f"{name} was caught by {checks}, none of the checks meant to catch it "
        f"({', '.join(m.expected_checks)})")


def _base_params():
    targets: dict[str, set[str]] = {}
    for m in MUTANTS.values():
        targets.setdefault(m.base, set()).update(m.targets)
    return [pytest.param(b, tuple(sorted(s)), id=b) for b, s in sorted(targets.items())]


@pytest.mark.parametrize("base,schemes", _base_params())
def test_smoke_flags_nothing_on_bases(base, schemes):
    """The same narrowed smoke suites on the correct backends: no row flagged."""
    rows = _smoke_rows(base, schemes)
    bad = [r for r in rows if r["status"] in FLAGGED]
    assert not bad, f"{len(bad)} flagged rows on the correct backend {base}:\n" + "\n".join(
        f"  {r['case_id']} {r['check']} {r['status']}: {r['message'][:160]}"
        for r in bad[:15])


# every scheme some torch-based mutant targets: the schemes where a false alarm would hide
_TWIN_SCHEMES = tuple(sorted({t for m in MUTANTS.values() if m.base == "torch" for t in m.targets}
                             | {"fp16", "gptq-int8", "w4a8-int8"}))


@pytest.mark.parametrize("name", sorted(LEGIT))
def test_smoke_flags_nothing_on_legit_twins(name):
    """A correct backend with a production kernel's numerics passes every check of the smoke
    suite (the tolerance table admits it), on the schemes the mutants live in and the 16-bit
    and w4a8 schemes whose scales it rounds."""
    register_mutants([name])
    rows = _smoke_rows(name, _TWIN_SCHEMES)
    assert len({r["case_id"] for r in rows}) > 100
    bad = [r for r in rows if r["status"] in FLAGGED]
    assert not bad, f"{len(bad)} flagged rows on the legitimate twin {name}:\n" + "\n".join(
        f"  {r['case_id']} {r['check']} {r['status']}: {r['message'][:160]}"
        for r in bad[:15])
    if any(r["numerics"] for r in rows):
        # a twin that declares its numerics is judged against that reading: its rows say
        # so, and its error against the reading is the torch backend's kind
        assert all(r["numerics"] for r in rows
                   if r["check"] == "accuracy" and r["scheme"] == "gptq-int4")
        return
    # the twin is not the torch backend under another name: its outputs differ
    def measured(r):
        return r["check"] == "accuracy" and math.isfinite(r.get("rel_fro") or math.nan)

    torch_rows = {r["case_id"].split("/", 1)[1]: r
                  for r in _smoke_rows("torch", ("gptq-int4",)) if measured(r)}
    mine = [r for r in rows if r["scheme"] == "gptq-int4" and measured(r)
            and r["case_id"].split("/", 1)[1] in torch_rows]
    theirs = [torch_rows[r["case_id"].split("/", 1)[1]]["rel_fro"] for r in mine]
    assert mine and sum(r["rel_fro"] for r in mine) > 2 * sum(theirs)


# --- the report reads one line per bug --------------------------------------------------------

GROUPED = ("mutant-scales-x1.005", "mutant-w13-scales-swapped")


def test_each_planted_bug_is_one_failure_group():
    """Two planted bugs' failures, each over two schemes, fold into one group per bug (the
    README: a scale bug failing 36 cases is one group), whose headline names the backend,
    the check, the metric and how many schemes."""
    from moecert.reports.groups import failure_groups
    from moecert.reports.store import _frame

    register_mutants(list(GROUPED))
    rows = _frame([r for name in GROUPED for r in _smoke_rows(name, MUTANTS[name].targets)])
    failing = rows[rows["status"].isin(FLAGGED)].groupby("backend")["case_id"].nunique()
    assert failing["mutant-scales-x1.005"] >= 30  # 36 on this suite when written
    groups = failure_groups(rows)
    assert [g["signature"]["backend"] for g in groups] == sorted(
        GROUPED, key=lambda b: -failing[b]), [g["headline"] for g in groups]
    for g in groups:
        backend = g["signature"]["backend"]
        assert len(g["rows"]) == failing[backend]
        schemes = sorted(MUTANTS[backend].targets)
        assert g["schemes"] == schemes
        assert g["headline"].startswith(f"{backend}: accuracy fails in {failing[backend]} "
                                        f"case(s) of 2 scheme(s) ({', '.join(schemes)}): "
                                        f"{g['metric']} {g['direction']} its threshold")
    scale = groups[0] if groups[0]["signature"]["backend"] == GROUPED[0] else groups[1]
    assert (scale["metric"], scale["direction"]) == ("norm_ratio", "above")  # output too big


# --- one check's change of the layer is not the next check's input -----------------------------

def test_a_layer_processed_twice_is_judged_only_by_process_twice():
    """process_twice leaves the layer it processed a second time to no later check: on the
    backend whose second processing swaps gate and up again, process_twice fails and the
    checks after it (token_order, which applies the layer again) still pass. Before, they
    ran on the twice-processed layer and failed too: on a GPU every vLLM Marlin case failed
    token_order with "Hidden size mismatch" after Marlin repacked its weights again."""
    name = "mutant-process-not-idempotent"
    register_mutants([name])
    rows = _smoke_rows(name, MUTANTS[name].targets)
    by_check: dict[str, set] = {}
    for r in rows:
        by_check.setdefault(r["check"], set()).add(r["status"])
    assert "fail" in by_check["process_twice"], by_check["process_twice"]
    assert by_check["token_order"] <= {"pass", "skip"}, by_check["token_order"]
