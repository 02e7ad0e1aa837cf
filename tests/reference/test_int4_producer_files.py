"""Issue 42's int4 producer fixtures (AutoRound's default and auto_gptq exports, Quark's
int4_wo_32), read two ways: by moecert's loader and dequantizer, and by a plain-torch reading
of the safetensors written here from the producers' layouts (tests/fixtures/checkpoints
MANIFEST.json notes), independent of moecert's packing code. Both must agree bit for bit on
every expert; and AutoRound's signed scales must be there to be read."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from moecert.reference import dequantize, load_checkpoint
from safetensors.torch import load_file

ROOT = Path(__file__).parents[1] / "fixtures" / "checkpoints"
GROUP = 32
PROJ = ("gate_proj", "up_proj", "down_proj")


def _nibbles(words: torch.Tensor) -> torch.Tensor:
    """int32 [..., W] -> [..., W, 8] nibble fields, slot i = bits 4i..4i+3."""
    shifts = torch.arange(0, 32, 4, dtype=torch.int64)
    return (words.to(torch.int64).unsqueeze(-1) >> shifts) & 0xF


def _gptq_v1(t: dict, base: str) -> torch.Tensor:
    """GPTQ v1 (AutoGPTQ): qweight [K/8, N] packed along K, low nibble first, u = q + 8;
    qzeros [G, N/8] packed along N holding z - 1; scales [G, N]; w = (u - z) * s."""
    u = _nibbles(t[f"{base}.qweight"]).permute(0, 2, 1).reshape(-1, t[f"{base}.qweight"].shape[1])
    z = _nibbles(t[f"{base}.qzeros"]).reshape(t[f"{base}.qzeros"].shape[0], -1) + 1
    s = t[f"{base}.scales"].to(torch.float64)
    g = torch.arange(u.shape[0]) // GROUP
    return ((u - z[g]).to(torch.float64) * s[g]).T  # [N, K]


_QUARK_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)  # slot i of a word holds column 8c + order[i]


def _quark_signed(words: torch.Tensor) -> torch.Tensor:
    """int32 [R, C] Quark words -> signed int4 [R, 8C] in column order."""
    f = _nibbles(words)
    f = torch.where(f >= 8, f - 16, f)  # two's complement nibbles
    out = torch.empty_like(f)
    out[..., list(_QUARK_ORDER)] = f
    return out.reshape(words.shape[0], -1)


def _quark_int4(t: dict, base: str) -> torch.Tensor:
    """Quark int4 per group: weight [K, N/8] (transposed), weight_zero_point [G, N/8],
    weight_scale [G, N]; w = (q - z) * s."""
    q = _quark_signed(t[f"{base}.weight"])
    z = _quark_signed(t[f"{base}.weight_zero_point"])
    s = t[f"{base}.weight_scale"].to(torch.float64)
    g = torch.arange(q.shape[0]) // GROUP
    return ((q - z[g]).to(torch.float64) * s[g]).T  # [N, K]


READERS = {"autoround-default-qwen3moe": _gptq_v1, "autoround-gptq-qwen3moe": _gptq_v1,
           "quark-int4-wo32-qwen3moe": _quark_int4}


@pytest.mark.parametrize("name", sorted(READERS))
def test_moecert_reads_the_file_as_plain_torch_does(name):
    folder = ROOT / name
    tensors = load_file(str(folder / "model.safetensors"))
    ml = load_checkpoint(folder, layer=0)
    w = dequantize(ml.checkpoint)
    N = ml.N
    for e in range(ml.E):
        plain = {p: READERS[name](tensors, f"model.layers.0.mlp.experts.{e}.{p}") for p in PROJ}
        assert torch.equal(w["w13"][e, :N], plain["gate_proj"]), (name, e)
        assert torch.equal(w["w13"][e, N:], plain["up_proj"]), (name, e)
        assert torch.equal(w["w2"][e], plain["down_proj"]), (name, e)


@pytest.mark.parametrize("name", ["autoround-default-qwen3moe", "autoround-gptq-qwen3moe"])
def test_autoround_scales_are_signed(name):
    """AutoRound's symmetric rule: about half the scales negative, so the reading above
    exercises the sign (a reader that refused or took |s| would fail it)."""
    tensors = load_file(str(ROOT / name / "model.safetensors"))
    scales = torch.cat([t.flatten() for k, t in tensors.items()
                        if ".experts." in k and k.endswith(".scales")])
    assert 0.3 < float((scales < 0).double().mean()) < 0.7
