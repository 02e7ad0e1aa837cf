"""ONE_DOT (a nibble-plane tile's four plane products as one dot) compiled on a CUDA sm80+ GPU
(skipped elsewhere; the interpreter side is test_one_dot.py): every plane scheme with its PTX
decode, on the prefill tile the heuristics give (the swapped 64-row nibble tile, wgmma on
sm90) and on a decode tile (16 rows, swapped and not), one dot against four on the same
inputs: every row written (the output starts NaN), within the reorder bound (int4 with 16-bit
activations, whose one dot rounds the weights, within `tune.candidate_bound`, and its PTX
decode within the reorder bound of the fp32 decode's same rounding). On sm90 the one
dot of an FP4 tile is the MMA that Triton keeps asynchronous across K steps; this is the test
that its operand, built from the four planes' registers (`_cat4`), multiplies the right
columns there."""

from __future__ import annotations

import os

import pytest
import torch


def _sm80() -> bool:
    return (torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1"
            and torch.cuda.get_device_capability() >= (8, 0))


pytestmark = pytest.mark.skipif(not _sm80(), reason="needs a CUDA sm80+ GPU, compiled Triton")

SCHEMES = [
    ("gptq-int4", {"group_size": 128}, "bf16"),
    ("awq-int4", {"group_size": 128}, "fp16"),
    ("w4a8-int8", {"checkpoint_format": "gptq", "group_size": 128}, "bf16"),
    ("mxfp4", {}, "bf16"),
    ("nvfp4", {}, "bf16"),
    ("nvfp4", {}, "fp16"),
]


def _stage(scheme, attrs, dtype, M):
    from moecert.kernels.triton_moe import tune_stages
    from moecert.kernels.triton_moe.backend import TritonBackend
    from moecert.reference import MoEProblem, make_inputs, synthesize

    P = MoEProblem(M=M, K=1024, N=768, E=8, topk=2, bias=True, dtype=dtype)
    backend = TritonBackend()
    layer = backend.create_layer(synthesize(scheme, P, seed=7, **attrs).to("cuda"), P)
    backend.process_weights_after_loading(layer)
    x, w, ids = (t.cuda() for t in make_inputs(P, seed=8))
    return tune_stages.LayerStage(layer, x, w, ids)


def _run(stage, gemm, config):
    stage._out[gemm].fill_(float("nan"))
    return stage.run(gemm, config).clone()


@pytest.mark.parametrize(("scheme", "attrs", "dtype"), SCHEMES,
                         ids=[f"{s[0]}-{s[2]}" for s in SCHEMES])
@pytest.mark.parametrize("tile", ["prefill", "decode", "decode-swapped"])
def test_one_dot_gives_the_four_plane_dots_sum(scheme, attrs, dtype, tile, monkeypatch):
    from moecert.kernels.triton_moe import fused_moe, tune

    monkeypatch.delenv("MOECERT_TRITON_ONE_DOT", raising=False)
    monkeypatch.setenv("MOECERT_TRITON_NIB_SPAN", "128")  # int4 in planes wherever they fit
    stage = _stage(scheme, attrs, dtype, M=512 if tile == "prefill" else 48)
    config = dict(stage.defaults[0])
    if tile == "prefill":
        assert config["BLOCK_M"] >= 64 and config.get("SWAP_AB"), config
    else:
        config.update(BLOCK_M=16, BLOCK_N=64, SWAP_AB=tile == "decode-swapped")
    for gemm in (1, 2):
        assert fused_moe.one_dot_applies(stage.weights(gemm, config), stage.act)
        four = _run(stage, gemm, {**config, "ONE_DOT": False})
        one = _run(stage, gemm, {**config, "ONE_DOT": True})
        bound = tune.candidate_bound(stage, gemm, four, {**config, "ONE_DOT": False},
                                     {**config, "ONE_DOT": True})
        assert not one.isnan().any(), f"GEMM{gemm}: rows left unwritten"
        assert tune.disagreement(one, four, bound) is None, f"GEMM{gemm}"
        if fused_moe.one_dot_rounds(stage.weights(gemm, config), stage.act):
            # the PTX decode's one rounding against the fp32 path's (FAST_I4 off): the same
            # weights, so another order of the same products at most
            slow = _run(stage, gemm, {**config, "ONE_DOT": True, "FAST_I4": False})
            exact = tune.reorder_bound(one, stage.magnitudes(gemm), stage.shape(gemm)[1])
            assert tune.disagreement(slow, one, exact) is None, f"GEMM{gemm}, FAST_I4 off"
