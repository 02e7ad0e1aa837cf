"""Write a model folder in a producer's layout at a real model's layer size, with random
values: for timing and GPU runs of `moecert run --checkpoint` on a layer larger than the
committed fixtures.

    python tools/make_model_folder.py OUT --producer ct-w4a16|ct-w4afp8 [--shape E,K,N,TOPK]
                                      [--layers 2] [--shards 1] [--seed 0]

The experts are `random_checkpoint`'s draw of the scheme (codes and scales in storage layout,
no quantization pass: seconds at DeepSeek size) split into the per-expert tensors that
llm-compressor writes for a Qwen3-MoE model (tests/reference/model_folders.py), with the
config.json its quantization config would carry. Layer 0 is dense unless --all-moe.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "reference"))

import model_folders as mf  # noqa: E402
from moecert.reference import MoEProblem, random_checkpoint  # noqa: E402

W4AFP8_INPUTS = {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": True,
                 "symmetric": True}
# producer layout -> (moecert scheme, checkpoint attributes, quantization_config)
PRODUCERS = {
    "ct-w4a16": ("ct-int4", {"group_size": 128, "checkpoint_format": "ct-0.18"},
                 lambda: mf.ct_config(4, 128)),
    "ct-w4afp8": ("w4a8-fp8", {"group_size": 128},
                  lambda: mf.ct_config(4, 128, fmt="int-quantized",
                                       input_activations=W4AFP8_INPUTS)),
}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="tools/make_model_folder.py")
    p.add_argument("out")
    p.add_argument("--producer", choices=sorted(PRODUCERS), required=True)
    p.add_argument("--shape", default="128,2048,768,8", help="E,K,N,TOPK (Qwen3-30B-A3B)")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--all-moe", action="store_true")
    p.add_argument("--shards", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    E, K, N, topk = (int(v) for v in args.shape.split(","))
    scheme, attrs, qc = PRODUCERS[args.producer]
    P = MoEProblem(M=1, K=K, N=N, E=E, topk=topk)
    tensors = mf.model_extras(K)
    for L in range(args.layers):
        moe = args.all_moe or L > 0
        tensors.update(mf.layer_extras(L, K, E, router=moe))
        if moe:
            ckpt = random_checkpoint(scheme, P, seed=args.seed + L, **attrs)
            tensors.update(mf.split_expert_tensors(ckpt, f"model.layers.{L}.mlp.experts"))
        else:
            for proj in ("gate_proj", "up_proj", "down_proj"):
                tensors[f"model.layers.{L}.mlp.{proj}.weight"] = torch.ones(8, 8).bfloat16()
    config = mf.qwen3_config(E, K, N, topk, qc(), num_hidden_layers=args.layers)
    out = mf.write_folder(Path(args.out), config, tensors, shards=args.shards)
    size = sum(f.stat().st_size for f in out.glob("*.safetensors"))
    print(f"{out}: {args.producer} ({scheme}), E={E} K={K} N={N} topk={topk}, "
          f"{args.layers} layers, {size / 2**20:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
