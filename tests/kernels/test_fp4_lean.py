"""Issue 44's second FP4 decode candidate, LEAN (MOECERT_TRITON_FP4_LEAN=1, gemm_kernel): no K
masks on the activation loads where every tile lies inside K, and NVFP4 in bf16 decoded with
one packed multiply per pair, the block scale carrying the decode's 2^126 as 2^119 and the
epilogue restoring the 2^-7. Under the interpreter the GEMM must give the current path's
output bit for bit (bytes and words, unrolled, split-K, swapped, a K that is no whole number
of steps, the folded MXFP4 and fp16 paths LEAN leaves alone). The PTX itself runs only on a
GPU: here its text is executed by a small emulator of the six instructions it uses, on every
16-bit code word and every finite e4m3 scale, against the current PTX's text."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch
from moecert.kernels.triton_moe.interpret import load_interpreted_kernels

load_interpreted_kernels()  # before the kernel modules are bound below

from _gemm import run_moe_gemm  # noqa: E402
from moecert.kernels.triton_moe import configs, gemm_kernel, kinds, layout  # noqa: E402
from moecert.kernels.triton_moe import fused_moe as fm  # noqa: E402
from moecert.kernels.triton_moe.backend import TritonBackend  # noqa: E402
from moecert.reference import MoEProblem, make_inputs, synthesize  # noqa: E402

E, N, TOPK = 3, 64, 2


@pytest.fixture(autouse=True)
def _interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    for name in (configs.FP4_LEAN_ENV, configs.FP4_SCALE_WORDS_ENV, configs.DEQUANT_ROWS_ENV):
        monkeypatch.delenv(name, raising=False)
    assert "moecert.kernels.triton_moe.fused_moe" in sys.modules


def _run(weights, a, ids, config):
    return run_moe_gemm(weights, a, ids, config, E, TOPK)


@pytest.mark.parametrize(("scale", "dtype", "words"), [
    ("e4m3", torch.bfloat16, True), ("e4m3", torch.bfloat16, False),
    ("e4m3", torch.float16, True), ("e8m0", torch.bfloat16, True)],
    ids=["nvfp4-bf16-words", "nvfp4-bf16-bytes", "nvfp4-fp16", "mxfp4-folded"])
@pytest.mark.parametrize(("K", "unroll", "split_k", "swap"), [
    (192, 1, 1, False), (192, 2, 1, False), (256, 1, 2, True)],
    ids=["even", "unrolled-past-K", "split-swapped"])
def test_lean_gives_the_current_paths_bits(scale, dtype, words, K, unroll, split_k, swap,
                                           monkeypatch):
    gen = torch.Generator().manual_seed(K + unroll + 3 * split_k)
    q = torch.randint(0, 256, (E, N, K // 2), dtype=torch.uint8, generator=gen)
    if scale == "e8m0":
        kind, cols = kinds.S_E8M0, 32
        s = torch.randint(120, 134, (E, N, K // cols), dtype=torch.uint8, generator=gen)
    else:  # e4m3 bytes over most of the range, a fifth negative, the smallest subnormals
        kind, cols = kinds.S_E4M3, 16
        s = torch.randint(0x01, 0x7E, (E, N, K // cols), dtype=torch.uint8, generator=gen)
        s |= (torch.rand(s.shape, generator=gen) < 0.2).to(torch.uint8) << 7
    codes = layout.tile_weights(layout.plane_nibbles(q, layout.FP4_SPAN), *layout.FP4_TILE)
    sw = layout.scale_words(s, cols) if words else s.transpose(1, 2).contiguous(
        ).transpose(1, 2)
    described = {}
    for lean in ("0", "1"):
        monkeypatch.setenv(configs.FP4_LEAN_ENV, lean)
        described[lean] = fm.describe_weights(kinds.W_FP4, codes, dtype, s=sw,
                                              scale_cols=cols, scale_kind=kind,
                                              nib_span=layout.FP4_SPAN)
    assert described["1"]["constexprs"]["LEAN"] and not described["0"]["constexprs"]["LEAN"]
    a = torch.randn(7, K, generator=gen).to(dtype)
    ids = torch.stack([torch.randperm(E, generator=gen)[:TOPK] for _ in range(7)]).reshape(-1)
    config = {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 64, "num_warps": 4, "num_stages": 2,
              "K_UNROLL": unroll, "SPLIT_K": split_k, "SWAP_AB": swap}
    want = _run(described["0"], a, ids, config)
    got = _run(described["1"], a, ids, config)
    assert torch.isfinite(want).all() and want.abs().max() > 1
    assert torch.equal(got.view(torch.int32), want.view(torch.int32))


@pytest.mark.parametrize("scheme", ["nvfp4", "mxfp4"])
def test_the_backend_takes_lean_from_the_variable_and_says_so(scheme, monkeypatch):
    P = MoEProblem(M=5, K=256, N=64, E=3, topk=2, bias=True)
    ckpt = synthesize(scheme, P, seed=1)
    backend = TritonBackend()
    x, w, ids = make_inputs(P, seed=2)
    outs = {}
    # the scale words' path (MXFP4's default since stores bf16 scales: test_fp4_scale_bf16)
    monkeypatch.setenv(configs.FP4_SCALE_BF16_ENV, "0")
    for lean in ("0", "1"):
        monkeypatch.setenv(configs.FP4_LEAN_ENV, lean)
        layer = backend.create_layer(ckpt, P)
        backend.process_weights_after_loading(layer)
        assert ("lean e2m1 step" in backend.describe(layer)) == (lean == "1")
        assert "plane scales in words" in backend.describe(layer)  # the default now
        outs[lean] = backend.apply(layer, x, w, ids)
    assert torch.equal(outs["1"], outs["0"])


def test_scale_words_are_the_default_and_zero_turns_them_off(monkeypatch):
    assert configs.fp4_scale_words({}) and configs.fp4_scale_words({"X": "1"})
    assert configs.fp4_scale_words({configs.FP4_SCALE_WORDS_ENV: ""})
    assert not configs.fp4_scale_words({configs.FP4_SCALE_WORDS_ENV: "0"})
    assert configs.fp4_lean({}) and configs.fp4_lean({configs.FP4_LEAN_ENV: "1"})
    assert not configs.fp4_lean({configs.FP4_LEAN_ENV: "0"})


# --- the PTX, executed ---------------------------------------------------------------------

def _bf16_pair(bits: np.ndarray) -> np.ndarray:
    """uint32 registers -> their two bf16 halves as float64 [..., 2] (low, high)."""
    halves = np.stack([bits & 0xFFFF, bits >> 16], axis=-1).astype(np.int32)
    return torch.from_numpy(halves.astype(np.int16)).view(torch.bfloat16).double().numpy()


def _pack_bf16(values: np.ndarray) -> np.ndarray:
    """float64 [..., 2] -> uint32 registers of the two bf16 values, each rounded to nearest
    even once (a product of two bf16 values is exact in fp32, so fp32 -> bf16 is the one
    rounding, as fma.rn's)."""
    h = torch.from_numpy(values).float().to(torch.bfloat16).view(torch.int16).numpy()
    h = h.astype(np.int64) & 0xFFFF
    return (h[..., 0] | (h[..., 1] << 16)).astype(np.uint32)


def _run_ptx(asm: str, regs: dict) -> dict:
    """Execute the PTX block `_fp4_asm` writes: mov, shl, shr, and, lop3 (any LUT) and
    fma.rn.bf16x2, on uint32 numpy arrays; `regs` holds $4 (the words) and $5.. (scales)."""
    env = dict(regs)

    def val(x):
        x = x.strip()
        return np.uint32(int(x, 16) if x.startswith("0x") else int(x)) if x[0].isdigit() \
            else env[x]

    for line in asm.splitlines():
        line = line.strip().rstrip(";")
        if not line or line in "{}" or line.startswith(".reg"):
            continue
        op, rest = line.split(None, 1)
        d, *src = [x.strip() for x in rest.split(",")]
        if op == "mov.b32":
            env[d] = np.broadcast_to(val(src[0]), env["$4"].shape).astype(np.uint32)
        elif op == "shl.b32":
            env[d] = (val(src[0]).astype(np.uint64) << int(src[1])).astype(np.uint32)
        elif op == "shr.u32":
            env[d] = val(src[0]) >> np.uint32(int(src[1]))
        elif op == "and.b32":
            env[d] = val(src[0]) & val(src[1])
        elif op == "lop3.b32":
            a, b, c, lut = (val(x) for x in src)
            out = np.zeros_like(env["$4"])
            for i in range(8):  # minterm i: a's bit is i >> 2, b's (i >> 1) & 1, c's i & 1
                if int(lut) >> i & 1:
                    ma = a if i >> 2 & 1 else ~a
                    mb = b if i >> 1 & 1 else ~b
                    mc = c if i & 1 else ~c
                    out |= ma & mb & mc
            env[d] = out
        elif op == "fma.rn.bf16x2":
            a, b, c = (_bf16_pair(val(x)) for x in src)
            assert np.all(c == 0)  # the blocks add -0 only: a product, rounded once
            env[d] = _pack_bf16(a * b)
        else:
            raise AssertionError(f"instruction the emulator does not know: {line}")
    return env


def _e4m3_values() -> np.ndarray:
    b = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).double()
    return b[torch.isfinite(b) & (b != 0)].numpy()


