"""SASS instructions per iteration of each loop in a cubin (tools/sm90_compile.py keeps them in
/tmp/i34c/): a loop is the run of instructions from a label to the branch back to it; for the
grouped GEMM the K loop is the long one, one K step per iteration (K_UNROLL 1). Printed per
loop: the count and the opcodes by frequency. nvdisasm from Triton's wheel; no GPU needed.

    python tools/sass_loop.py /tmp/i34c/*.cubin

Issue-bound reasoning (docs/speed.md, issue 44): an SM issues at most 4 warp instructions per
cycle, so instructions per step x warps per program bound a program's step from below.
"""
import collections
import os
import re
import subprocess
import sys

import triton

NVDISASM = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/nvdisasm")


def loops(path: str) -> list[tuple[int, collections.Counter]]:
    """(instructions, opcode counts) of each backward-branch loop in the cubin."""
    sass = subprocess.run([NVDISASM, "-c", path], capture_output=True, text=True,
                          check=True).stdout.splitlines()
    labels, ins = {}, []
    for line in sass:
        m = re.match(r"^(\.L_x_\d+):", line.strip())
        if m:
            labels[m.group(1)] = len(ins)
            continue
        m = re.search(r"/\*[0-9a-f]{4,}\*/\s+(.*?);", line)
        if m:
            ins.append(m.group(1).strip())
    out = []
    for i, text in enumerate(ins):
        m = re.search(r"BRA `\((\.L_x_\d+)\)", text)
        if m and labels.get(m.group(1), len(ins)) <= i:
            body = ins[labels[m.group(1)]:i + 1]
            # the opcode without its predicate (@P0, @!UP1) and modifiers (.U32, .LUT)
            ops = collections.Counter(re.sub(r"^@!?U?P\w+\s+", "", s).split()[0].split(".")[0]
                                      for s in body)
            out.append((len(body), ops))
    return out


if __name__ == "__main__":
    for path in sys.argv[1:]:
        for n, ops in loops(path):
            if n > 1:  # (the trailing `BRA` to itself after EXIT)
                print(f"{os.path.basename(path)[:48]}: {n} instructions per iteration; "
                      + ", ".join(f"{k} {v}" for k, v in ops.most_common()))
