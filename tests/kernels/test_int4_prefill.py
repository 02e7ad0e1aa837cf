"""The prefill dispatch for int4 in nibble planes (issue 44, round nineteen), under the Triton
interpreter: GPTQ / AWQ-style codes decoded per call into the compute dtype with the one-dot
tile's decode (`gemm_kernel.int4_planes_rounded`: (q - zero) * s, s rounded to the compute
dtype, the product rounded once to nearest) and the W16 tile run on them.

The decode must give the reference's weights (q - zero) * s rounded once (computed here from
the float64 reference's dequantization, not from the kernel's formula), the dispatch must
take the W16 launches at the threshold and the fused int4 ones below it, and the layer's
output must stay the reference's with no bias from the rounding: the dense output's norm
within u / 2 of the fused one's (rounding toward zero shrinks every weight by u / 2 on
average: measured, the output's norm by 0.87 u to 1.5 u). The PTX decode against these
values on a GPU: tests/kernels/test_int4_prefill_cuda.py.
"""

from __future__ import annotations

import sys

import pytest
import torch
from _dispatch import outputs_by_threshold
from moecert.kernels.triton_moe.interpret import load_interpreted_kernels

load_interpreted_kernels()  # before the kernel modules are bound below

from moecert.kernels.triton_moe import configs, dequant, heuristics, kinds  # noqa: E402
from moecert.kernels.triton_moe.backend import TritonBackend, _plan  # noqa: E402
from moecert.reference import MoEProblem, dequantize, make_inputs, moe, synthesize  # noqa: E402

BACKEND = TritonBackend()
U = {torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11}  # unit roundoff


@pytest.fixture(autouse=True)
def _interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setenv(configs.NIB_SPAN_ENV, "64")  # int4 in planes (a GPU's tuned layout)
    monkeypatch.delenv(configs.DEQUANT_ROWS_ENV, raising=False)
    monkeypatch.setattr(heuristics, "DEQUANT_INT4_WEIGHTS", 0)  # these layers are small
    assert "moecert.kernels.triton_moe.dequant" in sys.modules


def _layer(scheme, P, seed=1, **attrs):
    ckpt = synthesize(scheme, P, seed=seed, **attrs)
    layer = BACKEND.create_layer(ckpt, P)
    BACKEND.process_weights_after_loading(layer)
    return ckpt, layer


def _rounded(w: torch.Tensor, scale: torch.Tensor, cols: int, dtype) -> torch.Tensor:
    """The reference's weights w = (q - zero) * s (float64) as the decode must give them:
    (q - zero) = w / s exactly (a small integer), s rounded to `dtype`, then the product
    rounded once (torch's casts round to nearest, ties to even)."""
    s = scale.double().repeat_interleave(cols, dim=2)
    codes = (w / s).round()
    assert (codes - w / s).abs().max() < 1e-9  # the reference's weights are codes x scale
    return (codes * s.to(dtype).double()).to(dtype).double()


# K = 384: six 64-column spans, so the second program of dequant.SPANS = 4 spans masks two;
# w2's K = N (planes are stored tiled: K a multiple of 128); groups of 64 and 128 columns;
# AWQ's zero points, GPTQ's symmetric codes
@pytest.mark.parametrize(("scheme", "attrs", "dtype", "N"), [
    ("gptq-int4", {"group_size": 64}, "bf16", 128),
    ("awq-int4", {"group_size": 64}, "bf16", 128),
    ("awq-int4", {"group_size": 128}, "fp16", 256),
    ("gptq-int4", {"group_size": 128}, "fp16", 128)])
