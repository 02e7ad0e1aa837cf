"""NVFP4 activations on e2m1 ties (issue 30): a ModelOpt static input_scale is the float32
rounding of amax / (6 * 448), and for act-dtype inputs x * g / bs is often exactly an e2m1
tie. The engines quantize in float32 (vLLM's `scaled_fp4_quant`), which rounds the scale's
storage error away and sends the tie to even; the reference and the kernels must both do so
(before, the reference's float64 quotient fell on the side the storage error pointed to,
and ModelOpt folders were red on torch and Triton alike)."""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

import torch
from moecert.kernels.activations import qdq_nvfp4 as kernel_qdq_nvfp4
from moecert.reference import MoEProblem, synthesize
from moecert.reference.moe import quantize_activation

# a calibration amax and a block of bf16 values: x = 157/1024 against amax 157/64 and block
# maximum 0.515625 gives bs = e4m3(0.515625 * 2688 / (6 * amax)) = e4m3(94.2) = 96 and
# x * 2688 / (amax * bs) = 7/4 exactly: the tie between e2m1 1.5 and 2 (even: 2)
CALIBRATED_AMAX = 2.453125
X, BLOCK_MAX, BS = -0.1533203125, 0.515625, 96


def _block() -> torch.Tensor:
    x = torch.full((1, 16), 0.0078125, dtype=torch.float64)
    x[0, 0], x[0, 1] = BLOCK_MAX, X
    return x


def test_the_case_is_an_exact_tie():
    ratio = Fraction(X) * 2688 / (Fraction(CALIBRATED_AMAX) * BS)
    assert ratio == Fraction(-7, 4)
    s = torch.tensor(CALIBRATED_AMAX / 2688, dtype=torch.float32)
    assert Fraction(float(s)) != Fraction(CALIBRATED_AMAX) / 2688  # stored with an error


def test_modelopt_input_scale_tie_goes_to_even_in_the_reference_and_the_kernels():
    P = MoEProblem(M=1, K=32, N=16, E=2, topk=1)
    ckpt = synthesize("nvfp4", P, seed=0, checkpoint_format="modelopt", activation="nvfp4")
    s = torch.tensor(CALIBRATED_AMAX / 2688, dtype=torch.float32)
    name = next(n for n in ckpt.tensors if n.startswith("w2_input"))
    ckpt = replace(ckpt, tensors={**ckpt.tensors, name: torch.full_like(ckpt.tensors[name], s)})
    want = -2 * BS * float(s)  # code 2 (the tie to even), times bs, times the input scale
    got = quantize_activation(ckpt, _block(), "w2")
    assert got[0, 1].item() == want
    kernel = kernel_qdq_nvfp4(_block().float(), (1 / s).reshape(1), s.reshape(1))
    assert kernel[0, 1].item() == want
