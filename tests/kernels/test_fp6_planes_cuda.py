"""MXFP6's six-bit planes (layout.plane_fp6, gemm_kernel's FP6_EXP) compiled on a CUDA sm80+
GPU (skipped elsewhere: the PTX does not run under the interpreter; the layout and the PTX's
bits are checked on the CPU in test_fp6_planes.py, the interpreter's decode in
test_triton_backend.py). Each GEMM against the e4m3 bytes the same checkpoint widens to
(MOECERT_TRITON_FP6_PLANES=0) on the same inputs: the same products, summed in another fp32
order at most (the tuner's reorder bound), on the decode, swapped, split-K, 32-row and
K_UNROLL tiles (one whose last step runs past K); and the decode on every word with every
byte of top bits and signs, times E8M0 bytes at the edges of the element's range, against
the element records' values."""

from __future__ import annotations

import pytest
import torch
from _gemm import record_launches


def _sm80() -> bool:
    import os

    return (torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1"
            and torch.cuda.get_device_capability() >= (8, 0))


pytestmark = pytest.mark.skipif(not _sm80(), reason="needs a CUDA sm80+ GPU, compiled Triton")

FP6 = ("mxfp6-e2m3", "mxfp6-e3m2")
TILES = {
    "decode": {"BLOCK_M": 16, "BLOCK_N": 128, "num_warps": 4, "num_stages": 4},
    "swapped": {"BLOCK_M": 16, "BLOCK_N": 64, "num_warps": 4, "num_stages": 3,
                "SWAP_AB": True},
    "split": {"BLOCK_M": 16, "BLOCK_N": 64, "num_warps": 4, "num_stages": 4, "SPLIT_K": 4},
    "rows32": {"BLOCK_M": 32, "BLOCK_N": 64, "num_warps": 4, "num_stages": 3},
    "unroll": {"BLOCK_M": 16, "BLOCK_N": 128, "num_warps": 4, "num_stages": 3, "K_UNROLL": 2},
    # K 1152: nine spans, so K_UNROLL 2's last step runs one span past K (zero activations,
    # the last span's weights and scales)
    "unroll-tail": {"BLOCK_M": 16, "BLOCK_N": 128, "num_warps": 4, "num_stages": 3,
                    "K_UNROLL": 2},
}


@pytest.mark.parametrize("tile", sorted(TILES))
@pytest.mark.parametrize("scheme", FP6)
def test_planes_give_the_byte_tiles_sum(scheme, tile, monkeypatch):
    from moecert.kernels.triton_moe import configs, tune, tune_stages
    from moecert.kernels.triton_moe.backend import TritonBackend
    from moecert.reference import MoEProblem, make_inputs, synthesize

    P = MoEProblem(M=24, K=1152 if tile == "unroll-tail" else 1024, N=768, E=4, topk=2)
    backend = TritonBackend()
    ckpt = synthesize(scheme, P, seed=3).to("cuda")
    x, w, ids = (t.cuda() for t in make_inputs(P, seed=4))
    stages = {}
    for planes in ("0", "1"):
        monkeypatch.setenv(configs.FP6_PLANES_ENV, planes)
        layer = backend.create_layer(ckpt, P)
        backend.process_weights_after_loading(layer)
        assert ("six-bit planes" in backend.describe(layer)) == (planes == "1")
        stages[planes] = tune_stages.LayerStage(layer, x, w, ids)
    exps = record_launches(monkeypatch, lambda args, kw: kw["FP6_EXP"])
    for gemm in (1, 2):
        out = {}
        for planes, stage in stages.items():
            config = {**stage.defaults[gemm - 1], **TILES[tile]}
            exps.clear()
            out[planes] = stage.run(gemm, config).clone()
            assert exps and set(exps) == ({0} if planes == "0" else {3 if "e3m2" in scheme
                                                                     else 2}), exps
        assert torch.isfinite(out["1"]).all() and out["1"].abs().max() > 0
        stage = stages["0"]
        bound = tune.reorder_bound(out["0"], stage.magnitudes(gemm), stage.shape(gemm)[1])
        assert tune.disagreement(out["1"], out["0"], bound) is None, (gemm, tile)


@pytest.mark.parametrize("scale", ["min", "127", "max", "random"])
@pytest.mark.parametrize("element", ["e2m3", "e3m2"])
def test_every_word_and_byte_decode_to_the_weights(element, scale):
    """`_fp6_planes` on all 65536 words of each half, each with all 256 bytes of top bits and
    signs (the first half's words in order with the high word's low byte j, the second's a
    permutation with its high byte 37 j + word): plane p's code (nibble p, the byte's top
    bit and sign for p: layout.fp6_top_sign) times 2^(E - 127), exactly (bits compared, -0
    apart from +0), E one byte per plane at the edges of gemm_kernel.e8m0_words_range, 127,
    or random per weight."""
    from _fp6_decode import decoded
    from moecert.kernels.triton_moe import gemm_kernel, layout
    from moecert.reference.schemes import ELEMENTS

    el = ELEMENTS[element]
    word = torch.arange(1 << 16, dtype=torch.int32, device="cuda").repeat_interleave(256)
    j = torch.arange(256, dtype=torch.int32, device="cuda").repeat(1 << 16)
    halves = (word, (word * 40503 + 7) & 0xFFFF)  # (an odd multiplier: a permutation)
    bytes_ = (j, (j * 37 + word) & 0xFF)
    n = word.numel()
    lo, hi = gemm_kernel.e8m0_words_range(element)
    if scale == "random":
        gen = torch.Generator(device="cuda").manual_seed(7)
        e8m0 = torch.randint(lo, hi + 1, (4, n), generator=gen, device="cuda",
                             dtype=torch.int32)
    else:
        e8m0 = torch.full((4, n), {"min": lo, "127": 127, "max": hi}[scale],
                          dtype=torch.int32, device="cuda")
    high = bytes_[0] | (bytes_[1] << 8)
    got = decoded(halves[0].to(torch.int16), halves[1].to(torch.int16), high.to(torch.int16),
                  e8m0.to(torch.uint8), el.exp_bits, el.exp_bias)
    table = torch.tensor(el.values, dtype=torch.float64, device="cuda")
    for half in (0, 1):
        for p, (top, sign) in enumerate(layout.fp6_top_sign(el.exp_bits)):
            w, h = halves[half], bytes_[half]
            code = ((w >> (4 * p)) & 0xF) | (((h >> top) & 1) << 4) | (((h >> sign) & 1) << 5)
            want = (table[code] * torch.exp2(e8m0[p].to(torch.float64) - 127)).to(
                torch.bfloat16)
            bad = got[half, p].view(torch.int16) != want.view(torch.int16)
            assert not bad.any(), (half, p, int(bad.sum()), code[bad][:4])