def test_the_decode_gives_the_reference_weights_rounded_once(scheme, attrs, dtype, N):
    P = MoEProblem(M=3, K=384, N=N, E=3, topk=2, dtype=dtype)
    ckpt, layer = _layer(scheme, P, **attrs)
    plan = _plan(layer)
    assert plan["dense_bytes"] is not None
    ref = dequantize(ckpt)
    for p in ("w13", "w2"):
        weights = plan[p]
        assert weights["constexprs"]["NIB_SPAN"] == 64 and dequant.rounds(weights)
        ws = torch.full((plan["dense_bytes"] // 2,), float("nan"), dtype=P.torch_dtype)
        dense = dequant.dequantize(weights, ws, fast=False)
        got = dense["q"].double()
        assert dense["kind"] == kinds.W16 and not got.isnan().any()
        want = _rounded(ref[p], layer.get(f"{p}_s"), layer.meta[f"{p}_group_cols"],
                        P.torch_dtype)
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        assert (got != ref[p]).any()  # the rounding is real: not the float64 weights
        assert (got != 0).float().mean() > 0.5


@pytest.mark.parametrize(("scheme", "dtype"), [("awq-int4", "bf16"), ("gptq-int4", "fp16")])
def test_the_dispatch_takes_the_dense_path_from_its_threshold(scheme, dtype, monkeypatch,
                                                              spy_launches):
    """M = 48, topk 2 over E = 3 experts: 32 rows per expert. A threshold of 32 sends it to
    the W16 launches, 33 keeps the fused int4 ones (four dots at this size: no rounding);
    both outputs are the reference's, and the rounding has no bias. (The scales' rounding is
    one error per group, shared by its weights: at M = 12 the norm ratio of five seeds
    varied by up to 0.24 u, at M = 48 by up to 0.08 u.)"""
    P = MoEProblem(M=48, K=256, N=128, E=3, topk=2, bias=True, dtype=dtype)
    ckpt, layer = _layer(scheme, P, group_size=64)
    x, w, ids = make_inputs(P, seed=2)
    ref = moe(ckpt, x, w, ids, P)
    outs = outputs_by_threshold(BACKEND, layer, (x, w, ids), ref, monkeypatch,
                                {33: kinds.W_INT4, 32: kinds.W16}, 2.0**-7,
                                spy_launches("WEIGHT"))
    u = U[P.torch_dtype]
    # the rounding to nearest has no bias: rounding toward zero (the interpreter's plain
    # fp32 -> bf16 cast) shrinks every weight by u / 2 on average. Measured on this layer
    # (AWQ and GPTQ in bf16, five seeds): the products truncated moved the norm by -0.87 u
    # to -1.5 u, rounded to nearest by at most 0.24 u either way
    ratio = (outs[32].norm() / outs[33].norm()).item()
    assert abs(ratio - 1) < u / 2, f"norm ratio {ratio:.6f} (u = {u:.3g})"


def test_act_order_and_bytes_keep_int4_fused(monkeypatch):
    P = MoEProblem(M=3, K=256, N=128, E=3, topk=2)
    _, ordered = _layer("gptq-int4", P, group_size=64, act_order=True)
    assert _plan(ordered)["dense_bytes"] is None, "act order: no planes"
    monkeypatch.setenv(configs.NIB_SPAN_ENV, "0")
    _, pairs = _layer("gptq-int4", P, group_size=64)
    assert _plan(pairs)["dense_bytes"] is None, "adjacent nibbles: no planes"


def test_the_thresholds_follow_the_zero_points_and_the_expert_size(monkeypatch):
    P = MoEProblem(M=3, K=256, N=128, E=3, topk=2)
    for scheme, zero in (("gptq-int4", False), ("awq-int4", True)):
        _, layer = _layer(scheme, P, group_size=64)
        w13 = _plan(layer)["w13"]
        rows = heuristics.DEQUANT_ROWS_INT4[zero]
        assert heuristics.dequant_rows(w13) == rows
        assert heuristics.dequantizes(rows * 8, 8, w13)
        assert not heuristics.dequantizes(rows * 8 - 1, 8, w13)
        # the smaller linear (w2: 256 x 128 here) below the floor: the layer stays fused
        monkeypatch.setattr(heuristics, "DEQUANT_INT4_WEIGHTS", 256 * 128 + 1)
        layer.meta.pop("triton_plan")
        assert _plan(layer)["dense_bytes"] is None
        monkeypatch.setattr(heuristics, "DEQUANT_INT4_WEIGHTS", 256 * 128)
        layer.meta.pop("triton_plan")
        assert _plan(layer)["dense_bytes"] is not None


def test_the_result_column_declares_the_rounding():
    P = MoEProblem(M=3, K=256, N=128, E=3, topk=2)
    _, layer = _layer("awq-int4", P, group_size=64)
    detail = BACKEND.describe(layer)
    assert detail.endswith(f"from {heuristics.DEQUANT_ROWS_INT4[True]} rows per expert: "
                           "weights dequantized per call to bfloat16 ((q - zero) * scale, "
                           "rounded once), W16 tile"), detail
