"""MXFP4 W4A4 folders written by the real tools (issue 42 item 4): llm-compressor's MXFP4
preset and AMD Quark's OCP MXFP4 W4A4 (tests/fixtures/checkpoints, MANIFEST.json says how).

- moecert's reading equals a plain-torch reading of the files, written here from the format
  (OCP MX v1.0: e2m1 codes two to a byte, element 2j in the low nibble; E8M0 2^(b - 127) per
  32 along the input), not through moecert's decoders;
- the folder reads as mxfp4 with MXFP4 activations (never MXFP8 or 16-bit), and `inspect`
  names the producer and the variant;
- bad copies (truncated, an E8M0 NaN scale, a config disagreeing with the tensors) are refused
  in one line naming the file, the tensor and the expert.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from moecert.conformance.cli.app import main
from moecert.reference import CheckpointError, dequantize, load_checkpoint
from safetensors.torch import load_file, save_file

FIXTURES = Path(__file__).parents[1] / "fixtures" / "checkpoints"
EXPERTS = "model.layers.1.mlp.experts"
# fixture -> (producer as `inspect` names it, the file's suffix of the packed e2m1 codes)
FOLDERS = {"ct-mxfp4-w4a4-qwen3moe": ("llm-compressor", "weight_packed"),
           "quark-mxfp4-w4a4-qwen3moe": ("quark", "weight")}
# OCP MX v1.0 table 5 (FP4 E2M1): codes 0-7 are +0, 0.5, 1, 1.5, 2, 3, 4, 6; bit 3 the sign
E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                     -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0], dtype=torch.float64)


def _plain(packed: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """float64 [out, in] of one projection: nibbles low first, times 2^(b - 127) per 32."""
    codes = torch.stack([packed & 0xF, packed >> 4], dim=-1).flatten(-2).long()
    values = E2M1[codes]
    powers = torch.pow(2.0, scale.double() - 127).repeat_interleave(32, dim=-1)
    return values * powers


@pytest.mark.parametrize("name", sorted(FOLDERS))
def test_reading_equals_a_plain_torch_reading_of_the_file(name):
    _, suffix = FOLDERS[name]
    t = load_file(str(FIXTURES / name / "model.safetensors"))
    ml = load_checkpoint(FIXTURES / name, layer=1)
    assert (ml.checkpoint.scheme, ml.checkpoint.activation) == ("mxfp4", "mxfp4")
    w, n = dequantize(ml.checkpoint), ml.N
    for e in range(ml.E):
        plain = {proj: _plain(t[f"{EXPERTS}.{e}.{proj}.{suffix}"],
                              t[f"{EXPERTS}.{e}.{proj}.weight_scale"])
                 for proj in ("gate_proj", "up_proj", "down_proj")}
        assert torch.equal(w["w13"][e, :n], plain["gate_proj"]), (e, "gate")
        assert torch.equal(w["w13"][e, n:], plain["up_proj"]), (e, "up")
        assert torch.equal(w["w2"][e], plain["down_proj"]), (e, "down")


@pytest.mark.parametrize("name", sorted(FOLDERS))
def test_inspect_names_the_producer_and_the_w4a4_variant(name, capsys):
    assert main(["inspect", str(FIXTURES / name)]) == 0
    out = capsys.readouterr().out
    assert f"producer {FOLDERS[name][0]}" in out
    rule = " mx_scale_rule=even" if name.startswith("quark") else ""  # the file's input rule
    assert f"layer 1: mxfp4 [activation=mxfp4{rule}]" in out


def _copy(tmp_path: Path, name: str) -> Path:
    return Path(shutil.copytree(FIXTURES / name, tmp_path / name))


def _one_line(folder: Path) -> str:
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(folder, layer=1)
    assert "\n" not in str(info.value)
    return str(info.value)


@pytest.mark.parametrize("name", sorted(FOLDERS))
def test_a_truncated_file_is_refused_naming_it(tmp_path, name):
    folder = _copy(tmp_path, name)
    path = folder / "model.safetensors"
    path.write_bytes(path.read_bytes()[:-100])
    assert f"{path}: expected a complete safetensors file" in _one_line(folder)


@pytest.mark.parametrize("name", sorted(FOLDERS))
def test_an_e8m0_nan_scale_is_refused_naming_tensor_and_expert(tmp_path, capsys, name):
    folder = _copy(tmp_path, name)
    path, bad = folder / "model.safetensors", f"{EXPERTS}.5.up_proj.weight_scale"
    tensors = load_file(str(path))
    tensors[bad][3, 1] = 0xFF
    save_file(tensors, str(path), metadata={"format": "pt"})
    want = (f"model.safetensors: {bad}: expected no e8m0 NaN code 0xFF (the mxfp4 format "
            "rejects it), found e8m0 NaN code 0xFF at expert 5, layer 1, element [3, 1]")
    assert want in _one_line(folder)
    assert main(["inspect", str(folder)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and want in err


@pytest.mark.parametrize("name", sorted(FOLDERS))
def test_a_config_disagreeing_with_the_tensors_is_refused(tmp_path, name):
    folder = _copy(tmp_path, name)
    config = json.loads((folder / "config.json").read_text())
    config["moe_intermediate_size"] *= 2
    (folder / "config.json").write_text(json.dumps(config))
    packed = FOLDERS[name][1]
    err = _one_line(folder)
    assert f"model.safetensors: {EXPERTS}.0.down_proj.{packed}: expected shape [128, 64]" in err
    assert "intermediate size 128 from config.json), found [128, 32]" in err


@pytest.mark.parametrize(("name", "rule"), [("quark-mxfp4-w4a4-qwen3moe", "even"),
                                            ("ct-mxfp4-w4a4-qwen3moe", "floor")])
def test_the_activations_mx_rule_is_the_files(name, rule):
    """Quark writes the rule its dynamic MX inputs are quantized by (input_tensors.
    scale_calculation_mode, "even") and vLLM's OCP MX emulation runs with it; the harness once
    ignored the key and judged the folder by OCP's floor (rel_fro 0.11 to 0.19 through vLLM on
    an H200, 2026-11-30). llm-compressor's preset states none: OCP's floor."""
    (summary,) = load_checkpoint(FIXTURES / name)
    assert summary.variant.activation == "mxfp4"
    assert summary.variant.mx_scale_rule == rule


def test_a_quark_input_rule_moecert_does_not_know_is_refused_naming_it(tmp_path):
    folder = tmp_path / "quark"
    shutil.copytree(FIXTURES / "quark-mxfp4-w4a4-qwen3moe", folder)
    config = json.loads((folder / "config.json").read_text())
    config["quantization_config"]["global_quant_config"]["input_tensors"][
        "scale_calculation_mode"] = "round"
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=r"config.json.*mx_scale_rule.*found 'round'"):
        load_checkpoint(folder)
