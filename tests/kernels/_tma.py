"""Shared by the TMA weight tile's tests (test_tma_b.py under the interpreter,
test_tma_b_cuda.py compiled): 16-bit weights, one grouped GEMM launched directly, and its
output with MOECERT_TRITON_TMA_B on and off. Kernel modules are imported inside the functions:
each test module binds its own (interpreted or compiled)."""

from __future__ import annotations

import torch

TMA_B_ENV = "MOECERT_TRITON_TMA_B"  # (configs.TMA_B_ENV, checked in outputs_by_tma)
# the layers run through the backend: fp8-w8a8 per channel (one scale column: its tiles
# accumulate in the dot, ACC_DOT) and in DeepSeek's blocks (a scale per tile), int8-w8a8
LAYERS = [("bf16", {}),
          ("fp8-w8a8", {"weight_strategy": "channel", "activation": "dynamic-token"}),
          ("fp8-w8a8", {}),
          ("int8-w8a8", {"activation": "dynamic-tensor"})]
# each layer's bound against the float64 reference (relative Frobenius): bf16's h and y
# roundings, 2^-7; the 8-bit activations' dynamic codes of h, which a one-ulp move of bf16 h
# moves a code step (test_grouped_fp8.py's analysis), 2^-5
BOUNDS = {"bf16": 2.0 ** -7, "fp8-w8a8": 2.0 ** -5, "int8-w8a8": 2.0 ** -5}


def weights16(E, rows, K, dtype, seed, device="cpu"):
    """16-bit weights with a bias and a global multiplier per row half (a row read from the
    wrong place shows in the bias), bf16 compute; fp16 weights take the tf32 dot."""
    from moecert.kernels.triton_moe import fused_moe, kinds

    g = torch.Generator().manual_seed(seed)
    q = torch.randn(E, rows, K, generator=g).to(dtype)
    bias = torch.randn(E, rows, generator=g)
    gscale = torch.rand(E, 2, generator=g) + 0.5
    return fused_moe.describe_weights(kinds.W16, q.to(device), torch.bfloat16,
                                      bias=bias.to(device), gscale=gscale.to(device))


def gemm(weights, a, ids, config, activation, out_cols, pairs="halves"):
    """One grouped GEMM (GEMM1 with `activation`: c [rows, out_cols]) on `config`'s tile."""
    from moecert.kernels.triton_moe import align, fused_moe, kinds

    sorted_ids, block_expert, num_padded = align.align_assignments(
        ids, weights["q"].shape[0], config["BLOCK_M"], n=ids.numel())
    c = torch.full((ids.numel(), out_cols), float("nan"), dtype=a.dtype, device=a.device)
    fused_moe.moe_gemm(a, None, None, weights, c, sorted_ids, block_expert, num_padded, None,
                       a_row_div=2, act=kinds.A16, config=config, activation=activation,
                       pairs=pairs)
    return c


def outputs_by_tma(run, monkeypatch, launches) -> tuple[dict, dict]:
    """run() with the weight tile by TMA ("1") and by per-thread loads ("0"): the outputs,
    and the TMA_B values the launches took (`launches`: a spy_launches("TMA_B"))."""
    from moecert.kernels.triton_moe import configs

    assert configs.TMA_B_ENV == TMA_B_ENV
    outs, seen = {}, {}
    for tma in ("1", "0"):
        monkeypatch.setenv(TMA_B_ENV, tma)
        launches.seen.clear()
        outs[tma] = run()
        seen[tma] = {t for (t,) in launches.seen}
    return outs, seen
