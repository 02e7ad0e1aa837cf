"""Say whether regenerated fixtures equal the committed ones, tensor by tensor, bit for bit.

    python tools/producers/compare_fixtures.py COMMITTED REGENERATED

Both arguments are `tests/fixtures`-shaped folders (`checkpoints/` with `MANIFEST.json`,
and `expected_dequant/`). Only the fixtures the regenerated manifest lists are compared (a
producer environment regenerates its own). For each: the same files; in every safetensors
file the same tensor names, dtypes, shapes and bytes; JSON files equal once parsed; other
files (recipe.yaml) equal as text; the manifest entries equal. Prints one line per fixture
and exits 1 if any differs.

Ignored, and why:
- safetensors `__metadata__` (the header's free-form map; the producers here write only
  {"format": "pt"}, but nothing reads it, and other versions add dates or versions),
  reported as a note when it differs;
- JSON keys in `VOLATILE_KEYS`: GPTQModel writes its temporary offload folder
  (`meta.offload_to_disk_path`, a fresh random name each run) into quantize_config.json
  and config.json.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from safetensors import safe_open

VOLATILE_KEYS = frozenset({"offload_to_disk_path"})


def _strip(obj):
    if isinstance(obj, dict):
        return {k: _strip(v) for k, v in obj.items() if k not in VOLATILE_KEYS}
    if isinstance(obj, list):
        return [_strip(v) for v in obj]
    return obj


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.uint8) if t.dim() else t.reshape(1).view(torch.uint8)


def compare_safetensors(a: Path, b: Path) -> tuple[list[str], list[str]]:
    """(differences, notes) between two safetensors files."""
    diffs, notes = [], []
    with safe_open(a, "pt") as fa, safe_open(b, "pt") as fb:
        ka, kb = set(fa.keys()), set(fb.keys())
        for name in sorted(ka ^ kb):
            diffs.append(f"{b.name}: tensor {name} only in {'committed' if name in ka else 'new'}")
        for name in sorted(ka & kb):
            ta, tb = fa.get_tensor(name), fb.get_tensor(name)
            if ta.dtype != tb.dtype or ta.shape != tb.shape:
                diffs.append(f"{b.name}: {name} {ta.dtype} {list(ta.shape)} became "
                             f"{tb.dtype} {list(tb.shape)}")
            elif not torch.equal(_bits(ta), _bits(tb)):
                n = int((_bits(ta) != _bits(tb)).sum())
                diffs.append(f"{b.name}: {name}: {n} of {_bits(ta).numel()} bytes differ")
        if fa.metadata() != fb.metadata():
            notes.append(f"{b.name}: header metadata differs (ignored)")
    return diffs, notes


def compare_file(a: Path, b: Path) -> tuple[list[str], list[str]]:
    if a.suffix == ".safetensors":
        return compare_safetensors(a, b)
    if a.suffix == ".json":
        same = _strip(json.loads(a.read_text())) == _strip(json.loads(b.read_text()))
    else:
        same = a.read_bytes() == b.read_bytes()
    return ([] if same else [f"{a.name} differs"]), []


def compare(committed: Path, new: Path) -> int:
    old_man = json.loads((committed / "checkpoints" / "MANIFEST.json").read_text())["fixtures"]
    new_man = json.loads((new / "checkpoints" / "MANIFEST.json").read_text())["fixtures"]
    changed = 0
    for name, entry in new_man.items():
        if name not in old_man:
            print(f"{name}: NEW (not committed)")
            changed += 1
            continue
        diffs, notes = [], []
        old_entry = old_man[name]
        for key in sorted(set(old_entry) | set(entry)):
            if old_entry.get(key) != entry.get(key):
                diffs.append(f"manifest {key}: {old_entry.get(key)!r} -> {entry.get(key)!r}")
        fa, fb = committed / "checkpoints" / name, new / "checkpoints" / name
        names_a = {p.name for p in fa.iterdir()}
        names_b = {p.name for p in fb.iterdir()}
        diffs += [f"file {n} only in {'committed' if n in names_a else 'new'}"
                  for n in sorted(names_a ^ names_b)]
        pairs = [(fa / n, fb / n) for n in sorted(names_a & names_b)]
        if entry.get("expected_dequant"):
            pairs.append((committed / entry["expected_dequant"], new / entry["expected_dequant"]))
        for a, b in pairs:
            if not a.exists() or not b.exists():
                diffs.append(f"{a.name} missing on one side")
                continue
            d, n = compare_file(a, b)
            diffs += d
            notes += n
        status = "CHANGED" if diffs else "same bytes"
        changed += bool(diffs)
        print(f"{name}: {status}" + "".join(f"\n    {d}" for d in diffs + notes))
    print(f"{len(new_man)} fixtures compared, {changed} changed")
    return 1 if changed else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("committed", type=Path, help="the committed tests/fixtures folder")
    ap.add_argument("regenerated", type=Path, help="a folder with checkpoints/ made anew")
    args = ap.parse_args(argv)
    return compare(args.committed, args.regenerated)


if __name__ == "__main__":
    sys.exit(main())
