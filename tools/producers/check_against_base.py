"""Does each fixture hold the base model's experts under their names? A producer-side check.

    python tools/producers/check_against_base.py [--fixtures DIR] [--only NAME ...]

For every fixture with an `expected_dequant` file (the producer's own dequantization), rebuild
the base model (`tiny_models.make_model`, same seed) and compare each expert projection of the
expectation with the base model's weight of the same name: relative Frobenius error
|deq - w| / |w|. Quantization gives 0.01 (int8) to 0.17 (4-bit GPTQ); an error near sqrt(2)
means the weight stored under that name is not that expert's weight (for each such one, the
base weight it does match, if any, is printed). Prints one line per fixture; exit 1 if any
projection is above `LIMIT`.

Run it in the environment whose transformers made the fixture (the base model's parameter
layout is transformers'): `producers-llmc` for llm-compressor and the release layouts,
`producers-gptqmodel` for GPTQModel.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import torch
from fixture_io import FIXTURES, MANIFEST
from safetensors import safe_open
from safetensors.torch import load_file
from tiny_models import make_model

LIMIT = 0.5  # far above any quantization error here, far below a wrong weight's ~1.41
MIXTRAL = {"gate_proj": "w1", "up_proj": "w3", "down_proj": "w2"}


def base_weights(model: str, tmp: Path) -> dict[str, torch.Tensor]:
    """The base model's expert weights as `layers.L.experts.e.proj.weight` [out, in]."""
    raw = load_file(make_model(model, tmp / model) / "model.safetensors")
    out = {}
    for name, t in raw.items():
        parts = name.split(".")
        if "experts" not in parts:
            continue
        layer = parts[2]
        i = parts.index("experts")
        if parts[i + 1].isdigit():  # per-expert names
            proj = {v: k for k, v in MIXTRAL.items()}.get(parts[i + 2], parts[i + 2])
            out[f"layers.{layer}.experts.{parts[i + 1]}.{proj}.weight"] = t.double()
        elif parts[i + 1] == "gate_up_proj":  # gpt-oss fused [E, in, 2I], interleaved
            for e in range(t.shape[0]):
                out[f"layers.{layer}.experts.{e}.gate_proj.weight"] = t[e, :, 0::2].T.double()
                out[f"layers.{layer}.experts.{e}.up_proj.weight"] = t[e, :, 1::2].T.double()
        elif parts[i + 1] == "down_proj":
            for e in range(t.shape[0]):
                out[f"layers.{layer}.experts.{e}.down_proj.weight"] = t[e].T.double()
    return out


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


def check(name: str, entry: dict, fixtures: Path, base: dict[str, torch.Tensor]) -> list[str]:
    bad = []
    with safe_open(fixtures.parent / entry["expected_dequant"], "pt") as f:
        errors = {}
        for tensor in f.keys():
            deq = f.get_tensor(tensor).double()
            errors[tensor] = rel(deq, base[tensor])
            if errors[tensor] > LIMIT:
                match = min(((rel(deq, w), n) for n, w in base.items() if w.shape == deq.shape),
                            default=(float("inf"), "none"))
                where = f"matches base {match[1]}" if match[0] < LIMIT else "matches no base weight"
                bad.append(f"{tensor}: rel err {errors[tensor]:.2f}, {where}")
    print(f"{name}: {len(errors)} projections, rel err {min(errors.values()):.3f}.."
          f"{max(errors.values()):.3f}" + "".join(f"\n    {b}" for b in bad))
    return bad


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fixtures", type=Path, default=FIXTURES, help="fixture root folder")
    ap.add_argument("--only", nargs="*", help="these fixtures only")
    args = ap.parse_args(argv)
    manifest = json.loads((args.fixtures / MANIFEST).read_text())["fixtures"]
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        bases: dict[str, dict] = {}
        for name, entry in manifest.items():
            if (args.only and name not in args.only) or not entry["expected_dequant"]:
                continue
            model = entry["base_model"]
            if model not in bases:
                bases[model] = base_weights(model, Path(tmp))
            failed += bool(check(name, entry, args.fixtures, bases[model]))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
