"""`moecert run --checkpoint DIR` and `moecert certify --checkpoint DIR`: the harness on a
model folder's layers, end to end in subprocesses as a user runs it.

The folders are the producers' own fixtures (tests/fixtures/checkpoints, written by the real
tools) where present, and folders written here in a producer's layout (tests/reference/
model_folders.py) so that the plumbing is tested without them: W4AFP8 as llm-compressor
writes it (int4 codes in int8 tensors, a Qwen3-MoE router) and a two-MoE-layer W4A16 one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from moecert.conformance.harness.cases import Case
from moecert.conformance.harness.model_layers import LayerSource, model_name
from moecert.conformance.harness.suites import build_model_suite
from moecert.reference import SCHEMES, MoEProblem, load_checkpoint, synthesize
from moecert.reports import load
from safetensors.torch import save_file

sys.path.insert(0, str(Path(__file__).parents[2] / "reference"))
import model_folders as mf

FIXTURES = Path(__file__).parents[2] / "fixtures" / "checkpoints"
# the fixtures of schemes moecert holds (a fixture of a scheme it refuses would be tested to
# be refused in tests/reference/test_loader_fixtures.py)
_MANIFEST = json.loads((FIXTURES / "MANIFEST.json").read_text())["fixtures"] \
    if (FIXTURES / "MANIFEST.json").exists() else {}
REAL = sorted(p.parent for p in FIXTURES.glob("*/config.json")
              if _MANIFEST.get(p.parent.name, {}).get("scheme", "bf16") in SCHEMES)
E, K, N, TOPK = 4, 128, 64, 2
W4AFP8_INPUTS = {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": True,
                 "symmetric": True}


def _cli(args, cwd, timeout=900):
    return subprocess.run([sys.executable, "-m", "moecert.conformance.cli", *args],
                          capture_output=True, text=True, cwd=cwd, timeout=timeout,
                          env=dict(os.environ))


def write_model(path: Path, scheme: str, qc: dict, moe_layers=(1,), seed=0, **attrs) -> Path:
    """A Qwen3-MoE folder: layer 0 dense unless it is listed, `moe_layers` holding experts
    synthesized in `scheme` (a different draw each), every layer's router and attention."""
    P = MoEProblem(M=5, K=K, N=N, E=E, topk=TOPK)
    tensors = mf.model_extras(K)
    for L in range(2):
        tensors.update(mf.layer_extras(L, K, E, router=L in moe_layers))
        if L in moe_layers:
            ckpt = synthesize(scheme, P, seed=seed + L, **attrs)
            tensors.update(mf.split_expert_tensors(ckpt, f"model.layers.{L}.mlp.experts"))
        else:
            for proj in ("gate_proj", "up_proj", "down_proj"):
                tensors[f"model.layers.{L}.mlp.{proj}.weight"] = torch.ones(8, 8).bfloat16()
    return mf.write_folder(path, mf.qwen3_config(E, K, N, TOPK, qc), tensors)


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("models")
    return {
        "w4afp8": write_model(root / "qwen3-w4afp8", "w4a8-fp8",
                              mf.ct_config(4, 32, fmt="int-quantized",
                                           input_activations=W4AFP8_INPUTS),
                              group_size=32),
        "w4a16-2": write_model(root / "qwen3-w4a16-two", "ct-int4", mf.ct_config(4, 32),
                               moe_layers=(0, 1), group_size=32, checkpoint_format="ct-0.18"),
    }


# --- every fixture passes on torch and triton -------------------------------------------------

def _folders():
    """Every producer fixture; the folders written here only where there are none (the
    fixtures hold W4AFP8 and a model of two MoE layers too)."""
    if REAL:
        return [pytest.param(p, id=p.name) for p in REAL]
    return [pytest.param("w4afp8", id="written-w4afp8"),
            pytest.param("w4a16-2", id="written-w4a16-two-layers")]


