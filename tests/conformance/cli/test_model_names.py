"""Names people type: a model-size case's id carries its model, so `-k deepseek` finds the
DeepSeek-V3 cases, and `--model NAME` selects them in `moecert run` and `moecert certify` as
it does in `moecert bench`. No other case's id changes."""

from __future__ import annotations

import json
from dataclasses import replace

from moecert.conformance.cli import app as cli
from moecert.conformance.harness import memory
from moecert.conformance.harness.cases import Case
from moecert.conformance.harness.suites import build_suite
from moecert.reference.models import MODELS


def test_model_size_ids_name_their_model_and_no_other_id_changes():
    cases = build_suite("ci", ["torch"])
    sized = [c for c in cases if c.model is not None]
    assert {c.model for c in sized} == set(MODELS)
    for case in sized:
        K = MODELS[case.model].K
        assert f"/{case.scheme}/{case.model}/M{case.problem.M}.K{K}." in case.case_id
        # the id is the pre-issue-33 id with the model's part inserted, nothing else
        assert replace(case, model=None).case_id == case.case_id.replace(
            f"/{case.model}/", "/", 1)
        assert Case.from_json(case.to_json()) == case  # a rerun keeps it
    others = [c for c in cases if c.model is None]
    assert others and not any(f"/{m}/" in c.case_id for c in others for m in MODELS)
    assert all("model" not in json.loads(c.to_json()) for c in others)  # JSON unchanged too
    # the README's example id, as it always read
    smoke = {c.case_id for c in build_suite("smoke", ["triton"], ["gptq-int4"])}
    assert "triton/gptq-int4[g32]/M17.K128.N128.E4.k2/bf16.silu/s0" in smoke


def _listed(argv, capsys) -> list[str]:
    assert cli.main(["run", "--backend", "torch", "--list-cases", *argv]) == 0
    return capsys.readouterr().out.split()


def test_k_and_model_select_the_model_size_cases(capsys):
    by_word = _listed(["--suite", "certify", "-k", "deepseek"], capsys)
    by_model = _listed(["--suite", "certify", "--model", "deepseek-v3"], capsys)
    assert by_word == by_model and len(by_word) > 10
    assert all("/deepseek-v3/M" in i for i in by_word)
    two = _listed(["--suite", "ci", "--model", "deepseek-v3", "--model", "mixtral-8x7b",
                   "--scheme", "gptq-int4"], capsys)
    assert {i.split("/")[2] for i in two} == {"deepseek-v3", "mixtral-8x7b"}


def test_model_usage_errors(capsys, tmp_path):
    assert cli.main(["run", "--backend", "torch", "--model", "deepseek-v3"]) == 2  # smoke
    assert "no model-size case in suite smoke" in capsys.readouterr().err
    try:
        cli.main(["run", "--model", "deepsek-v3"])
    except SystemExit as e:
        assert e.code == 2
    assert "did you mean 'deepseek-v3'" in capsys.readouterr().err
    assert cli.main(["run", "--model", "deepseek-v3", "--checkpoint", str(tmp_path)]) == 2


def test_certify_model_runs_that_models_cases_and_does_not_certify(tmp_path, monkeypatch,
                                                                   capsys):
    monkeypatch.setenv(memory.HOST_MEMORY_VARIABLE, "2G")  # every such case oversize: fast
    code = cli.main(["certify", "--backend", "torch", "--model", "qwen3-30b-a3b", "--out",
                     str(tmp_path / "b"), "--device", "cpu"])
    out = capsys.readouterr().out
    assert code == 1
    first = (tmp_path / "b" / "CERTIFICATE.txt").read_text().splitlines()[0]
    assert first.startswith("NOT CERTIFIED: ") and "incomplete" in first, first
    from moecert.reports import load

    rows = load(tmp_path / "b" / "results")
    assert rows["case_id"].str.contains("/qwen3-30b-a3b/M").all()
    assert set(rows["model"]) == {"qwen3-30b-a3b"}
    assert "run: not green" in out
