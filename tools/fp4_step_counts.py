"""SASS instructions per 64-column K step of the FP4 decode GEMM at the H200's decode tiles, LEAN
against CARRY + LEAN (the default since round three) against CARRY + LEAN with the block scales
decoded into bf16 at load (MOECERT_TRITON_FP4_SCALE_BF16=1, layout.scale_bf16), compiled
offline for sm90 (no GPU): what docs/speed.md "Round three" and "Round four" tabulate. Each
tile goes through fused_moe.moe_gemm with the launch caught by tools/sm90_compile.py's stub and
built as a CUDA sm90 device would get it (the PTX decode; CARRY's NVFP4 scales by the hardware
e4m3 conversion). Use the GPU machine's triton to read its numbers (3.6 there):
`pip install --target DIR triton==3.6.0` and DIR first on PYTHONPATH.

    python tools/fp4_step_counts.py
"""
import contextlib
import glob
import io
import os
import sys

os.environ.pop("TRITON_INTERPRET", None)
sys.argv = sys.argv[:1]  # sm90_compile reads its variants from argv: none
sys.path.insert(0, os.path.dirname(__file__))
import sass_loop  # noqa: E402
import sm90_compile as sc  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402
from moecert.kernels.triton_moe import configs, fused_moe, kinds, layout  # noqa: E402
from moecert.kernels.triton_moe.align import align_assignments  # noqa: E402

E, TOPK, N, M = 4, 2, 512, 37
# (scheme, BLOCK_N, stages, SWAP_AB, K_UNROLL, K, who uses it: configs/h200.json or the default)
TILES = [
    ("nvfp4", 64, 4, False, 1, 4096, "Mixtral w13 at M <= 32"),
    ("nvfp4", 64, 3, True, 2, 7168, "Mixtral w2, DeepSeek-V3"),  # K even for two steps
    ("nvfp4", 128, 4, False, 1, 2880, "the default tile (untuned layers)"),
    ("mxfp4", 128, 4, False, 1, 2880, "the default tile (untuned MXFP4 layers)"),
    ("mxfp4", 64, 3, True, 1, 2880, "gpt-oss-120b at M <= 4"),
    ("mxfp4", 256, 3, True, 1, 2880, "gpt-oss-120b w13 at M 64"),
    ("mxfp4", 128, 3, True, 1, 2880, "gpt-oss-120b w2 at M 64"),
]


def step_count(scheme, block_n, stages, swap, unroll, K, carry, scale_bf16=False):
    gen = torch.Generator().manual_seed(7)
    q = torch.randint(0, 256, (E, N, K // 2), dtype=torch.uint8, generator=gen)
    if scheme == "mxfp4":  # bytes inside the bf16 fold
        kind, cols, lo, hi, element = kinds.S_E8M0, 32, 118, 136, "e8m0"
    else:
        kind, cols, lo, hi, element = kinds.S_E4M3, 16, 1, 0x58, "e4m3"
    s = torch.randint(lo, hi, (E, N, K // cols), dtype=torch.uint8, generator=gen)
    codes = layout.plane_nibbles(q, layout.FP4_SPAN)
    if carry:
        codes = layout.carry_bits(codes)
    fold = fused_moe.lean_scale_fold(kind, torch.bfloat16, configs.fp4_lean()) if scale_bf16 else 0
    w = fused_moe.describe_weights(kinds.W_FP4, layout.tile_weights(codes, *layout.FP4_TILE),
                                   torch.bfloat16, s=layout.scale_bf16(s, cols, element, fold)
                                   if scale_bf16 else layout.scale_words(s, cols),
                                   scale_cols=cols, scale_kind=kind,
                                   nib_span=layout.FP4_SPAN, carry=carry, scale_fold=fold)
    ids = torch.stack([torch.randperm(E, generator=gen)[:TOPK] for _ in range(M)]).reshape(-1)
    sorted_ids, block_expert, num_padded = align_assignments(ids, E, 16, n=ids.numel())
    config = {"BLOCK_M": 16, "BLOCK_N": block_n, "BLOCK_K": 128, "num_warps": 4,
              "num_stages": stages, "K_UNROLL": unroll, "SWAP_AB": swap}
    sc.captured.clear()
    fused_moe.moe_gemm(torch.zeros(M, K, dtype=torch.bfloat16), None, None, w,
                       torch.empty(ids.numel(), N), sorted_ids, block_expert, num_padded,
                       None, a_row_div=TOPK, act=kinds.A16, config=config)
    args, kw = sc.captured[-1]
    kw = {**kw, "FAST_I4": kinds.I4_PAIRS}  # what fused_moe gives a CUDA sm80+ device
    if carry and kw["WSCALE"] == kinds.S_E4M3:
        kw["E4M3_CVT"] = True  # and an sm89+ one
    for f in glob.glob("/tmp/i34c/*"):
        os.remove(f)
    with contextlib.redirect_stdout(io.StringIO()):
        k = sc.compile_one(args, kw, "step")
    n = max(count for count, _ in sass_loop.loops(glob.glob("/tmp/i34c/*.cubin")[0]))
    return n / unroll, k.metadata.shared


if __name__ == "__main__":
    os.environ[configs.FP4_LEAN_ENV] = "1"
    print(f"triton {triton.__version__}, sm90; LEAN -> CARRY + LEAN -> + SCALE_BF16, per "
          "64-column step")
    for scheme, bn, st, swap, unroll, K, who in TILES:
        (a, sa), (b, sb), (c, sc_) = (step_count(scheme, bn, st, swap, unroll, K, carry, bf)
                                      for carry, bf in ((0, 0), (1, 0), (1, 1)))
        print(f"{scheme} N {bn}, {st} stages, swap {swap}, unroll {unroll}, K {K} ({who}): "
              f"{a:.0f} -> {b:.0f} ({a / b:.2f}x) -> {c:.0f} ({b / c:.2f}x); "
              f"shared {sa} -> {sb} -> {sc_}")
