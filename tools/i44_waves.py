"""How full the last wave of a grouped GEMM's programs is, and how many of an expert-padded
row block's rows are real, for top-k routing of random normal logits (as
reference.make_inputs draws them for the bench; other seeds). No GPU: arithmetic on the
launch grid only. Printed per seed: tokens per expert, the fraction of the padded rows that
are routed rows, and per GEMM its programs (row blocks x column tiles), waves over the SMs and
the last wave's fill (tune.last_wave_fill, the tuner's SPLIT_K rule).

    python tools/i44_waves.py --M 1024 --experts 8 --topk 2 --gemm 28672:256 --gemm 4096:256 \
        --gemm 4096:128 --block-m 128 --sms 132

Mixtral-8x7B's tuned bf16 entry (h200.json, the 2048-row bucket): BLOCK_M 128, gemm1 N 28672
on 256 columns, gemm2 N 4096 on 256; an H200 has 132 SMs (docs/speed.md, round twenty).
"""
import argparse
import math

import torch
from moecert.kernels.triton_moe.tune import last_wave_fill


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--M", type=int, required=True, help="tokens")
    p.add_argument("--experts", type=int, required=True)
    p.add_argument("--topk", type=int, required=True)
    p.add_argument("--gemm", action="append", required=True, metavar="N:BLOCK_N",
                   help="a GEMM's output columns and its tile's columns (repeat)")
    p.add_argument("--block-m", type=int, required=True)
    p.add_argument("--sms", type=int, required=True)
    p.add_argument("--seeds", type=int, default=3)
    args = p.parse_args()
    for seed in range(args.seeds):
        logits = torch.randn(args.M, args.experts, generator=torch.Generator().manual_seed(seed))
        per_expert = torch.bincount(logits.topk(args.topk, dim=1).indices.flatten(),
                                    minlength=args.experts).tolist()
        blocks = sum(math.ceil(n / args.block_m) for n in per_expert)
        real = args.M * args.topk / (blocks * args.block_m)
        parts = []
        for gemm in args.gemm:
            n, block_n = (int(x) for x in gemm.split(":"))
            programs = blocks * math.ceil(n / block_n)
            parts.append(f"N {n} / {block_n}: {programs} programs, "
                         f"{programs / args.sms:.2f} waves, "
                         f"last wave {last_wave_fill(programs, args.sms):.2f} full")
        print(f"seed {seed}: tokens per expert {per_expert}; {blocks} row blocks, "
              f"{real:.2f} of their rows routed; " + "; ".join(parts))


if __name__ == "__main__":
    main()
