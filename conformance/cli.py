"""The `moecert` command line (SPEC section 5). Subcommands arrive with the issues that need
them; this one lists the scheme vocabulary and format records and times the reference."""

from __future__ import annotations

import argparse
import json
import os
import sys

# Before torch's first allocation: back large CPU tensors with transparent huge pages. The
# reference's big float64 temporaries otherwise spend more time in page faults than in
# arithmetic (DeepSeek-V3 layer on 2 cores: about 70 s without, 40-50 s with).
os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")

from moecert.reference import RECORDS, SCHEMES


def cmd_list(args) -> int:
    print(f"{'scheme':<12} {'family':<6} {'bits':>4}  {'strategies':<22} {'activations':<44} "
          f"{'formats':<22} groups")
    for s in SCHEMES.values():
        print(f"{s.name:<12} {s.family:<6} {s.weight_bits:>4}  {','.join(s.strategies) or '-':<22}"
              f" {','.join(s.activation_modes):<44} {','.join(s.checkpoint_formats) or '-':<22} "
              f"{','.join(map(str, s.group_sizes)) or '-'}")
    if args.records:
        print()
        for key, r in RECORDS.items():
            print(f"{key}\n  layout: {r.weight_layout}; pack {r.pack_dim} {r.packing} "
                  f"{r.bit_order}; interleave {r.interleave}; code offset {r.code_offset}\n"
                  f"  zeros: {r.zero_domain} packed along {r.zero_pack_dim}; scales: "
                  f"{r.scale_layout} ({r.scale_dtype}); global scale {r.global_scale}\n"
                  f"  scale rule: {r.scale_rule}; rounding {r.element_rounding}; "
                  f"non-finite: {r.nonfinite}")
    return 0


def cmd_bench(args) -> int:
    from .bench import bench_reference

    result = bench_reference(args.shape, args.device, args.repeats)
    print(json.dumps(result))
    return 0 if result["finite"] else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="moecert", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("list", help="schemes and their format records")
    p.add_argument("--records", action="store_true", help="also print every format record")
    p.set_defaults(func=cmd_list)
    p = sub.add_parser("bench", help="time the float64 reference on a model-sized layer")
    p.add_argument("target", choices=["reference"])
    p.add_argument("--shape", default="smoke",
                   choices=["smoke", "qwen3-30b-a3b", "mixtral-8x7b", "deepseek-v3"])
    p.add_argument("--device", default="cpu")
    p.add_argument("--repeats", type=int, default=1)
    p.set_defaults(func=cmd_bench)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