@pytest.mark.parametrize("folder", _folders())
def test_run_checkpoint_passes_on_torch_and_triton(folder, models, tmp_path):
    path = models[folder] if isinstance(folder, str) else folder
    proc = _cli(["run", "--checkpoint", str(path), "--layer", "all", "--backend", "torch",
                 "--backend", "triton", "--results", "out", "-n", "2"], tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = load(tmp_path / "out")
    assert set(rows["backend"]) == {"torch", "triton"}
    assert rows["claimed"].all() and set(rows["status"]) <= {"pass", "skip"}
    layers = [s.layer for s in load_checkpoint(path)]
    assert sorted(set(rows["model_layer"])) == layers  # --layer all: every MoE layer
    assert {1, 17} <= set(rows["M"])
    # which model was judged: its name, folder, layer, producer and the tensors' hash
    for layer in layers:
        source = load_checkpoint(path, layer=layer).source
        mine = rows[rows["model_layer"] == layer]
        assert set(mine["model"]) == {model_name(path)}
        assert set(mine["model_path"]) == {str(Path(path).resolve())}
        assert set(mine["producer"]) == {source.producer}
        assert set(mine["tensors_sha256"]) == {source.sha256}
        assert all(i.split("/")[1] == f"{model_name(path)}@L{layer}" for i in mine["case_id"])


def test_first_moe_layer_by_default_and_said(models, tmp_path):
    proc = _cli(["run", "--checkpoint", str(models["w4a16-2"]), "--backend", "torch",
                 "--list-cases"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "layer 0, the first of 2 MoE layer(s)" in proc.stderr
    assert all("@L0/" in line for line in proc.stdout.split())


# --- a planted bug on a real layer ------------------------------------------------------------

def test_mutant_on_a_model_layer_is_caught(models, tmp_path):
    real = [p for p in REAL if load_checkpoint(p)[0].scheme == "w4a8-fp8"]
    path = real[0] if real else models["w4afp8"]
    proc = _cli(["run", "--checkpoint", str(path), "--backend", "torch", "--backend",
                 "mutant-w4afp8-codes-as-uint4b8", "--import", "moecert.conformance.mutants.all",
                 "--results", "out", "-n", "2"], tmp_path)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = load(tmp_path / "out")
    bad = rows[rows["status"] == "fail"]
    assert set(bad["backend"]) == {"mutant-w4afp8-codes-as-uint4b8"}
    assert {"accuracy", "canonical"} <= set(bad["check"])
    assert "rerun:" in proc.stdout and "--case" in proc.stdout


# --- hidden states from a file ---------------------------------------------------------------

def test_inputs_file_rows_and_router(models, tmp_path):
    x = torch.randn(20, K, generator=torch.Generator().manual_seed(3))
    x[2, 7] = 60.0  # an outlier row: its e4m3 scale is 60 / 448
    save_file({"hidden_states": x.bfloat16()}, str(tmp_path / "x.safetensors"))
    proc = _cli(["run", "--checkpoint", str(models["w4afp8"]), "--inputs", "x.safetensors",
                 "--backend", "torch", "--results", "out"], tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = load(tmp_path / "out")
    assert set(rows["M"]) == {1, 17, 20}  # the suite's M values the rows cover, and all rows
    assert set(rows["routing"]) == {"router"}
    case = Case.from_json(rows["case_json"].iloc[0])
    assert case.source.inputs == str((tmp_path / "x.safetensors").resolve())
    assert ".x-" in case.case_id


def _bad_inputs(tmp_path):
    save_file({"a": torch.randn(4, K), "b": torch.randn(4, K)}, str(tmp_path / "two.st"))
    save_file({"h": torch.randn(4, K // 2)}, str(tmp_path / "narrow.st"))
    save_file({"h": torch.randn(K)}, str(tmp_path / "flat.st"))
    save_file({"h": torch.full((4, K), float("nan"))}, str(tmp_path / "nan.st"))
    (tmp_path / "junk.st").write_text("not safetensors")
    return {"two.st": "expected one tensor, or one named 'hidden_states', found 2 (a, b)",
            "narrow.st": f"has {K // 2} columns, the layer's hidden size K is {K}",
            "flat.st": "expected floating-point [M, K] rows",
            "nan.st": "holds non-finite values",
            "junk.st": "not a readable safetensors file",
            "missing.st": "no such file"}


def test_bad_inputs_file_is_one_line_exit_2(models, tmp_path):
    for name, said in _bad_inputs(tmp_path).items():
        proc = _cli(["run", "--checkpoint", str(models["w4afp8"]), "--inputs", name,
                     "--backend", "torch", "--results", "out"], tmp_path)
        assert proc.returncode == 2, (name, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        assert lines[-1].startswith(f"moecert run: error: --inputs {name}: "), lines
        assert said in lines[-1] and "Traceback" not in proc.stderr
        assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("args,said", [
    (["--inputs", "x.st"], "--inputs needs --checkpoint DIR"),
    (["--checkpoint", "nowhere"], "--checkpoint nowhere: no such folder"),
    (["--checkpoint", "{w4a16-2}", "--layer", "5"], "--layer 5: not an MoE layer of"),
    (["--checkpoint", "{w4a16-2}", "--layer", "x"], "--layer 'x': expected a decoder layer"),
    (["--checkpoint", "{w4afp8}", "--scheme", "bf16"], "--scheme does not apply"),
    (["--checkpoint", "."], "config.json"),
])
def test_model_usage_errors_are_one_line(args, said, models, tmp_path):
    args = [a.format(**{k: str(v) for k, v in models.items()}) for a in args]
    proc = _cli(["run", *args, "--backend", "torch"], tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert said in proc.stderr.strip().splitlines()[-1] and "Traceback" not in proc.stderr


# --- cases ------------------------------------------------------------------------------------

def test_model_cases_are_stable_and_carry_their_source(models):
    folder = str(models["w4a16-2"])
    first = build_model_suite("smoke", folder, [0, 1], ["torch"])
    again = build_model_suite("smoke", folder, [0, 1], ["torch"])
    assert [c.case_id for c in first] == [c.case_id for c in again]
    assert {c.source.layer for c in first} == {0, 1}
    assert {c.problem.M for c in first} == {1, 17, 64}
    assert {c.routing for c in first} == {"router"}  # Qwen3-MoE: softmax top-k, known
    for case in first:
        assert Case.from_json(case.to_json()) == case
        assert case.case_id.startswith(f"torch/qwen3-w4a16-two@L{case.source.layer}/ct-int4")
    assert sum(c.strided for c in first) == 2  # once per layer


def test_router_routing_is_the_layers(models):
    from moecert.conformance.harness.inputs import case_inputs

    case = build_model_suite("smoke", str(models["w4afp8"]), [1], ["torch"])[0]
    x, weights, ids, _ = case_inputs(case).tensors()
    want_w, want_ids = load_checkpoint(models["w4afp8"], layer=1).router.select(x, TOPK)
    assert torch.equal(ids, want_ids.to(torch.int32))
    assert torch.equal(weights, want_w.to(torch.float32))


def test_model_name_of_an_hf_cache_snapshot():
    path = "/cache/models--Qwen--Qwen3-30B-A3B/snapshots/0123456789abcdef"
    assert model_name(path) == "Qwen--Qwen3-30B-A3B@01234567"
    assert LayerSource(path, 3).label == "Qwen--Qwen3-30B-A3B@01234567@L3"


# --- certify names the model ------------------------------------------------------------------

def test_certify_checkpoint_names_the_model(models, tmp_path):
    path = models["w4afp8"]
    proc = _cli(["certify", "--backend", "torch", "--checkpoint", str(path), "--out", "b",
                 "--suite", "smoke", "-n", "2"], tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # smoke: a reduced run
    source = load_checkpoint(path, layer=1).source
    certificate = (tmp_path / "b" / "CERTIFICATE.txt").read_text()
    first = certificate.splitlines()[0]
    assert "on model qwen3-w4afp8 layer(s) 1" in first and "0 fail" in first
    assert f"tensors read sha256 {source.sha256}" in certificate
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    assert manifest["model"]["read"] == [{"layer": 1, "producer": source.producer,
                                          "tensors_sha256": source.sha256}]
    # --verify needs no model folder: the shard record holds the model's cases
    moved = _cli(["certify", "--verify", "b"], tmp_path)
    assert "4 of 4 cases present" in moved.stdout, moved.stdout + moved.stderr


# --- a case that tests nothing never passes (issue 40) -----------------------------------------

def test_inputs_without_rows_is_a_usage_error(models, tmp_path):
    save_file({"hidden_states": torch.zeros(0, K).bfloat16()}, str(tmp_path / "empty.st"))
    proc = _cli(["run", "--checkpoint", str(models["w4afp8"]), "--inputs", "empty.st",
                 "--backend", "torch", "--results", "out"], tmp_path)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    (line,) = proc.stderr.strip().splitlines()[-1:]
    assert line.startswith("moecert run: error: --inputs empty.st: ") and "no rows" in line
    assert "[M, K]" in line and "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()


def test_a_model_case_that_routes_no_token_fails(models):
    from dataclasses import replace

    from moecert.conformance.harness.execute import run_case

    (case,) = [c for c in build_model_suite("smoke", str(models["w4afp8"]), [1], ["torch"])
               if c.problem.M == 1 and not c.strided]
    empty = replace(case, problem=replace(case.problem, M=0))
    rows = run_case(empty, "cpu", ["claims", "accuracy", "determinism"])
    status = {r["check"]: r["status"] for r in rows}
    assert status == {"claims": "pass", "accuracy": "fail", "determinism": "fail"}, rows
    assert all("route no token to any expert of layer 1" in r["message"]
               for r in rows if r["check"] != "claims")
