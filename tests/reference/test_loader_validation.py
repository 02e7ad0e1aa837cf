"""What `inspect` and `load_checkpoint` check on a real folder before anything runs (issue 30
item 5): the config against the tensors, one dtype per tensor across experts, and every value
the format record rejects, each message naming the file, the producer's own tensor name, the
expert and the layer; CLI errors one line, exit 2. The bad folders are copies of the
producers' fixtures with one thing edited."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from moecert.conformance.cli.app import main
from moecert.reference import CheckpointError, load_checkpoint
from moecert.reference.loader.families import SIZE_KEYS
from safetensors.torch import load_file, save_file

FIXTURES = Path(__file__).parents[1] / "fixtures" / "checkpoints"
EXPERTS = "model.layers.1.mlp.experts"


def _copy(tmp_path: Path, name: str) -> Path:
    return Path(shutil.copytree(FIXTURES / name, tmp_path / name))


def _edit_tensors(folder: Path, edit) -> None:
    """Rewrite model.safetensors with `edit(tensors)` applied."""
    path = folder / "model.safetensors"
    tensors = load_file(str(path))
    edit(tensors)
    save_file(tensors, str(path), metadata={"format": "pt"})


def _inspect_error(folder: Path, capsys, *extra) -> str:
    assert main(["inspect", str(folder), *extra]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("moecert inspect: error: ")
    assert "Traceback" not in err
    return err


def test_config_expert_count_unlike_the_tensors_is_refused_by_inspect(tmp_path, capsys):
    folder = _copy(tmp_path, "ct-w4a16-sym-qwen3moe")
    config = json.loads((folder / "config.json").read_text())
    key = next(k for k in SIZE_KEYS["E"] if k in config)
    held = config[key]
    config[key] = 2 * held
    (folder / "config.json").write_text(json.dumps(config))
    want = f"config.json: {key}: expected the {held} experts layer 1 holds, found {2 * held}"
    assert want in _inspect_error(folder, capsys)
    assert want in _inspect_error(folder, capsys, "--quick")  # from the names alone
    with pytest.raises(CheckpointError, match=want):
        load_checkpoint(folder)


@pytest.mark.parametrize("expert, proj", [(0, "gate_proj"), (3, "up_proj")])
def test_a_scale_of_another_dtype_is_named_not_its_siblings(tmp_path, capsys, expert, proj):
    """The odd piece is named (file, tensor, expert, layer) whether or not it is read first
    (expert 0's gate_proj is the first piece; the old message named a clean up_proj)."""
    folder = _copy(tmp_path, "ct-w4a16-sym-qwen3moe")
    bad = f"{EXPERTS}.{expert}.{proj}.weight_scale"

    def to_fp32(t):
        t[bad] = t[bad].float()
    _edit_tensors(folder, to_fp32)
    err = _inspect_error(folder, capsys)
    assert f"model.safetensors: {bad}: expected dtype BF16 like the other" in err
    assert f"(expert {expert}, layer 1), found F32" in err
    with pytest.raises(CheckpointError, match=f"{bad}: expected dtype BF16"):
        load_checkpoint(folder, layer=1)


def test_a_nan_weight_scale_is_refused_naming_the_producers_tensor(tmp_path, capsys):
    folder = _copy(tmp_path, "ct-fp8-channel-qwen3moe")
    bad = f"{EXPERTS}.3.up_proj.weight_scale"

    def plant(t):
        t[bad][7, 0] = float("nan")
    _edit_tensors(folder, plant)
    want = (f"model.safetensors: {bad}: expected no NaN scale (the fp8-w8a8 format rejects "
            "it), found a NaN scale at expert 3, layer 1, element [7, 0]")
    err = _inspect_error(folder, capsys)
    assert want in err and "w13_weight_scale" not in err
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(folder, layer=1)
    assert want in str(info.value)
    with pytest.raises(CheckpointError, match="element \\[7, 0\\]"):
        load_checkpoint(folder, validate=True)
    load_checkpoint(folder)  # the summaries read no tensor data
    assert main(["inspect", str(folder), "--quick"]) == 0
    assert "values not checked" in capsys.readouterr().out
    # run refuses the folder before any case runs: one line, exit 2, not an error row a case
    assert main(["run", "--checkpoint", str(folder), "--backend", "torch", "--results",
                 str(tmp_path / "out"), "--in-process"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("moecert run: error: --checkpoint ") and want in err[-1]
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


@pytest.mark.parametrize("name, tensor, code, what", [
    ("ct-mxfp8-qwen3moe", f"{EXPERTS}.2.down_proj.weight_scale", 0xFF, "e8m0 NaN code 0xFF"),
    ("ct-mxfp8-qwen3moe", f"{EXPERTS}.6.gate_proj.weight", 0x7F, "e4m3 NaN code 0x7F"),
])
def test_every_code_the_record_rejects_is_refused(tmp_path, capsys, name, tensor, code, what):
    folder = _copy(tmp_path, name)

    def plant(t):
        t[tensor].view(torch.uint8)[1, 1] = code
    _edit_tensors(folder, plant)
    expert = tensor.split(".")[5]
    err = _inspect_error(folder, capsys)
    assert f"{tensor}: expected no {what}" in err
    assert f"found {what} at expert {expert}, layer 1, element [1, 1]" in err


def test_a_fused_tensor_names_the_expert_of_the_bad_row(tmp_path, capsys):
    folder = _copy(tmp_path, "gptoss-mxfp4-release")
    tensor = f"{EXPERTS}.gate_up_proj_scales"

    def plant(t):
        t[tensor][2, 5, 1] = 0xFF
    _edit_tensors(folder, plant)
    err = _inspect_error(folder, capsys)
    assert f"{tensor}: expected no e8m0 NaN code 0xFF" in err
    assert "at expert 2, layer 1, element [2, 5, 1]" in err


def test_clean_fixtures_pass_inspect(capsys):
    for name in ("ct-fp8-channel-qwen3moe", "gptoss-mxfp4-release", "ct-mxfp8-qwen3moe"):
        assert main(["inspect", str(FIXTURES / name)]) == 0
        assert "the values the format rejects" in capsys.readouterr().out


def test_run_without_layer_says_which_layer_the_verdict_covers(tmp_path, capsys):
    folder = FIXTURES / "gptqmodel-gptq-v2-qwen3moe"  # two MoE layers
    code = main(["run", "--checkpoint", str(folder), "--backend", "torch", "-k", "M1.K128",
                 "--results", str(tmp_path / "out"), "--in-process"])
    out = capsys.readouterr().out
    assert code == 0, out
    verdict = out.strip().splitlines()[-1]
    assert verdict.startswith("green") and f"; layer 0 of 2 MoE layers of {folder}" in verdict
    code = main(["run", "--checkpoint", str(folder), "--backend", "torch", "-k", "M1.K128",
                 "--layer", "all", "--results", str(tmp_path / "all"), "--in-process"])
    out = capsys.readouterr().out
    assert code == 0 and f"; every MoE layer of {folder} (2)" in out.strip().splitlines()[-1]
