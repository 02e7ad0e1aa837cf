"""MXFP8's weights read as 16-bit words (gemm_kernel's E4M3_WORDS, `_e4m3_words`: two columns
a word, converted by the hardware, the activations' even and odd columns in two dots) compiled
on a CUDA sm89+ GPU (skipped elsewhere: the PTX does not run under the interpreter; the host's
choice is tested in test_dot_operand_widths.py). Each GEMM against the fp8-byte tile
(MOECERT_TRITON_E4M3_WORDS=0) on the same inputs: the same products, summed in another fp32
order at most (the tuner's reorder bound), for the decode tile, the swapped tile, a split-K
tile and the 32-row tile, MXFP8 and MXFP6 (held as e4m3 bytes), bf16 and fp16."""

from __future__ import annotations

import os

import pytest
import torch


def _sm89() -> bool:
    return (torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1"
            and torch.cuda.get_device_capability() >= (8, 9))


pytestmark = pytest.mark.skipif(not _sm89(), reason="needs a CUDA sm89+ GPU, compiled Triton")

TILES = {
    "decode": {"BLOCK_M": 16, "BLOCK_N": 128, "BLOCK_K": 128, "num_warps": 4, "num_stages": 4},
    "swapped": {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 128, "num_warps": 4, "num_stages": 3,
                "SWAP_AB": True},
    "split": {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 128, "num_warps": 4, "num_stages": 4,
              "SPLIT_K": 4},
    "rows32": {"BLOCK_M": 32, "BLOCK_N": 64, "BLOCK_K": 128, "num_warps": 4,
               "num_stages": 3},
}


@pytest.mark.parametrize("tile", sorted(TILES))
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("scheme", ["mxfp8", "mxfp6-e2m3"])
def test_words_give_the_byte_tiles_sum(scheme, dtype, tile, monkeypatch):
    from moecert.kernels.triton_moe import configs, gemm_kernel, tune, tune_stages
    from moecert.kernels.triton_moe.backend import TritonBackend
    from moecert.reference import MoEProblem, make_inputs, synthesize

    P = MoEProblem(M=24, K=1024, N=768, E=4, topk=2, dtype=dtype)
    backend = TritonBackend()
    layer = backend.create_layer(synthesize(scheme, P, seed=3).to("cuda"), P)
    backend.process_weights_after_loading(layer)
    x, w, ids = (t.cuda() for t in make_inputs(P, seed=4))
    stage = tune_stages.LayerStage(layer, x, w, ids)
    kernel, words_seen = gemm_kernel.moe_gemm_kernel, []

    class Spy:  # the E4M3_WORDS each launch compiled
        def __getitem__(self, grid):
            def launch(*args, **kw):
                words_seen.append(kw["E4M3_WORDS"])
                return kernel[grid](*args, **kw)
            return launch
    monkeypatch.setattr(gemm_kernel, "moe_gemm_kernel", Spy())
    for gemm in (1, 2):
        config = {**stage.defaults[gemm - 1], **TILES[tile]}
        out = {}
        for words in ("0", "1"):
            monkeypatch.setenv(configs.E4M3_WORDS_ENV, words)
            words_seen.clear()
            out[words] = stage.run(gemm, config).clone()
            assert words_seen and set(words_seen) == {words == "1"}, words_seen
        assert torch.isfinite(out["1"]).all() and out["1"].abs().max() > 0
        bound = tune.reorder_bound(out["0"], stage.magnitudes(gemm), stage.shape(gemm)[1])
        assert tune.disagreement(out["1"], out["0"], bound) is None, (gemm, tile)
