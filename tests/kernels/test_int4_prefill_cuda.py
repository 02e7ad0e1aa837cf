"""The int4 prefill dispatch compiled on a CUDA sm80+ GPU (it skips elsewhere; the interpreter
side is test_int4_prefill.py, which this file must not share a process with:
test_fp4_planes.py says why). The decode's PTX (`_int4_planes_scaled` through
`gemm_kernel.int4_planes_rounded`) against its fp32 form, bit for bit, and the dispatch
against the fused path and the float64 reference at a layer large enough for the W16 tile's
wgmma."""

from __future__ import annotations

import os

import pytest
import torch
from _dispatch import outputs_by_threshold


def _sm80() -> bool:
    return (torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1"
            and torch.cuda.get_device_capability() >= (8, 0))


pytestmark = pytest.mark.skipif(not _sm80(), reason="needs a CUDA sm80+ GPU, compiled Triton")


def _layer(scheme, P, monkeypatch, **attrs):
    from moecert.kernels.triton_moe import configs, heuristics
    from moecert.kernels.triton_moe.backend import TritonBackend
    from moecert.reference import synthesize

    monkeypatch.setenv(configs.NIB_SPAN_ENV, "128")  # planes whatever the tuned file says
    monkeypatch.setattr(heuristics, "DEQUANT_INT4_WEIGHTS", 0)  # these layers are small
    ckpt = synthesize(scheme, P, seed=3, **attrs)
    backend = TritonBackend()
    layer = backend.create_layer(ckpt.to("cuda"), P)
    backend.process_weights_after_loading(layer)
    return backend, ckpt, layer


CASES = [("gptq-int4", "bf16"), ("awq-int4", "bf16"), ("awq-int4", "fp16"),
         ("gptq-int4", "fp16")]


@pytest.mark.parametrize(("scheme", "dtype"), CASES, ids=[f"{s}-{d}" for s, d in CASES])
def test_ptx_prefill_decode_matches_the_fp32_form(scheme, dtype, monkeypatch):
    from moecert.kernels.triton_moe import dequant
    from moecert.kernels.triton_moe.backend import _plan
    from moecert.reference import MoEProblem

    P = MoEProblem(M=4, K=1024, N=768, E=4, topk=2, dtype=dtype)
    _, _, layer = _layer(scheme, P, monkeypatch, group_size=128)
    plan = _plan(layer)
    for p in ("w13", "w2"):
        w = plan[p]
        assert dequant.rounds(w)
        outs = {}
        for fast in (False, True):
            ws = torch.full((plan["dense_bytes"] // 2,), float("nan"), dtype=P.torch_dtype,
                            device="cuda")
            outs[fast] = dequant.dequantize(w, ws, fast)["q"]
        assert not outs[False].isnan().any() and (outs[False] != 0).float().mean() > 0.5
        assert torch.equal(outs[True].view(torch.int16), outs[False].view(torch.int16))


@pytest.mark.parametrize("scheme", ["gptq-int4", "awq-int4"])
def test_the_int4_prefill_dispatch_computes_the_reference_on_the_gpu(scheme, monkeypatch):
    """topk 2 over 8 experts, DEQUANT_ROWS_INT4 rows per expert: the W16 prefill tile (wgmma on
    sm90) at the default threshold, against the fused path (threshold off: the swapped
    nibble prefill tile) and float64; the rounding's norm within u / 2 of the fused one's
    (test_int4_prefill.py measured the truncating decode at 0.87 u to 1.5 u)."""
    from moecert.kernels.triton_moe import heuristics
    from moecert.kernels.triton_moe.backend import _plan
    from moecert.reference import MoEProblem, make_inputs, moe

    rows = heuristics.DEQUANT_ROWS_INT4[scheme == "awq-int4"]
    P = MoEProblem(M=rows * 8 // 2, K=1024, N=512, E=8, topk=2, bias=True)
    backend, ckpt, layer = _layer(scheme, P, monkeypatch, group_size=128)
    assert _plan(layer)["dense_bytes"] is not None
    assert heuristics.dequantizes(P.M * P.topk, P.E, _plan(layer)["w13"])
    x, w, ids = make_inputs(P, seed=4)
    ref = moe(ckpt, x, w, ids, P).cuda()
    outs = outputs_by_threshold(backend, layer, (x.cuda(), w.cuda(), ids.cuda()), ref,
                                monkeypatch, {"off": None, "": None}, 2.0**-7)
    ratio = (outs[""].norm() / outs["off"].norm()).item()
    assert abs(ratio - 1) < 2.0**-9, f"norm ratio {ratio:.6f}"
