"""The FP4 prefill dispatch of the Triton backend (issue 44), under the Triton interpreter:
e2m1 weights decoded per call into the compute dtype (dequant.py) and the W16 tile run on
them from heuristics.DEQUANT_ROWS rows per expert, where the decode is exact.

The decode must give the scheme's weights exactly (against the float64 reference's
dequantization), the dispatch must take the W16 launches at the threshold and the fused FP4
ones below it, and the layer's output must stay the reference's (the triton tests' bound)
and within fp32 reassociation of the fused path's. The CUDA side (the PTX decode bit for bit
against the bit fields) is tests/kernels/test_fp4_prefill_cuda.py.
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


@pytest.fixture(autouse=True)
def _interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.delenv(configs.DEQUANT_ROWS_ENV, raising=False)
    assert "moecert.kernels.triton_moe.dequant" in sys.modules


def _layer(scheme, P, seed=1, **attrs):
    ckpt = synthesize(scheme, P, seed=seed, **attrs)
    layer = BACKEND.create_layer(ckpt, P)
    BACKEND.process_weights_after_loading(layer)
    return ckpt, layer


# K = 320: five 64-column spans, so a program of dequant.SPANS = 4 spans masks its last
# three; N = 48 (w13 96 rows) tiles by 16 rows, N = 40 (w13 80) too, w2's K = 40 has no span
@pytest.mark.parametrize(("scheme", "dtype", "N"), [
    ("mxfp4", "bf16", 64), ("nvfp4", "bf16", 64), ("nvfp4", "fp16", 64),
    ("mxfp4", "bf16", 192)])
def test_the_decode_gives_the_reference_weights_exactly(scheme, dtype, N):
    P = MoEProblem(M=3, K=320, N=N, E=3, topk=2, dtype=dtype)
    ckpt, layer = _layer(scheme, P)
    plan = _plan(layer)
    assert plan["dense_bytes"] is not None
    ref = dequantize(ckpt)
    for p in ("w13", "w2"):
        weights = plan[p]
        assert weights["q"].dim() == 5  # the tiled planes the backend stores
        ws = torch.full((plan["dense_bytes"] // 2,), float("nan"), dtype=P.torch_dtype)
        dense = dequant.dequantize(weights, ws, fast=False)
        got = dense["q"].double()
        assert dense["kind"] == kinds.W16 and not got.isnan().any()
        if layer.has(f"{p}_gs"):  # NVFP4's global multiplier stays in the epilogue
            gs = layer.get(f"{p}_gs").double()
            got = got * gs.repeat_interleave(got.shape[1] // gs.shape[1], dim=1)[..., None]
        torch.testing.assert_close(got, ref[p], rtol=2.0**-50, atol=0)
        assert (got != 0).float().mean() > 0.5  # real values, not an empty match


@pytest.mark.parametrize("scheme", ["mxfp4", "nvfp4"])
def test_the_dispatch_takes_the_dense_path_from_its_threshold(scheme, monkeypatch,
                                                              spy_launches):
    """M = 12, topk 2 over E = 3 experts: 8 rows per expert. A threshold of 8 sends it to the
    W16 launches, 9 keeps the fused FP4 ones; both outputs are the reference's."""
    P = MoEProblem(M=12, K=256, N=64, E=3, topk=2, bias=scheme == "mxfp4")
    ckpt, layer = _layer(scheme, P)
    x, w, ids = make_inputs(P, seed=2)
    ref = moe(ckpt, x, w, ids, P)
    outs = outputs_by_threshold(BACKEND, layer, (x, w, ids), ref, monkeypatch,
                                {9: kinds.W_FP4, 8: kinds.W16}, 2.0**-8,
                                spy_launches("WEIGHT"))
    # the same products in another fp32 order, then one rounding to bf16 per output
    torch.testing.assert_close(outs[8], outs[9], rtol=2.0**-7, atol=1e-3)


def test_the_default_threshold_is_rows_per_expert():
    P = MoEProblem(M=3, K=256, N=64, E=3, topk=2)
    w13 = _plan(_layer("nvfp4", P)[1])["w13"]
    assert heuristics.dequantizes(heuristics.DEQUANT_ROWS * 8, 8, w13)
    assert not heuristics.dequantizes(heuristics.DEQUANT_ROWS * 8 - 1, 8, w13)
    assert not heuristics.dequantizes(0, 8, w13)


@pytest.mark.parametrize(("scheme", "attrs", "dtype", "why"), [
    ("mxfp4", {"activation": "mxfp8"}, "bf16", "mx activations"),
    ("mxfp4", {}, "fp16", "E8M0 does not fold into fp16"),
    ("gptq-int4", {"group_size": 32}, "bf16", "int4 planes only (on a GPU's tuned file)"),
])
def test_only_layers_whose_decode_is_exact_take_it(scheme, attrs, dtype, why):
    P = MoEProblem(M=3, K=256, N=64, E=3, topk=2, dtype=dtype)
    _, layer = _layer(scheme, P, **attrs)
    assert _plan(layer)["dense_bytes"] is None, why


def test_a_scale_byte_that_does_not_fold_keeps_mxfp4_fused():
    P = MoEProblem(M=3, K=256, N=64, E=3, topk=2)
    ckpt = synthesize("mxfp4", P, seed=1)
    name = next(k for k in ckpt.tensors if k.startswith("w2") and "scale" in k)
    ckpt.tensors[name].view(torch.uint8).view(-1)[0] = 253  # 2^126 x 6 overflows bf16
    layer = BACKEND.create_layer(ckpt, P)
    BACKEND.process_weights_after_loading(layer)
    assert _plan(layer)["dense_bytes"] is None


def test_the_workspace_bound_keeps_large_layers_fused(monkeypatch):
    P = MoEProblem(M=3, K=256, N=64, E=3, topk=2)
    _, layer = _layer("nvfp4", P)
    need = _plan(layer)["dense_bytes"]
    assert need == 3 * 128 * 256 * 2  # w13 [E, 2N, K] in bf16, the larger linear
    monkeypatch.setattr(heuristics, "DEQUANT_WORKSPACE_BYTES", need - 1)
    layer.meta.pop("triton_plan")
    assert _plan(layer)["dense_bytes"] is None


def test_the_result_column_declares_the_dispatch(monkeypatch):
    P = MoEProblem(M=3, K=256, N=64, E=3, topk=2)
    _, layer = _layer("nvfp4", P)
    assert BACKEND.describe(layer) == (
        f"fused Triton MoE GEMM (W_FP4_E4M3; lean e2m1 step; sign-carrying e2m1 words; "
        f"block scales pre-decoded to bf16 at load); from "
        f"{heuristics.DEQUANT_ROWS} rows per "
        "expert: weights dequantized per call to bfloat16 (exact), W16 tile")
    _, int4 = _layer("gptq-int4", P, group_size=32)
    assert BACKEND.describe(int4) == "fused Triton MoE GEMM (W_INT4)"


def test_forced_dequant_rows_reads_the_variable():
    assert configs.forced_dequant_rows({}) is None
    assert configs.forced_dequant_rows({configs.DEQUANT_ROWS_ENV: ""}) is None
    assert configs.forced_dequant_rows({configs.DEQUANT_ROWS_ENV: "0"}) == 0
    assert configs.forced_dequant_rows({configs.DEQUANT_ROWS_ENV: "off"}) == float("inf")
    for bad in ("-1", "1.5", "on"):
        with pytest.raises(ValueError, match="expected rows per expert"):
            configs.forced_dequant_rows({configs.DEQUANT_ROWS_ENV: bad})
