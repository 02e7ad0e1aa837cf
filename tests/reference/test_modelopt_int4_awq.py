"""ModelOpt INT4 AWQ (issue 42 item 3): the fixture ModelOpt 0.47 wrote (`INT4_AWQ_CFG`,
`quant_algo` W4A16_AWQ) read by moecert as `modelopt-int4-awq`, checked against a plain-torch
reading of its safetensors written here from ModelOpt's layout (its `pack_int4_in_uint8`:
rows 2i / 2i+1 of a column in the low / high nibble of a byte, two's complement; w = q * s;
the layer's input times `pre_quant_scale` per column), independent of moecert's packing code;
and bad copies refused in one line naming the file, the tensor and the expert."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from moecert.conformance.cli.app import main
from moecert.reference import CheckpointError, dequantize, load_checkpoint, moe
from moecert.reference.schemes import Variant
from safetensors.torch import load_file, save_file

FOLDER = Path(__file__).parents[1] / "fixtures" / "checkpoints" / "modelopt-int4-awq-qwen3moe"
EXPERTS = "model.layers.0.mlp.experts"
PROJ = ("gate_proj", "up_proj", "down_proj")


def _plain_weight(t: dict, base: str) -> torch.Tensor:
    """float64 [out, in]: weight uint8 [out/2, in], weight_scale [out, in/g]."""
    packed = t[f"{base}.weight"].to(torch.int64)
    nibbles = torch.stack((packed & 0xF, packed >> 4), dim=1)  # [out/2, 2, in]
    q = torch.where(nibbles >= 8, nibbles - 16, nibbles).reshape(-1, packed.shape[1])
    s = t[f"{base}.weight_scale"].to(torch.float64)
    g = q.shape[1] // s.shape[1]
    return q.to(torch.float64) * s.repeat_interleave(g, dim=1)


def test_the_fixture_is_read_as_modelopt_int4_awq():
    (layer,) = load_checkpoint(FOLDER)
    assert (layer.scheme, layer.producer) == ("modelopt-int4-awq", "modelopt")
    assert layer.variant == Variant("modelopt-int4-awq", group_size=128, sym=True,
                                    activation="none")


def test_moecert_reads_the_weights_and_pre_quant_scales_as_plain_torch_does():
    tensors = load_file(str(FOLDER / "model.safetensors"))
    ml = load_checkpoint(FOLDER, layer=0)
    ckpt = ml.checkpoint
    w = dequantize(ckpt)
    N = ml.N
    for e in range(ml.E):
        base = f"{EXPERTS}.{e}"
        plain = {p: _plain_weight(tensors, f"{base}.{p}") for p in PROJ}
        assert torch.equal(w["w13"][e, :N], plain["gate_proj"]), e
        assert torch.equal(w["w13"][e, N:], plain["up_proj"]), e
        assert torch.equal(w["w2"][e], plain["down_proj"]), e
        assert torch.equal(ckpt.tensors["w13_pre_quant_scale"][e],
                           tensors[f"{base}.gate_proj.pre_quant_scale"])
        assert torch.equal(ckpt.tensors["w2_pre_quant_scale"][e],
                           tensors[f"{base}.down_proj.pre_quant_scale"])


def test_the_reference_layer_applies_pre_quant_scale_as_plain_torch_does():
    """y = sum_e r_e ((silu((x * p_gate) Wg^T) * ((x * p_up) Wu^T)) * p_down) Wd^T, in
    float64 from the file's tensors (ModelOpt's fake-quant linear scales its input by
    pre_quant_scale before the weight's GEMM), against the reference on the loaded layer.
    The pre-quant scales are not all 1, so a reading that drops them differs."""
    tensors = load_file(str(FOLDER / "model.safetensors"))
    ml = load_checkpoint(FOLDER, layer=0)
    P = ml.problem(M=9)
    x = torch.randn(P.M, P.K, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    weights, ids = ml.router.select(x, P.topk)
    got = moe(ml.checkpoint, x, weights, ids, P)
    want = torch.zeros(P.M, P.K, dtype=torch.float64)
    x64 = x.to(torch.float64)
    for m in range(P.M):
        for j in range(P.topk):
            base = f"{EXPERTS}.{int(ids[m, j])}"
            pre = {p: tensors[f"{base}.{p}.pre_quant_scale"].to(torch.float64) for p in PROJ}
            w = {p: _plain_weight(tensors, f"{base}.{p}") for p in PROJ}
            gate = (x64[m] * pre["gate_proj"]) @ w["gate_proj"].T
            up = (x64[m] * pre["up_proj"]) @ w["up_proj"].T
            # the reference rounds h and a to the activation dtype, as every kernel writes them
            gate, up = (t.to(torch.bfloat16).to(torch.float64) for t in (gate, up))
            a = (F.silu(gate) * up).to(torch.bfloat16).to(torch.float64)
            want[m] += float(weights[m, j]) * ((a * pre["down_proj"]) @ w["down_proj"].T)
    assert not torch.equal(tensors[f"{EXPERTS}.0.gate_proj.pre_quant_scale"],
                           torch.ones(P.K, dtype=torch.bfloat16))
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


# --- bad copies --------------------------------------------------------------------------

def _copy(tmp_path: Path) -> Path:
    return Path(shutil.copytree(FOLDER, tmp_path / FOLDER.name))


def _inspect_error(folder: Path, capsys) -> str:
    assert main(["inspect", str(folder)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    return err


def _write(folder: Path, name: str, edit) -> None:
    tensors = load_file(str(folder / "model.safetensors"))
    edit(tensors[name])
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})


def test_a_truncated_file_is_named(tmp_path, capsys):
    folder = _copy(tmp_path)
    path = folder / "model.safetensors"
    path.write_bytes(path.read_bytes()[:-1000])
    assert "model.safetensors" in _inspect_error(folder, capsys)
    with pytest.raises(CheckpointError, match="model.safetensors"):
        load_checkpoint(folder, layer=0)


def test_a_nan_scale_is_named_with_its_expert(tmp_path, capsys):
    folder = _copy(tmp_path)
    bad = f"{EXPERTS}.2.up_proj.weight_scale"
    _write(folder, bad, lambda t: t.__setitem__((5, 0), float("nan")))
    err = _inspect_error(folder, capsys)
    assert f"model.safetensors: {bad}: expected no NaN scale" in err
    assert "at expert 2, layer 0, element [5, 0]" in err


@pytest.mark.parametrize("value,what", [(float("nan"), "NaN"), (0.0, "zero"),
                                        (-1.0, "negative")])
def test_a_bad_pre_quant_scale_is_named_with_its_expert(tmp_path, capsys, value, what):
    folder = _copy(tmp_path)
    bad = f"{EXPERTS}.1.down_proj.pre_quant_scale"
    _write(folder, bad, lambda t: t.__setitem__(7, value))
    err = _inspect_error(folder, capsys)
    assert f"model.safetensors: {bad}: expected no {what} pre quant scale" in err
    assert "at expert 1, layer 0, element [7]" in err


def test_gate_and_up_pre_quant_scales_must_agree(tmp_path, capsys):
    """Gate and up read one input: one pre_quant_scale (ModelOpt writes them equal)."""
    folder = _copy(tmp_path)
    bad = f"{EXPERTS}.3.up_proj.pre_quant_scale"
    _write(folder, bad, lambda t: t.mul_(2))
    err = _inspect_error(folder, capsys)
    assert "pre_quant_scale" in err and "expert 3" in err


@pytest.mark.parametrize("key,value", [("group_size", 64), ("has_zero_point", True),
                                       ("pre_quant_scale", False)])
def test_a_config_unlike_the_tensors_is_named(tmp_path, capsys, key, value):
    folder = _copy(tmp_path)
    path = folder / "hf_quant_config.json"
    config = json.loads(path.read_text())
    config["quantization"][key] = value
    path.write_text(json.dumps(config))
    err = _inspect_error(folder, capsys)
    if key == "group_size":  # the files hold one group of 128 along K
        assert f"model.safetensors: {EXPERTS}.0." in err and "expected shape" in err
    else:
        assert f"quantization_config.{key}" in err


def test_config_json_disagreeing_with_hf_quant_config_is_named(tmp_path, capsys):
    folder = _copy(tmp_path)
    path = folder / "config.json"
    config = json.loads(path.read_text())
    config["quantization_config"]["group_size"] = 64
    path.write_text(json.dumps(config))
    err = _inspect_error(folder, capsys)
    assert "config.json: quantization_config.group_size: expected 128" in err


def test_w4a8_awq_is_refused_naming_quant_algo(tmp_path, capsys):
    folder = _copy(tmp_path)
    for name, node in (("config.json", ("quantization_config",)),
                       ("hf_quant_config.json", ("quantization",))):
        config = json.loads((folder / name).read_text())
        config[node[0]]["quant_algo"] = "W4A8_AWQ"
        (folder / name).write_text(json.dumps(config))
    err = _inspect_error(folder, capsys)
    assert "quantization_config.quant_algo" in err
    assert "moecert holds its 16-bit activation form (W4A16_AWQ) only" in err


# --- against ModelOpt's own fake quantization ---------------------------------------------

FAKE_QUANT = FOLDER.parents[1] / "expected_dequant" / f"{FOLDER.name}.fakequant.safetensors"


def test_modelopt_own_fake_quantization_agrees_but_at_rounding_ties():
    """ModelOpt's own dequantization of expert 3's gate_proj (its weight quantizer applied to
    the weight, taken inside the export just before packing: tools/producers/
    modelopt_produce.py) and its pre_quant_scale, against moecert's reading of the file.
    The pre-quant scale is equal; every weight is equal (in bf16, the fake quantization's
    dtype) except where the fake quantization rounded an exact tie x.5 to the even code and
    the export's division landed just below it: there the two codes differ by one, the fake
    quantization's is even and the larger in magnitude (docs/checkpoints.md). The file wins."""
    own = load_file(str(FAKE_QUANT))
    ml = load_checkpoint(FOLDER, layer=0)
    ckpt = ml.checkpoint
    assert torch.equal(own["layers.0.experts.3.gate_proj.pre_quant_scale"],
                       ckpt.tensors["w13_pre_quant_scale"][3])
    mine = dequantize(ckpt)["w13"][3, :ml.N]
    theirs = own["layers.0.experts.3.gate_proj.weight"]
    differ = mine.to(theirs.dtype) != theirs
    assert differ.sum() < mine.numel() // 1000, int(differ.sum())
    scale = ckpt.tensors["w13_weight_scale"][3, :ml.N].to(torch.float64)  # one group along K
    file_codes = (mine / scale)[differ]
    fake_codes = (theirs.to(torch.float64) / scale)[differ].round()
    assert torch.equal(file_codes, file_codes.round())
    assert torch.equal((fake_codes - file_codes).abs(), torch.ones_like(file_codes))
    assert torch.equal(fake_codes % 2, torch.zeros_like(fake_codes))
    assert bool((fake_codes.abs() > file_codes.abs()).all())
