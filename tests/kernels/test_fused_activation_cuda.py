"""GEMM1's fused activation (gemm_kernel's EPI_ACT) compiled on a CUDA sm80+ GPU (skipped
elsewhere; the interpreter side is test_fused_activation.py): the whole layer with the
activation in GEMM1's epilogue against GEMM1 then the activation kernel, bit for bit, at a
decode size (the swapped and split tiles) and a prefill size (the 128-row tiles, wgmma on
sm90, and the FP4 dispatch's W16 tile), for every weight kind the backend stores, in both
orders of a tile's gate and up columns."""

from __future__ import annotations

import os

import pytest
import torch


def _sm80() -> bool:
    return (torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1"
            and torch.cuda.get_device_capability() >= (8, 0))


pytestmark = pytest.mark.skipif(not _sm80(), reason="needs a CUDA sm80+ GPU, compiled Triton")

SCHEMES = [
    ("bf16", {}, "silu"),
    ("fp8-w8a8", {}, "silu"),
    ("gptq-int4", {"group_size": 128}, "silu"),
    ("awq-int4", {"group_size": 128}, "gelu"),
    ("w4a8-int8", {"checkpoint_format": "gptq", "group_size": 128}, "silu"),
    ("mxfp8", {"activation": "none"}, "silu"),
    ("mxfp4", {}, "swigluoai"),
    ("nvfp4", {}, "silu"),
]


@pytest.mark.parametrize(("scheme", "attrs", "activation"), SCHEMES,
                         ids=[s[0] for s in SCHEMES])
@pytest.mark.parametrize("M", [16, 2048])
def test_the_fused_activation_gives_the_unfused_bits_on_the_gpu(scheme, attrs, activation, M,
                                                                monkeypatch):
    from moecert.kernels.triton_moe import configs
    from moecert.kernels.triton_moe.backend import TritonBackend
    from moecert.reference import MoEProblem, make_inputs, synthesize

    P = MoEProblem(M=M, K=1024, N=768, E=8, topk=2, bias=scheme == "mxfp4",
                   activation=activation)
    backend = TritonBackend()
    layer = backend.create_layer(synthesize(scheme, P, seed=3, **attrs).to("cuda"), P)
    backend.process_weights_after_loading(layer)
    x, w, ids = (t.cuda() for t in make_inputs(P, seed=4))
    outs = {}
    for fused in ("0", *configs.FUSED_ACT_ORDERS):
        monkeypatch.setenv(configs.FUSED_ACT_ENV, fused)
        outs[fused] = backend.apply(layer, x, w, ids)
    for order in configs.FUSED_ACT_ORDERS:
        assert torch.isfinite(outs[order]).all()
        diff = (outs[order].double() - outs["0"].double()).abs().max().item()
        assert torch.equal(outs[order], outs["0"]), f"{order}: largest difference {diff:.3e}"
