"""MXFP8's weights read as 16-bit words (gemm_kernel's E4M3_WORDS, `_e4m3_words`: two columns
a word, converted by the hardware, the activations' even and odd columns in two dots) compiled
on a CUDA sm89+ GPU (skipped elsewhere: the PTX does not run under the interpreter; the host's
choice is tested in test_dot_operand_widths.py). Each GEMM against the fp8-byte tile
(MOECERT_TRITON_E4M3_WORDS=0) on the same inputs: the same products, summed in another fp32
order at most (the tuner's reorder bound), for the decode tile, the swapped tile, a split-K
tile and the 32-row tile, MXFP8 and MXFP6 (held as e4m3 bytes), bf16 (decoded from the bit
fields times each tile's scale: round fourteen) and fp16 (converted); and each decode on
every 16-bit word against torch's float8_e4m3fn values."""

from __future__ import annotations

import os

import pytest
import torch
from _gemm import record_launches


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
    # the decode tile on a K past the last 128-column tile by one scale block (the scaled
    # words' tile spans four blocks: the last tile reads the last scale column for the rest)
    "k-tail": {"BLOCK_M": 16, "BLOCK_N": 128, "BLOCK_K": 128, "num_warps": 4, "num_stages": 4},
}


@pytest.mark.parametrize("tile", sorted(TILES))
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("scheme", ["mxfp8", "mxfp6-e2m3"])
def test_words_give_the_byte_tiles_sum(scheme, dtype, tile, monkeypatch):
    from moecert.kernels.triton_moe import configs, gemm_kernel, tune, tune_stages
    from moecert.kernels.triton_moe.backend import TritonBackend
    from moecert.reference import MoEProblem, make_inputs, synthesize

    P = MoEProblem(M=24, K=1024 + (32 if tile == "k-tail" else 0), N=768, E=4, topk=2,
                   dtype=dtype)
    monkeypatch.setenv(configs.FP6_PLANES_ENV, "0")  # MXFP6 as the e4m3 bytes it widens to
    backend = TritonBackend()
    layer = backend.create_layer(synthesize(scheme, P, seed=3).to("cuda"), P)
    backend.process_weights_after_loading(layer)
    x, w, ids = (t.cuda() for t in make_inputs(P, seed=4))
    stage = tune_stages.LayerStage(layer, x, w, ids)
    words_seen = record_launches(monkeypatch, lambda args, kw: kw["E4M3_WORDS"])
    decode = {"bf16": gemm_kernel.E4M3_SCALED_WORDS, "fp16": gemm_kernel.E4M3_CVT_WORDS}
    for gemm in (1, 2):
        config = {**stage.defaults[gemm - 1], **TILES[tile]}
        out = {}
        for words in ("0", "1"):
            monkeypatch.setenv(configs.E4M3_WORDS_ENV, words)
            words_seen.clear()
            out[words] = stage.run(gemm, config).clone()
            want = decode[dtype] if words == "1" else gemm_kernel.E4M3_BYTES
            assert words_seen and set(words_seen) == {want}, words_seen
        assert torch.isfinite(out["1"]).all() and out["1"].abs().max() > 0
        bound = tune.reorder_bound(out["0"], stage.magnitudes(gemm), stage.shape(gemm)[1])
        assert tune.disagreement(out["1"], out["0"], bound) is None, (gemm, tile)


def _every_word():
    """Every 16-bit word once, and each byte's float8_e4m3fn value (low, high) in float64."""
    words = torch.arange(-(1 << 15), 1 << 15, dtype=torch.int32, device="cuda")
    words = words.to(torch.int16)
    pairs = words.view(torch.uint8).view(-1, 2)  # little-endian: the low byte first
    value = pairs.view(torch.float8_e4m3fn).to(torch.float64)
    return words, value[:, 0], value[:, 1]


def _assert_same_values(got: torch.Tensor, want: torch.Tensor):
    """Equal values, -0 kept apart from +0 and NaN where NaN (bits compared)."""
    want = want.to(torch.bfloat16)  # exact: every value here is a bf16
    nan = torch.isnan(want)
    assert torch.equal(torch.isnan(got), nan)
    bad = (got.view(torch.int16) != want.view(torch.int16)) & ~nan
    assert not bad.any(), (int(bad.sum()), got[bad][:4], want[bad][:4])


def test_every_word_converts_to_its_e4m3_values():
    """`_e4m3_words` (the hardware conversion) in bf16 on all 65536 words: each byte's
    e4m3 value exactly, subnormals (e = 0), -0, the largest magnitudes and NaN included."""
    from _e4m3_decode import decoded
    from moecert.kernels.triton_moe import gemm_kernel

    words, lo_want, hi_want = _every_word()
    lo, hi = decoded(words, gemm_kernel.E4M3_CVT_WORDS)
    _assert_same_values(lo, lo_want)
    _assert_same_values(hi, hi_want)


@pytest.mark.parametrize("scale", ["min", "min+3", "127", "max-2", "max", "random"])
def test_every_word_times_its_scale_decodes_to_the_weight(scale):
    """`_e4m3_scaled_words` (the bit-field decode) on the 254 * 254 words without a NaN
    byte (the host takes it only for such layers) times one E8M0 byte at the
    edges of E8M0_WORDS_MIN..MAX and inside, or a random byte per word: each weight
    value e4m3 * 2^(E - 127) exactly (the smallest subnormal at the smallest byte is
    2^-126, bf16's smallest normal)."""
    from _e4m3_decode import decoded
    from moecert.kernels.triton_moe import gemm_kernel

    words, lo_want, hi_want = _every_word()
    keep = ~(torch.isnan(lo_want) | torch.isnan(hi_want))
    assert int(keep.sum()) == 254 * 254
    words, lo_want, hi_want = words[keep], lo_want[keep], hi_want[keep]
    n = words.numel() // 256 * 256
    words, lo_want, hi_want = words[:n], lo_want[:n], hi_want[:n]
    lo_b, hi_b = gemm_kernel.E8M0_WORDS_MIN, gemm_kernel.E8M0_WORDS_MAX
    if scale == "random":  # a byte per word drawn from the whole range
        gen = torch.Generator(device="cuda").manual_seed(9)
        e8m0 = torch.randint(lo_b, hi_b + 1, (n,), generator=gen, device="cuda",
                             dtype=torch.int32).to(torch.uint8)
    else:
        byte = {"min": lo_b, "min+3": lo_b + 3, "127": 127, "max-2": hi_b - 2,
                "max": hi_b}[scale]
        e8m0 = torch.full((n,), byte, dtype=torch.uint8, device="cuda")
    factor = torch.exp2(e8m0.to(torch.float64) - 127)
    lo, hi = decoded(words, gemm_kernel.E4M3_SCALED_WORDS, e8m0)
    _assert_same_values(lo, lo_want * factor)
    _assert_same_values(hi, hi_want * factor)
