"""Bad copies of issue 42's int4 producer fixtures (AutoRound default and auto_gptq, Quark
int4_wo_32) are refused in one line naming the file, the producer's tensor (or config key)
and the expert: a truncated file, a NaN scale, a config whose group size disagrees with the
tensors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from moecert.conformance.cli.app import main
from moecert.reference import CheckpointError, load_checkpoint
from safetensors.torch import load_file, save_file

FIXTURES = Path(__file__).parents[1] / "fixtures" / "checkpoints"
EXPERTS = "model.layers.0.mlp.experts"
# fixture -> (the scale suffix in its files, the config path of its group size)
INT4 = {
    "autoround-default-qwen3moe": ("scales", ("quantization_config", "group_size")),
    "autoround-gptq-qwen3moe": ("scales", ("quantization_config", "group_size")),
    "quark-int4-wo32-qwen3moe": ("weight_scale", ("quantization_config", "global_quant_config",
                                                  "weight", "group_size")),
}


def _copy(tmp_path: Path, name: str) -> Path:
    return Path(shutil.copytree(FIXTURES / name, tmp_path / name))


def _inspect_error(folder: Path, capsys) -> str:
    assert main(["inspect", str(folder)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    return err


@pytest.mark.parametrize("name", sorted(INT4))
def test_a_truncated_file_is_named(tmp_path, capsys, name):
    folder = _copy(tmp_path, name)
    path = folder / "model.safetensors"
    path.write_bytes(path.read_bytes()[:-1000])
    assert "model.safetensors" in _inspect_error(folder, capsys)
    with pytest.raises(CheckpointError, match="model.safetensors"):
        load_checkpoint(folder, layer=0)


@pytest.mark.parametrize("name", sorted(INT4))
def test_a_nan_scale_is_named_with_its_expert(tmp_path, capsys, name):
    folder = _copy(tmp_path, name)
    suffix, _ = INT4[name]
    bad = f"{EXPERTS}.2.up_proj.{suffix}"
    tensors = load_file(str(folder / "model.safetensors"))
    tensors[bad][1, 3] = float("nan")
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    err = _inspect_error(folder, capsys)
    assert f"model.safetensors: {bad}: expected no NaN scale" in err
    assert "at expert 2, layer 0, element [1, 3]" in err


@pytest.mark.parametrize("name", sorted(INT4))
def test_a_config_group_size_unlike_the_tensors_is_named(tmp_path, capsys, name):
    folder = _copy(tmp_path, name)
    config = json.loads((folder / "config.json").read_text())
    *path, last = INT4[name][1]
    node = config
    for k in path:
        node = node[k]
    node[last] = 64  # the files hold groups of 32
    (folder / "config.json").write_text(json.dumps(config))
    err = _inspect_error(folder, capsys)
    assert f"model.safetensors: {EXPERTS}.0." in err and "expected shape" in err