def test_the_folded_ptx_is_the_current_ptx_times_two_to_the_minus_shift():
    """Every 16-bit code word (in the low half; a shuffled copy in the high half) and, over
    more random words, every finite non-zero e4m3 scale in every plane: the folded block's
    four outputs are the current block's times 2^-LEAN_SHIFT, bit for bit after undoing that
    power of two (signs and -0 included)."""
    rng = np.random.default_rng(0)
    scales = _e4m3_values()  # 252: +-2^-9 .. +-448
    low = np.concatenate([np.arange(65536), rng.integers(0, 65536, 64 * len(scales))])
    words = (low | (rng.permutation(low) << 16)).astype(np.uint32)
    # plane p's scale per word: the first 65536 words cycle through the scales, the rest
    # take each scale 64 times, plane p shifted by p scales
    pick = np.concatenate([np.arange(65536) % len(scales),
                           np.repeat(np.arange(len(scales)), 64)])
    s = np.stack([scales[(pick + p) % len(scales)] for p in range(4)])  # [4, W]
    dup = np.repeat(s[..., None], 2, axis=-1)  # [4, W, 2]: both halves of a register
    fp4_bf16 = gemm_kernel._FP4_BF16
    now = gemm_kernel._fp4_asm(*fp4_bf16, scaled=True)
    lean = gemm_kernel._fp4_asm(*fp4_bf16, scaled=True, folded=True)
    assert lean.count("fma.rn.bf16x2") == 4 and now.count("fma.rn.bf16x2") == 8
    shift = gemm_kernel.LEAN_SHIFT
    folded = dup * 2.0 ** (126 - shift)
    assert np.array_equal(_bf16_pair(_pack_bf16(folded)), folded)  # the scales fit bf16
    want = _run_ptx(now, {"$4": words, **{f"${5 + p}": _pack_bf16(dup[p]) for p in range(4)}})
    got = _run_ptx(lean, {"$4": words,
                          **{f"${5 + p}": _pack_bf16(folded[p]) for p in range(4)}})
    for p in range(4):
        w, g = _bf16_pair(want[f"${p}"]), _bf16_pair(got[f"${p}"])
        assert np.abs(w).max() > 1000 and np.abs(w[w != 0]).min() < 2**-9
        assert np.array_equal(g * 2.0 ** shift, w), p
        assert np.array_equal(np.signbit(g), np.signbit(w))  # -0 stays -0
