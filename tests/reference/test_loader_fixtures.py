"""Every fixture in tests/fixtures/checkpoints (made by the producers' own packages, see its
MANIFEST.json) loads with the scheme and variant the manifest records; the producer's own
decompression, where the fixture ships it, equals moecert's dequantization bit for bit; the
torch backend on each loaded layer agrees with the reference."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from moecert.kernels.native import TorchBackend
from moecert.reference import (
    SCHEMES,
    CheckpointError,
    dequantize,
    load_checkpoint,
)

sys.path.insert(0, str(Path(__file__).parent))
from loaded_layer import INT8_STEP, UNIT_ROUNDOFF, torch_backend_error

ROOT = Path(__file__).parents[1] / "fixtures" / "checkpoints"
MANIFEST = json.loads((ROOT / "MANIFEST.json").read_text())["fixtures"] \
    if (ROOT / "MANIFEST.json").exists() else {}


def held(name: str) -> bool:
    return MANIFEST[name]["scheme"] in SCHEMES


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_fixture_loads_as_the_manifest_says(name):
    entry = MANIFEST[name]
    if not held(name):
        with pytest.raises(CheckpointError, match=f"scheme {entry['scheme']} not supported yet"):
            load_checkpoint(ROOT / name)
        return
    layers = load_checkpoint(ROOT / name)
    assert [s.layer for s in layers] == entry["moe_layers"]
    for L in entry["moe_layers"]:
        ml = load_checkpoint(ROOT / name, layer=L)
        ckpt = ml.checkpoint
        assert ckpt.scheme == entry["scheme"]
        if entry["producer"] != "moecert":  # release layouts written by moecert's script
            assert ml.source.producer == entry["producer"]
        for attr, value in entry["variant"].items():
            assert getattr(ckpt, attr) == value, attr
        assert (ml.E, ml.K, ml.N, ml.topk) == (entry["E"], entry["K"], entry["N"],
                                               entry["topk"])
        w = dequantize(ckpt, ml.problem(1))
        assert all(torch.isfinite(t).all() for t in w.values())
        assert "attention" in ml.not_read and ml.router.weight is not None
    for L in entry["dense_layers"]:
        with pytest.raises(CheckpointError, match=f"layer {L}: expected a decoder layer with "
                           "routed experts"):
            load_checkpoint(ROOT / name, layer=L)


EXPECTED = sorted(n for n, e in MANIFEST.items() if e.get("expected_dequant") and held(n))


@pytest.mark.parametrize("name", EXPECTED)
def test_dequantization_equals_the_producers_decompression(name):
    """`expected_dequant` holds the producer's decompressed weights under the model's own
    per-expert names (...experts.<e>.<gate|up|down projection>.weight)."""
    from safetensors.torch import load_file

    entry = MANIFEST[name]
    expected = load_file(str(ROOT.parent / entry["expected_dequant"]))
    compared = 0
    for L in entry["moe_layers"]:
        ml = load_checkpoint(ROOT / name, layer=L)
        w = dequantize(ml.checkpoint)
        for key, want in expected.items():
            parts = key.split(".")
            if f"layers.{L}." not in key or "experts" not in parts or not parts[-1] == "weight":
                continue
            e = int(parts[parts.index("experts") + 1])
            proj = parts[parts.index("experts") + 2]
            n = ml.N
            # gpt-oss keeps gate/up interleaved by row (gate j = row 2j): so does the
            # Checkpoint (activation swigluoai)
            gate, up = (slice(0, None, 2), slice(1, None, 2)) \
                if ml.activation == "swigluoai" else (slice(0, n), slice(n, 2 * n))
            got = {"gate_proj": w["w13"][e, gate], "w1": w["w13"][e, gate],
                   "up_proj": w["w13"][e, up], "w3": w["w13"][e, up],
                   "down_proj": w["w2"][e], "w2": w["w2"][e]}[proj]
            assert torch.equal(got.to(want.dtype), want), key
            compared += 1
    assert compared, f"{entry['expected_dequant']} holds no per-expert weights of layers " \
        f"{entry['moe_layers']}"


@pytest.mark.parametrize("name", sorted(n for n in MANIFEST if held(n)))
def test_torch_backend_agrees_with_the_reference_on_each_fixture(name):
    L = MANIFEST[name]["moe_layers"][-1]
    ml = load_checkpoint(ROOT / name, layer=L)
    problem = ml.problem(5)
    why = TorchBackend().supports(ml.checkpoint, problem)
    if why is not None:
        pytest.skip(f"torch does not claim {name}: {why}")
    int8 = ml.checkpoint.info.activation_element == "int8" and ml.checkpoint.activation != "none"
    bound = INT8_STEP if int8 else UNIT_ROUNDOFF[problem.dtype]
    assert torch_backend_error(ml, problem, seed=4) < bound
