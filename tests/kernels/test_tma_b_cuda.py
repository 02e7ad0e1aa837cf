"""The weight tile by Hopper's TMA (gemm_kernel's TMA_B) compiled on a CUDA sm90+ GPU (it
skips elsewhere; the interpreter side is test_tma_b.py, which this file must not share a
process with: test_fp4_planes.py says why). The prefill tile (128 x 256, 8 warps: wgmma fed
by the copies) and the backend's own tiles give the per-thread loads' bits, with rows past
N and columns past K in the copies' bounds, and a layer the float64 reference's."""

from __future__ import annotations

import os

import pytest
import torch
from _tma import BOUNDS, LAYERS, gemm, outputs_by_tma, weights16


def _sm90() -> bool:
    return (torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1"
            and torch.cuda.get_device_capability() >= (9, 0))


pytestmark = pytest.mark.skipif(not _sm90(), reason="needs a CUDA sm90+ GPU, compiled Triton")

PREFILL = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "num_warps": 8, "num_stages": 3}


# N = 320 intermediate columns (the halves' last tile half outside), K = 1000 (the last K
# step's columns past K); the prefill tile, and split-K's two launches
@pytest.mark.parametrize("split", [1, 2])
@pytest.mark.parametrize("pairs", [None, "halves"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_the_copied_tile_gives_the_pointer_tiles_bits(dtype, pairs, split, monkeypatch,
                                                      spy_launches):
    from moecert.kernels.triton_moe import configs

    E, K, N, M, topk = 8, 1000, 320, 700, 2
    activation = None if pairs is None else "silu"
    weights = weights16(E, 2 * N, K, dtype, seed=5, device="cuda")
    g = torch.Generator().manual_seed(6)
    a = torch.randn(M, K, generator=g).to(torch.bfloat16).cuda()
    ids = torch.randint(0, E, (M * topk,), generator=g, dtype=torch.int32).cuda()
    config = configs.complete({**PREFILL, "SPLIT_K": split})
    out_cols = 2 * N if activation is None else N
    outs, seen = outputs_by_tma(
        lambda: gemm(weights, a, ids, config, activation, out_cols, pairs or "halves"),
        monkeypatch, spy_launches("TMA_B"))
    assert seen == {"1": {2 if pairs else 1}, "0": {0}}
    assert torch.isfinite(outs["1"]).all()
    assert torch.equal(outs["1"], outs["0"])


@pytest.mark.parametrize(("scheme", "attrs"), LAYERS)
def test_a_layer_on_the_copied_tile_computes_the_reference(scheme, attrs, monkeypatch,
                                                           spy_launches):
    """The backend's own tiles at M = 2048 over 8 experts (the prefill tiles), TMA the
    default: the per-thread loads' bits, and the float64 reference's within the scheme's
    bound (BOUNDS; measured on an H200: fp8-w8a8 1.08e-2)."""
    from moecert.kernels.triton_moe import configs
    from moecert.kernels.triton_moe.backend import TritonBackend
    from moecert.reference import MoEProblem, make_inputs, moe, synthesize

    P = MoEProblem(M=2048, K=1024, N=512, E=8, topk=2, bias=True)
    ckpt = synthesize(scheme, P, seed=1, **attrs)
    backend = TritonBackend()
    layer = backend.create_layer(ckpt.to("cuda"), P)
    backend.process_weights_after_loading(layer)
    x, w, ids = make_inputs(P, seed=2)
    x, w, ids = x.cuda(), w.cuda(), ids.cuda()
    launches = spy_launches("TMA_B")
    monkeypatch.delenv(configs.TMA_B_ENV, raising=False)
    default = backend.apply(layer, x, w, ids)
    assert {t for (t,) in launches.seen} - {0}, "the default takes TMA on sm90"
    outs, _ = outputs_by_tma(lambda: backend.apply(layer, x, w, ids), monkeypatch, launches)
    assert torch.equal(default, outs["1"]) and torch.equal(outs["1"], outs["0"])
    ref = moe(ckpt, x.cpu(), w.cpu(), ids.cpu(), P).cuda()
    err = ((default.double() - ref).norm() / ref.norm()).item()
    assert err < BOUNDS[scheme], err
