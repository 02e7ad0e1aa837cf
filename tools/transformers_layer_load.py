"""Time and peak memory of the transformers adapter's load of one model-folder layer: the
whole folder through from_pretrained against decoder layer L alone (kernels/
transformers_engine/one_layer.py), each in a fresh process.

    python tools/transformers_layer_load.py FOLDER [--layer L] [--repeat 3]
    python tools/transformers_layer_load.py --make-qwen3moe DIR [--layers 8] [--experts 16]
        [--hidden 1024] [--intermediate 512]     # a bf16 Qwen3-MoE folder written by
                                                 # transformers' save_pretrained (random init)

Each measurement is a child process that imports torch and transformers, records its peak
RSS (ru_maxrss) after importing the model's module, loads the layer through the adapter (`TransformersBackend._load`, the
experts implementation "eager", bf16), and prints the load's wall time and the rise of the
peak RSS over the imports' (the memory the load needed). Needs transformers (tox -e
transformers, or the venv of docs/transformers.md).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import json, resource, sys, time, torch
from moecert.kernels.transformers_engine import backend as tb
from moecert.kernels import Variant
from moecert.reference import MoEProblem
t = tb._transformers()
folder, layer_index, one = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "one"
t["causal_lm"][type(t["auto_config"].from_pretrained(folder))]  # the model's module imported
cfg = json.load(open(folder + "/config.json"))
P = MoEProblem(M=1, K=cfg["hidden_size"], N=cfg.get("moe_intermediate_size", cfg.get("intermediate_size")),
               E=2, topk=1)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
layer = tb.TransformersLayer("transformers", Variant.of("bf16"), P)
t = time.perf_counter()
tb.TransformersBackend()._load(layer, folder, layer_index, torch.device("cpu"), one=one)
dt = time.perf_counter() - t
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"seconds": dt, "peak_rss_rise_mb": (peak - before) / 1024,
                  "peak_rss_mb": peak / 1024, "loaded": layer.loaded}))
"""


def measure(folder: Path, layer: int, one: bool) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, str(folder), str(layer),
                          "one" if one else "whole"], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def make_qwen3moe(path: Path, layers: int, experts: int, hidden: int, inter: int) -> None:
    import torch
    from transformers import AutoModelForCausalLM, Qwen3MoeConfig

    config = Qwen3MoeConfig(hidden_size=hidden, moe_intermediate_size=inter,
                            intermediate_size=inter, num_experts=experts,
                            num_experts_per_tok=2, num_hidden_layers=layers,
                            num_attention_heads=8, num_key_value_heads=2, head_dim=64,
                            vocab_size=1024, mlp_only_layers=[], decoder_sparse_step=1)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.save_pretrained(path, max_shard_size="100MB")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", nargs="?")
    ap.add_argument("--layer", type=int)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--make-qwen3moe", metavar="DIR")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--experts", type=int, default=16)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--intermediate", type=int, default=512)
    a = ap.parse_args(argv)
    if a.make_qwen3moe:
        make_qwen3moe(Path(a.make_qwen3moe), a.layers, a.experts, a.hidden, a.intermediate)
        return 0
    if not a.folder:
        ap.error("FOLDER or --make-qwen3moe DIR")
    folder = Path(a.folder).resolve()
    cfg = json.loads((folder / "config.json").read_text())
    layer = cfg["num_hidden_layers"] - 1 if a.layer is None else a.layer
    size = sum(f.stat().st_size for f in folder.glob("*.safetensors"))
    print(f"{folder.name}: {cfg['num_hidden_layers']} layers, {size / 2**20:.1f} MiB of "
          f"safetensors; layer {layer}")
    for one in (False, True):
        runs = [measure(folder, layer, one) for _ in range(a.repeat)]
        secs = sorted(r["seconds"] for r in runs)
        rise = sorted(r["peak_rss_rise_mb"] for r in runs)
        print(f"  {'one layer' if one else 'whole':9s}: load {secs[len(secs) // 2]:.2f} s "
              f"(median of {a.repeat}; {secs[0]:.2f}..{secs[-1]:.2f}), peak RSS rise "
              f"{rise[len(rise) // 2]:.0f} MiB ({runs[0]['loaded']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
