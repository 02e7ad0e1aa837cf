"""Where fixtures go and what the manifest says about each: shared by every producer script.

A producer script quantizes a base model (`tiny_models.make_model`) into a scratch folder,
then calls `finish(...)`, which copies what a loader reads into the fixture folder
(`KEEP`: configs, weights, index; tokenizer files and generation configs are dropped: no
loader reads them) and writes the fixture's entry in `MANIFEST.json`: the producer, the
package versions that ran, the scheme and variant in moecert's words, the model shape and
the exact command. The manifest is JSON (the standard library writes it; TOML it only reads).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import shlex
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "checkpoints"
MANIFEST = "MANIFEST.json"
# files of a producer's output that a loader reads (or that say how it was made, and are small)
KEEP = ("config.json", "hf_quant_config.json", "quantize_config.json", "recipe.yaml",
        "model.safetensors", "model.safetensors.index.json")
KEEP_GLOBS = ("model-*-of-*.safetensors",)
# the versions recorded for every fixture (absent packages are recorded as null)
VERSIONED = ("torch", "transformers", "compressed-tensors", "safetensors")


def versions(*packages: str) -> dict[str, str | None]:
    """Installed versions of `packages` and of `VERSIONED`, None where absent."""
    out = {}
    for pkg in (*packages, *VERSIONED):
        try:
            out[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            out[pkg] = None
    return out


def command(name: str) -> str:
    """The command that makes fixture `name` alone (each fixture is made from its own base
    model and calibration set, so making it alone or with others gives the same bytes)."""
    script = Path(sys.argv[0]).resolve()
    try:
        script = script.relative_to(REPO)
    except ValueError:
        pass
    return shlex.join(["python", str(script), "--only", name])


def copy_kept(src: Path, dst: Path) -> list[str]:
    """Copy the files a loader needs from producer output `src` into fixture folder `dst`
    (emptied first); returns the names copied."""
    if dst.exists():
        shutil.rmtree(dst)
    dst.mkdir(parents=True)
    names = [n for n in KEEP if (src / n).exists()]
    for pattern in KEEP_GLOBS:
        names += sorted(p.name for p in src.glob(pattern))
    for n in names:
        shutil.copyfile(src / n, dst / n)
    return names


def update_manifest(out_root: Path, name: str, entry: dict) -> None:
    """Write (or replace) fixture `name`'s entry in `out_root/MANIFEST.json`, sorted by name."""
    path = out_root / MANIFEST
    data = json.loads(path.read_text()) if path.exists() else {"fixtures": {}}
    data["fixtures"][name] = entry
    data["fixtures"] = dict(sorted(data["fixtures"].items()))
    path.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n")


def finish(out_root: Path, name: str, produced: Path, *, producer: str, env: str,
           packages: tuple[str, ...],
           scheme: str, variant: dict, model: str, how: str, notes: str = "",
           expected: str | None = None) -> Path:
    """Copy producer output `produced` into `out_root/name` and record it in the manifest.

    `scheme` and `variant` are in moecert's words (`moecert.reference.schemes`: scheme name;
    group_size, sym, act_order, checkpoint_format, weight_strategy, activation); `how` says
    whether the producer's own package wrote the file or moecert's script did; `env` names the
    tox environment (`producers-<env>` in tox.ini) the command runs in."""
    from tiny_models import MODELS

    dst = out_root / name
    files = copy_kept(produced, dst)
    m = MODELS[model]
    config = json.loads((dst / "config.json").read_text())
    dense = config.get("mlp_only_layers", [])
    if "first_k_dense_replace" in config:
        dense = list(range(config["first_k_dense_replace"]))
    entry = {
        "producer": producer,
        "how": how,
        "versions": versions(*packages),
        "scheme": scheme,
        "variant": variant,
        "family": m.family,
        "base_model": model,
        "E": m.E, "K": m.K, "N": m.N, "topk": m.topk,
        "layers": config["num_hidden_layers"],
        "moe_layers": [i for i in range(config["num_hidden_layers"]) if i not in dense],
        "dense_layers": dense,
        "sharded": "model.safetensors.index.json" in files,
        "files": files,
        "expected_dequant": expected,
        "env": f"tox -e producers-{env}",
        "command": command(name),
        "notes": notes,
    }
    update_manifest(out_root, name, entry)
    return dst


def producer_main(doc: str, jobs, produce, argv: list[str] | None = None) -> int:
    """The command line every producer script shares: `--out ROOT` (default: the committed
    fixtures) and `--only NAME ...`; `produce(name, out_root)` returns the seconds its tool
    took to quantize, or None where no tool ran (the release layouts)."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--out", type=Path, default=FIXTURES, help="fixture root folder")
    ap.add_argument("--only", nargs="*", choices=sorted(jobs), help="these fixtures only")
    args = ap.parse_args(argv)
    for name in args.only or jobs:
        seconds = produce(name, args.out)
        done = "written" if seconds is None else f"quantized in {seconds:.1f} s"
        print(f"{name}: {done}", flush=True)
    return 0
