"""Build a large sharded MoE checkpoint in a real producer's layout, and time loading one layer.

    python tools/big_checkpoint.py build DIR [--layers 3] [--E 256 --K 7168 --N 2048]
    python tools/big_checkpoint.py measure DIR [--layer 1] [--experts 0:256]

`build` writes a DeepSeek-V3-sized model by default (E=256, K=7168, N=2048, topk 8): layer 0
dense (first_k_dense_replace = 1), layers 1.. MoE in compressed-tensors pack-quantized W4A16
(sym, group 128, bf16 scales, llm-compressor's per-expert names), with shared experts, router
and attention tensors, one shard per layer plus one for the rest, and an index. Each shard is
streamed a tensor at a time (header first, then each tensor's random bytes as it is drawn), so
building never holds more than one tensor. `measure` loads one layer with `load_checkpoint`
in a fresh process and prints the wall time and the peak resident memory (ru_maxrss; the
RssAnon / RssFile split from /proc at the end) and the bytes read through read(2)
(`rchar` of /proc/self/io: one layer's tensors, not the folder's). Delete DIR afterwards: a
layer is 5.8 GB.
"""

from __future__ import annotations

import argparse
import json
import math
import struct
import subprocess
import sys
import time
from pathlib import Path

import torch

_DTYPE = {torch.int32: "I32", torch.bfloat16: "BF16", torch.int64: "I64"}


