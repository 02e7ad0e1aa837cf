"""Random valid cases (hypothesis): the torch backend conforms on every one, and a failure
names the command that reruns it. Derandomized in CI; HYPOTHESIS_PROFILE=long for more."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from moecert.conformance.harness.cases import Case
from moecert.conformance.harness.execute import run_case
from moecert.conformance.harness.strategies import cases, rerun_command
from moecert.reports import FAILING

settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@given(cases(backends=["torch"]))
def test_torch_conforms_on_random_cases(case):
    rows = run_case(case)
    bad = [f"{r['check']}: {r['message']}" for r in rows if r["status"] in FAILING]
    assert not bad, "\n".join(bad) + "\nrerun: " + rerun_command(case)
    assert {r["check"] for r in rows} >= {"accuracy", "claims", "oracle"}


@given(cases(backends=["torch"], schemes=["gptq-int4", "mxfp8"]))
def test_generated_cases_are_valid_and_round_trip(case):
    assert case.checkpoint().tensors  # the reference can build every generated case
    assert Case.from_json(case.to_json()) == case


def test_the_rerun_command_names_the_whole_case():
    case = Case("torch", "bf16", __import__("moecert.reference").reference.MoEProblem(
        M=3, K=64, N=32, E=4, topk=2, expert_map=(0, -1, 1, 2, -1, 3)))
    text = rerun_command(case)
    assert text.startswith("moecert run --device cpu --case '")
    assert Case.from_json(text.split("--case ", 1)[1].strip("'")) == case


@pytest.mark.parametrize("profile", ["ci", "long"])
def test_profiles_exist(profile):
    assert settings.get_profile(profile).deadline is None
