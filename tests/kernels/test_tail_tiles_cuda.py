"""TAIL_M (an expert's last row block on a smaller tile) compiled on a CUDA sm80+ GPU (skipped
elsewhere; the interpreter side is test_prefill_tiles.py): each GEMM on the prefill tile the
heuristics give (128 rows, wgmma on sm90; the swapped 64-row nibble tile) with TAIL_M at half
and a quarter of its rows, against the whole tile's launch on the same inputs: every row
written (the output starts NaN), within the reorder bound; GEMM1 with the activation in its
epilogue the activation kernel's bits on the same tiles' GEMM1 output. (A first form compared
the epilogue with the whole tile's within two units: fp8-w8a8 with 16-row tails failed it
where act(h) is near zero, h within the reorder bound: a relative bound has no place there.)
The routing gives the experts' last blocks 1, 16, 20, 33, 64, 65 and 128 rows: every level of
both tiles and its edges."""

from __future__ import annotations

import os

import pytest
import torch


def _sm80() -> bool:
    return (torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1"
            and torch.cuda.get_device_capability() >= (8, 0))


pytestmark = pytest.mark.skipif(not _sm80(), reason="needs a CUDA sm80+ GPU, compiled Triton")

# assignments per expert (1160 = 580 tokens x 2)
COUNTS = (3 * 128 + 16, 2 * 128 + 33, 128 + 64, 65, 128, 1, 1, 64 + 20)
SCHEMES = [
    ("bf16", {}),
    ("fp8-w8a8", {}),
    ("gptq-int4", {"group_size": 128}),
    ("awq-int4", {"group_size": 128}),
    ("w4a8-int8", {"checkpoint_format": "gptq", "group_size": 128}),
    ("mxfp4", {}),
    ("nvfp4", {}),
]


def _stage(scheme, attrs):
    from moecert.kernels.triton_moe import tune_stages
    from moecert.kernels.triton_moe.backend import TritonBackend
    from moecert.reference import MoEProblem, make_inputs, synthesize

    order = [e for e, count in enumerate(COUNTS) for _ in range(count)]
    tokens = len(order) // 2
    ids = torch.tensor([[order[t], order[t + tokens]] for t in range(tokens)], dtype=torch.int32)
    assert (ids[:, 0] != ids[:, 1]).all()  # a token's two experts differ
    P = MoEProblem(M=tokens, K=1024, N=768, E=len(COUNTS), topk=2, bias=scheme == "mxfp4")
    backend = TritonBackend()
    layer = backend.create_layer(synthesize(scheme, P, seed=3, **attrs).to("cuda"), P)
    backend.process_weights_after_loading(layer)
    x, w, _ = (t.cuda() for t in make_inputs(P, seed=4))
    return tune_stages.LayerStage(layer, x, w, ids.cuda())


def _run(stage, gemm, config):
    stage._out[gemm].fill_(float("nan"))
    return stage.run(gemm, config).clone()


@pytest.mark.parametrize(("scheme", "attrs"), SCHEMES, ids=[s[0] for s in SCHEMES])
@pytest.mark.parametrize("part", [2, 4])
def test_an_experts_last_block_on_its_tail_tile_gives_the_whole_tiles_sum(scheme, attrs, part):
    from moecert.kernels.triton_moe import tune

    stage = _stage(scheme, attrs)
    tile = dict(stage.defaults[0])  # the heuristics' prefill tile (145 rows per expert)
    assert tile["BLOCK_M"] >= 64, tile
    tail = tile["BLOCK_M"] // part
    for gemm in (1, 2):
        whole = _run(stage, gemm, {**tile, "TAIL_M": 0})
        tails = _run(stage, gemm, {**tile, "TAIL_M": tail})
        bound = tune.reorder_bound(whole, stage.magnitudes(gemm), stage.shape(gemm)[1])
        assert not tails.isnan().any(), f"GEMM{gemm}: rows left unwritten"
        assert tune.disagreement(tails, whole, bound) is None, f"GEMM{gemm}"
    # GEMM1 with the activation in its epilogue: the bits of the activation kernel on the same
    # tiles' GEMM1 output (gemm_kernel's EPI_ACT), every row written
    tails = {**tile, "TAIL_M": tail}
    stage.run_activated(tails, True)
    stage._activated.fill_(float("nan"))
    fused = stage.run_activated(tails, True).clone()
    assert not fused.isnan().any()
    assert torch.equal(fused, stage.run_activated(tails, False))
