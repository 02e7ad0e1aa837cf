"""The checks as records (issue 45 item 3): one `Check` per check in `CHECK_TABLE`, from which
the registry, the depth lists, the checks that judge an unclaimed case and the checks that need
a model layer derive; a record's field, changed, changes what the harness does."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest
from moecert.conformance.harness import checks
from moecert.conformance.harness.checks import (
    BY_NAME,
    CHECK_TABLE,
    CHECKS,
    FULL,
    LIGHT,
    Outcome,
    depth_checks,
    run_check,
)


def test_the_registry_and_the_depth_lists_are_the_records():
    assert [c.name for c in CHECK_TABLE] == list(CHECKS) == list(FULL)
    assert LIGHT == tuple(c.name for c in CHECK_TABLE if c.depth == "light")
    assert all(CHECKS[c.name] is c.function and c.catches.strip() for c in CHECK_TABLE)
    # what the harness ran before the records (issue 45): the five light checks, the two that
    # judge the claim, saturation only on a model layer
    assert LIGHT == ("claims", "oracle", "accuracy", "fully_written", "no_mutation")
    assert {c.name for c in CHECK_TABLE if c.unclaimed} == {"claims", "oracle"}
    assert {c.name for c in CHECK_TABLE if c.model_layer} == {"saturation"}


def _unclaimed_run():
    return SimpleNamespace(claim="not claimed here", case=SimpleNamespace(source=None))


@pytest.fixture
def passing_checks(monkeypatch):
    """Every check's function replaced by one that passes: what `run_check` returns then
    depends on the records alone."""
    for c in CHECK_TABLE:
        monkeypatch.setitem(checks.CHECKS, c.name, lambda run: Outcome("pass"))


def test_an_unclaimed_case_runs_the_checks_whose_record_says_so(passing_checks, monkeypatch):
    ran = {c.name for c in CHECK_TABLE if run_check(c.name, _unclaimed_run()).status == "pass"}
    assert ran == {"claims", "oracle"}
    monkeypatch.setitem(BY_NAME, "accuracy", replace(BY_NAME["accuracy"], unclaimed=True))
    assert run_check("accuracy", _unclaimed_run()).status == "pass"
    monkeypatch.setitem(BY_NAME, "oracle", replace(BY_NAME["oracle"], unclaimed=False))
    assert run_check("oracle", _unclaimed_run()).status == "unsupported"


def test_a_synthesized_case_leaves_out_the_checks_that_need_a_model_layer(monkeypatch):
    synthesized = SimpleNamespace(depth="full", source=None)
    folder = SimpleNamespace(depth="full", source="a layer")
    assert depth_checks(folder) == list(FULL)
    assert depth_checks(synthesized) == [n for n in FULL if n != "saturation"]
    monkeypatch.setitem(BY_NAME, "exact", replace(BY_NAME["exact"], model_layer=True))
    assert "exact" not in depth_checks(synthesized) and "exact" in depth_checks(folder)
    assert depth_checks(SimpleNamespace(depth="light", source=None)) == list(LIGHT)
