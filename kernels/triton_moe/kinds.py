"""The grouped MoE GEMM's kind enums (weights, scales, activations, tile products, int4
decodes, launch phases) as plain ints, the one declaration the kernel (gemm_kernel: as
constexprs), the launcher, the heuristics and the tuned-config files (by name) read.
INTERPRET is read once, when the module is defined (interpret.load_interpreted_kernels
reloads the kernel modules with it set)."""

from __future__ import annotations

import os

from moecert.reference.schemes import MX_BLOCK

from . import configs

W16, W_INT4, W_UINT8, W_INT8, W_FP8, W_MXFP8, W_FP4 = range(7)
# how a weight tile's scale is stored: a choice separate from the element codec, so that one
# element (FP4) can take E8M0 scales per 32 (MXFP4) or others
S_NONE, S_FLOAT, S_E8M0, S_E4M3 = range(4)
# E8M0 scales of e2m1 planes multiplied into the decoded bf16 weights before the dot, where
# that is exact (fused_moe.e8m0_folds): a launch-time choice, never a stored one
S_E8M0_W = 4
A16, A_INT8, A_MX, A_FP8, A_FP8_G = range(5)
# how the tile product runs: operands in the compute dtype (bf16/fp16, or int8 x int8), both
# upcast to fp32 on tf32 tensor cores, or fp32 FMA ("ieee")
DOT_NATIVE, DOT_TF32, DOT_IEEE = range(3)
# how FAST_I4 decodes symmetric int4: not at all (the general path), by the mantissa trick
# per element, or two elements per register in PTX (CUDA sm80+)
I4_OFF, I4_MAGIC, I4_PAIRS = range(3)
# what a launch does (gemm_kernel's docstring, "Split-K")
FULL, PARTIAL, REDUCE = range(3)


# tl.dot on bf16 is broken in the interpreter and bf16 scalar arithmetic raises there: when
# interpreting, every dot runs on fp32 operands (exact for the small integers and e4m3 values
# the kernel multiplies).
INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
MX_COLS = MX_BLOCK  # one E8M0 scale per 32 elements along K (the records' MX block)

WEIGHT_NAMES = configs.kind_names(globals(), "W")
ACT_NAMES = configs.kind_names(globals(), "A")
