"""Every shipped tuned layer's tile choice (`heuristics.pick_configs`) at M 1 to 4096, offline:
the lookups a change to the files or the lookup rules moves, without a GPU.

    python tools/lookup_snapshot.py OUT.json                   # this tree's choices
    PYTHONPATH=/tmp/old python tools/lookup_snapshot.py OLD.json  # another tree's (a shim)
    python tools/lookup_snapshot.py OUT.json --against OLD.json   # and what moved

Each device file is read as the GPU of that file would read it (capability 9.0, an H100's
shared memory); the rows of a layer are M x its top-k (Mixtral-8x7B 2, the others 8). With
--against, prints each changed lookup with "decode" or "prefill" (heuristics.PREFILL_ROWS) and
exits 1 when a decode-size lookup moved. (2026-12-01: it found that bf16 Mixtral-8x7B's new
prefill buckets answered at decode sizes.)
"""

from __future__ import annotations

import argparse
import json
import re
import sys

TOPK = {8: 2, 128: 8, 256: 8}
MS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)


def snapshot() -> dict[str, list]:
    from moecert.kernels.triton_moe import configs, heuristics, kinds

    heuristics.INTERPRET = False
    names = {v: k for k, v in kinds.WEIGHT_NAMES.items()}
    acts = {v: k for k, v in kinds.ACT_NAMES.items()}
    out = {}
    for path in sorted(configs.CONFIG_DIR.glob("*.json")):
        device = path.stem
        configs.current_device_key = lambda d=device: d
        configs.current_capability = lambda: (9, 0)
        configs.current_shared_memory = lambda: 232448
        configs.load_table.cache_clear()
        for key in configs.read_table(path):
            weight = names.get(key.weight)
            if weight is None:  # W_INT4_ZERO, W_FP4_E4M3: a kind's keyed variants
                weight = names["W_INT4"] if key.weight.startswith("W_INT4") else names["W_FP4"]
            for m in MS:
                rows = m * TOPK[key.experts]
                out[f"{device} {key} {rows}"] = list(heuristics.pick_configs(
                    rows, key.experts, weight, acts[key.act], key.gemm1, key.gemm2,
                    key.weight))
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--against", default=None)
    args = p.parse_args()
    now = snapshot()
    with open(args.out, "w") as f:
        json.dump(now, f, sort_keys=True)
    print(f"{len(now)} lookups -> {args.out}")
    if args.against is None:
        return 0
    from moecert.kernels.triton_moe import heuristics

    with open(args.against) as f:
        old = json.load(f)
    decode_moved = 0
    for k in sorted(set(now) & set(old)):
        if now[k] == old[k]:
            continue
        rows, experts = int(k.split()[-1]), int(re.search(r"experts=(\d+)", k).group(1))
        phase = "prefill" if heuristics.prefill_block_m(rows, experts) else "decode"
        decode_moved += phase == "decode"
        print(f"{phase:8} {k}: BLOCK_M {old[k][0]['BLOCK_M']} -> {now[k][0]['BLOCK_M']}")
    print(f"{len(set(now) - set(old))} lookups of new layers; {decode_moved} decode lookups moved")
    return 1 if decode_moved else 0


if __name__ == "__main__":
    sys.exit(main())