def write_streamed(path: Path, specs: list[tuple[str, torch.dtype, tuple[int, ...]]],
                   make) -> int:
    """A safetensors file of `specs` (name, dtype, shape), each tensor drawn by make(name,
    dtype, shape) only when its bytes are written."""
    header, offset = {}, 0
    for name, dtype, shape in specs:
        size = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
        header[name] = {"dtype": _DTYPE[dtype], "shape": list(shape),
                        "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for name, dtype, shape in specs:
            t = make(name, dtype, shape)
            f.write(t.contiguous().view(torch.uint8).numpy().tobytes())
    return offset


def _random(name, dtype, shape, gen):
    if dtype == torch.int32:
        return torch.randint(-2**31, 2**31 - 1, shape, dtype=torch.int32, generator=gen)
    if dtype == torch.int64:  # weight_shape
        return torch.tensor(_shape_of[name], dtype=torch.int64)
    t = torch.rand(shape, generator=gen) * 0.01 + 1e-3  # positive scales / weights
    return t.to(dtype)


_shape_of: dict[str, list[int]] = {}


def expert_specs(L: int, E: int, K: int, N: int, g: int):
    out = []
    for e in range(E):
        for proj, n_out, n_in in (("gate_proj", N, K), ("up_proj", N, K), ("down_proj", K, N)):
            base = f"model.layers.{L}.mlp.experts.{e}.{proj}"
            out += [(f"{base}.weight_packed", torch.int32, (n_out, n_in // 8)),
                    (f"{base}.weight_scale", torch.bfloat16, (n_out, n_in // g)),
                    (f"{base}.weight_shape", torch.int64, (2,))]
            _shape_of[f"{base}.weight_shape"] = [n_out, n_in]
    return out


def layer_extras(L: int, E: int, K: int, N: int, moe: bool):
    out = [(f"model.layers.{L}.self_attn.q_proj.weight", torch.bfloat16, (1536, K)),
           (f"model.layers.{L}.input_layernorm.weight", torch.bfloat16, (K,))]
    if moe:
        out += [(f"model.layers.{L}.mlp.gate.weight", torch.bfloat16, (E, K)),
                (f"model.layers.{L}.mlp.gate.e_score_correction_bias", torch.bfloat16, (E,))]
        out += [(f"model.layers.{L}.mlp.shared_experts.{p}.weight", torch.bfloat16, s)
                for p, s in (("gate_proj", (N, K)), ("up_proj", (N, K)), ("down_proj", (K, N)))]
    else:
        out += [(f"model.layers.{L}.mlp.{p}.weight", torch.bfloat16, (256, 256))
                for p in ("gate_proj", "up_proj", "down_proj")]
    return out


def build(args) -> None:
    root = Path(args.dir)
    root.mkdir(parents=True, exist_ok=True)
    E, K, N, g = args.E, args.K, args.N, 128
    gen = torch.Generator().manual_seed(0)
    shards = [("model.embed_tokens.weight", torch.bfloat16, (1024, K)),
              ("lm_head.weight", torch.bfloat16, (1024, K)),
              ("model.norm.weight", torch.bfloat16, (K,))]
    shards = [shards + layer_extras(0, E, K, N, moe=False)]
    for L in range(1, args.layers):
        shards.append(layer_extras(L, E, K, N, moe=True) + expert_specs(L, E, K, N, g))
    weight_map, total = {}, 0
    t0 = time.perf_counter()
    for i, specs in enumerate(shards):
        fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        total += write_streamed(root / fname, specs,
                                lambda n, d, s: _random(n, d, s, gen))
        weight_map.update({n: fname for n, _, _ in specs})
        print(f"wrote {fname}: {total / 2**30:.1f} GiB so far, "
              f"{time.perf_counter() - t0:.0f} s", flush=True)
    (root / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": total}, "weight_map": weight_map}))
    config = {
        "model_type": "deepseek_v3", "architectures": ["DeepseekV3ForCausalLM"],
        "hidden_size": K, "moe_intermediate_size": N, "intermediate_size": 18432,
        "n_routed_experts": E, "n_shared_experts": 1, "num_experts_per_tok": 8,
        "first_k_dense_replace": 1, "num_hidden_layers": args.layers, "hidden_act": "silu",
        "n_group": 8, "topk_group": 4, "scoring_func": "sigmoid", "norm_topk_prob": True,
        "routed_scaling_factor": 2.5, "torch_dtype": "bfloat16",
        "quantization_config": {
            "quant_method": "compressed-tensors", "format": "pack-quantized",
            "version": "0.19.0", "quantization_status": "compressed",
            "config_groups": {"group_0": {
                "targets": ["Linear"], "format": "pack-quantized", "input_activations": None,
                "weights": {"num_bits": 4, "type": "int", "symmetric": True,
                            "strategy": "group", "group_size": g, "actorder": None}}},
            "ignore": ["lm_head", "re:.*mlp.gate$", "re:.*shared_experts.*"]}}
    (root / "config.json").write_text(json.dumps(config, indent=1))
    print(f"built {root}: {total / 2**30:.1f} GiB in {len(shards)} shards, "
          f"{time.perf_counter() - t0:.0f} s")


def measure(args) -> None:
    code = f"""
import resource, time, torch
from moecert.reference import load_checkpoint
a, b = {args.experts.split(':')[0]}, {args.experts.split(':')[1]}
t0 = time.perf_counter()
ml = load_checkpoint({args.dir!r}, layer={args.layer}, experts=range(a, b))
dt = time.perf_counter() - t0
held = sum(t.numel() * t.element_size() for t in ml.checkpoint.tensors.values())
status = dict(l.split(':', 1) for l in open('/proc/self/status') if l.startswith('Rss'))
# bytes this process read through read(2) (the loader's plain file reads; imports included)
io = dict(l.split(':', 1) for l in open('/proc/self/io'))
print(f"read {{int(io['rchar']) / 2**30:.2f}} GiB through read(2) "
      f"(imports, configs, headers and the tensors read)")
print(f"layer {args.layer} experts {{a}}:{{b}}: {{ml.checkpoint.scheme}}, {{dt:.1f}} s, "
      f"tensors held {{held / 2**30:.2f}} GiB, peak RSS "
      f"{{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f}} GiB "
      f"(at the end: {{', '.join(k + v.strip() for k, v in status.items())}}), "
      f"files {{len(ml.source.files)}}, sha256 {{ml.source.sha256[:12]}}")
"""
    subprocess.run([sys.executable, "-c", code], check=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("dir")
    b.add_argument("--layers", type=int, default=3, help="decoder layers (layer 0 dense)")
    b.add_argument("--E", type=int, default=256)
    b.add_argument("--K", type=int, default=7168)
    b.add_argument("--N", type=int, default=2048)
    m = sub.add_parser("measure")
    m.add_argument("dir")
    m.add_argument("--layer", type=int, default=1)
    m.add_argument("--experts", default="0:256", help="A:B, the experts to read")
    args = p.parse_args()
    build(args) if args.cmd == "build" else measure(args)


if __name__ == "__main__":
    main()
