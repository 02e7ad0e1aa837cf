"""Issue 44's third FP4 decode candidate, CARRY (MOECERT_TRITON_FP4_CARRY=1): e2m1 plane words
stored with each nibble's sign where the decode's packed multiply carries it
(layout.carry_bits), with or without LEAN's step. The layout must invert exactly and put every
field where it says; under the interpreter the GEMM and the prefill decode must give the
current path's output bit for bit (CARRY and LEAN: the LEAN path's; the bit-field decode
reading the carried fields); the
PTX runs only on a GPU (test_fp4_carry_cuda.py): here its text is executed by
test_fp4_lean.py's emulator on every 16-bit code word and every finite e4m3 scale, against
the current PTX on the words before `carry_bits`."""

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
from test_fp4_lean import _bf16_pair, _e4m3_values, _pack_bf16, _run_ptx  # noqa: E402

E, N, TOPK = 3, 64, 2
ENVS = (configs.FP4_CARRY_ENV, configs.FP4_LEAN_ENV, configs.FP4_SCALE_WORDS_ENV,
        configs.DEQUANT_ROWS_ENV)


@pytest.fixture(autouse=True)
def _interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    for name in ENVS:
        monkeypatch.delenv(name, raising=False)
    assert "moecert.kernels.triton_moe.fused_moe" in sys.modules


def _all_words() -> torch.Tensor:
    """Every 16-bit word once, as `plane_nibbles` stores words: little-endian byte pairs."""
    w = torch.arange(65536, dtype=torch.int32)
    return torch.stack([w & 0xFF, w >> 8], dim=-1).flatten().to(torch.uint8).view(1, -1)


def _as_words(q: torch.Tensor) -> np.ndarray:
    return (q[..., 0::2].long() | (q[..., 1::2].long() << 8)).numpy().astype(np.uint32)


# --- the layout ------------------------------------------------------------------------------

def test_carry_bits_put_each_field_where_they_say_and_invert():
    q = _all_words()
    c = layout.carry_bits(q)
    assert torch.equal(layout.uncarry_bits(c), q)
    src, dst = _as_words(q)[0], _as_words(c)[0]
    assert len(np.unique(dst)) == 65536  # a permutation of the words
    for p, (eem, sign) in enumerate(zip(layout.CARRY_EEM, layout.CARRY_SIGN, strict=True)):
        nib = (src >> (4 * p)) & 0xF
        assert np.array_equal((dst >> eem) & 7, nib & 7), p
        assert np.array_equal((dst >> sign) & 1, nib >> 3), p
    assert not torch.equal(c, q)


def test_carry_bits_chunk_as_a_whole_tensor_would(monkeypatch):
    gen = torch.Generator().manual_seed(3)
    q = torch.randint(0, 256, (5, 7, 64), dtype=torch.uint8, generator=gen)
    whole = layout.carry_bits(q)
    monkeypatch.setattr(layout, "PLANE_CHUNK_BYTES", 4 * 64 * 3)  # three rows a chunk
    assert torch.equal(layout.carry_bits(q), whole)
    assert torch.equal(layout.uncarry_bits(whole), q)


def test_two_planes_carry_their_sign_and_the_fields_fill_the_word():
    """The asm's count rests on this: planes whose sign is 9 bits above EEM need no fix-up."""
    bits = sorted([b + i for b in layout.CARRY_EEM for i in range(3)] + list(layout.CARRY_SIGN))
    assert bits == list(range(16))
    carried = [s == b + 9 for b, s in zip(layout.CARRY_EEM, layout.CARRY_SIGN, strict=True)]
    assert sum(carried) == 2
    asm = gemm_kernel._fp4_carry_asm(scaled=True, folded=True)
    assert asm.count("lop3") == 2 and asm.count("fma") == 4
    body = [x for x in asm.splitlines() if x.strip().split(" ")[0] in
            ("shl.b32", "shr.u32", "and.b32", "fma.rn.bf16x2", "lop3.b32")]
    assert len(body) == 15  # 11 besides the four multiplies; the nibble order's block: 19


# --- the PTX, executed ---------------------------------------------------------------------

@pytest.mark.parametrize("variant", ["folded", "scaled", "plain"])
def test_the_carried_ptx_gives_the_current_ptx_bits(variant):
    """Every 16-bit code word (low half; a shuffled copy in the high half) and, over more
    random words, every finite non-zero e4m3 scale in every plane: the carried block on the
    carried words gives the current block's four outputs on the words, bit for bit (signs
    and -0 included). folded: LEAN's NVFP4 block (the scale times 2^(126 - LEAN_SHIFT));
    scaled: two multiplies (MXFP4 folded into bf16, the prefill decode); plain: unscaled."""
    rng = np.random.default_rng(1)
    scales = _e4m3_values()
    low = np.concatenate([np.arange(65536), rng.integers(0, 65536, 64 * len(scales))])
    high = rng.permutation(low)
    words = (low | (high << 16)).astype(np.uint32)

    def carried(w16):
        q = torch.from_numpy(np.stack([w16 & 0xFF, w16 >> 8], -1).reshape(1, -1)
                             ).to(torch.uint8)
        return _as_words(layout.carry_bits(q))[0]

    cwords = (carried(low) | (carried(high) << 16)).astype(np.uint32)
    pick = np.concatenate([np.arange(65536) % len(scales),
                           np.repeat(np.arange(len(scales)), 64)])
    dup = np.repeat(np.stack([scales[(pick + p) % len(scales)] for p in range(4)])[..., None],
                    2, axis=-1)
    fp4_bf16 = gemm_kernel._FP4_BF16
    if variant == "plain":
        now, new, regs = (gemm_kernel._fp4_asm(*fp4_bf16, scaled=False),
                          gemm_kernel._fp4_carry_asm(scaled=False), {})
    else:
        folded = variant == "folded"
        now = gemm_kernel._fp4_asm(*fp4_bf16, scaled=True, folded=folded)
        new = gemm_kernel._fp4_carry_asm(scaled=True, folded=folded)
        s = dup * 2.0 ** (126 - gemm_kernel.LEAN_SHIFT) if folded else dup
        regs = {f"${5 + p}": _pack_bf16(s[p]) for p in range(4)}
    want = _run_ptx(now, {"$4": words, **regs})
    got = _run_ptx(new, {"$4": cwords, **regs})
    for p in range(4):
        w = _bf16_pair(want[f"${p}"])
        assert (w < 0).any() and (w == 0).any() and np.abs(w).max() > 1
        assert np.array_equal(want[f"${p}"], got[f"${p}"]), p  # the registers' bits


def test_the_emulated_check_fails_on_a_sign_in_the_wrong_place(monkeypatch):
    """The check above can fail: a layout whose carried plane's sign sits one bit off."""
    words = np.arange(65536, dtype=np.uint32)
    monkeypatch.setattr(gemm_kernel, "CARRY_SIGN", (9, 13, 15, 14))
    good = gemm_kernel._fp4_carry_asm(scaled=False)
    monkeypatch.setattr(gemm_kernel, "CARRY_SIGN", (10, 13, 15, 14))  # not carried: fixed up
    assert gemm_kernel._fp4_carry_asm(scaled=False) != good
    cw = _as_words(layout.carry_bits(torch.from_numpy(
        np.stack([words & 0xFF, words >> 8], -1).reshape(1, -1)).to(torch.uint8)))[0]
    got = _run_ptx(gemm_kernel._fp4_carry_asm(scaled=False), {"$4": cw})
    want = _run_ptx(gemm_kernel._fp4_asm(*gemm_kernel._FP4_BF16, scaled=False), {"$4": words})
    assert not np.array_equal(got["$0"], want["$0"])


# --- the GEMM and the prefill decode, interpreted ------------------------------------------

def _codes(q: torch.Tensor, carry: bool) -> torch.Tensor:
    planes = layout.plane_nibbles(q, layout.FP4_SPAN)
    if carry:
        planes = layout.carry_bits(planes)
    return layout.tile_weights(planes, *layout.FP4_TILE)


@pytest.mark.parametrize(("scale", "words", "lean"), [
    ("e4m3", True, "0"), ("e4m3", True, "1"), ("e4m3", False, "0"), ("e8m0-folded", True, "0"),
    ("e8m0-folded", True, "1"), ("e8m0-pairs", True, "0")],
    ids=["nvfp4-words", "nvfp4-words-lean", "nvfp4-bytes", "mxfp4-folded", "mxfp4-folded-lean",
         "mxfp4-pairs"])
@pytest.mark.parametrize(("K", "unroll", "split_k", "swap"), [
    (192, 1, 1, False), (192, 2, 1, False), (256, 1, 2, True)],
    ids=["even", "unrolled-past-K", "split-swapped"])
def test_carry_gives_the_current_paths_bits(scale, words, lean, K, unroll, split_k, swap,
                                            monkeypatch):
    monkeypatch.setenv(configs.FP4_LEAN_ENV, lean)
    gen = torch.Generator().manual_seed(K + unroll + 5 * split_k)
    q = torch.randint(0, 256, (E, N, K // 2), dtype=torch.uint8, generator=gen)
    if scale.startswith("e8m0"):
        kind, cols = kinds.S_E8M0, 32
        lo = 120 if scale == "e8m0-folded" else 1  # byte 1 does not fold: per-pair scales
        s = torch.randint(lo, 134, (E, N, K // cols), dtype=torch.uint8, generator=gen)
    else:  # e4m3 bytes over most of the range, a fifth negative, the smallest subnormals
        kind, cols = kinds.S_E4M3, 16
        s = torch.randint(0x01, 0x7E, (E, N, K // cols), dtype=torch.uint8, generator=gen)
        s |= (torch.rand(s.shape, generator=gen) < 0.2).to(torch.uint8) << 7
    sw = layout.scale_words(s, cols) if words else s.transpose(1, 2).contiguous(
        ).transpose(1, 2)
    described = {carry: fm.describe_weights(kinds.W_FP4, _codes(q, carry), torch.bfloat16,
                                            s=sw, scale_cols=cols, scale_kind=kind,
                                            nib_span=layout.FP4_SPAN, carry=carry)
                 for carry in (False, True)}
    assert described[True]["constexprs"]["CARRY"]
    assert not described[False]["constexprs"]["CARRY"]
    assert described[True]["constexprs"]["LEAN"] == described[False]["constexprs"]["LEAN"]
    assert described[True]["constexprs"]["LEAN"] == (lean == "1")
    assert described[True]["e8m0_fold"] == (scale == "e8m0-folded")
    a = torch.randn(7, K, generator=gen).to(torch.bfloat16)
    ids = torch.stack([torch.randperm(E, generator=gen)[:TOPK] for _ in range(7)]).reshape(-1)
    config = {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 64, "num_warps": 4, "num_stages": 2,
              "K_UNROLL": unroll, "SPLIT_K": split_k, "SWAP_AB": swap}
    want = run_moe_gemm(described[False], a, ids, config, E, TOPK)
    got = run_moe_gemm(described[True], a, ids, config, E, TOPK)
    assert torch.isfinite(want).all() and want.abs().max() > 1
    assert torch.equal(got.view(torch.int32), want.view(torch.int32))


def test_carry_is_for_bf16_only():
    q = torch.zeros(E, N, 32, dtype=torch.uint8)
    with pytest.raises(AssertionError):
        fm.describe_weights(kinds.W_FP4, _codes(q, True), torch.float16,
                            s=torch.zeros(E, N, 4, dtype=torch.uint8), scale_cols=16,
                            scale_kind=kinds.S_E4M3, nib_span=layout.FP4_SPAN, carry=True)


def test_the_variable_reads_as_documented():
    assert configs.fp4_carry({}) and not configs.fp4_carry({configs.FP4_CARRY_ENV: "0"})
    assert configs.fp4_carry({configs.FP4_CARRY_ENV: " 1 "})
    with pytest.raises(ValueError, match="MOECERT_TRITON_FP4_CARRY"):
        configs.fp4_carry({configs.FP4_CARRY_ENV: "yes"})


@pytest.mark.parametrize(("scheme", "dtype", "dense"), [
    ("nvfp4", "bf16", False), ("mxfp4", "bf16", False),
    ("nvfp4", "bf16", True), ("mxfp4", "bf16", True),
    ("nvfp4", "fp16", False)],
    ids=["nvfp4", "mxfp4", "nvfp4-prefill-decode", "mxfp4-prefill-decode", "nvfp4-fp16"])
def test_the_backend_stores_carried_words_and_gives_the_same_output(scheme, dtype, dense,
                                                                     monkeypatch):
    """Through the backend: the variable read at process time, backend_detail says so, the
    checkpoint's codes come back out unchanged (export, torch fallback), the output equals
    the default path's bit for bit, fused or on the prefill dispatch (DEQUANT_ROWS=0: the
    prefill decode reads carried words); fp16 layers keep the nibble order."""
    from moecert.kernels.triton_moe import backend as tb

    P = MoEProblem(M=5, K=256, N=64, E=3, topk=2, bias=True, dtype=dtype)
    ckpt = synthesize(scheme, P, seed=1)
    if dense:
        monkeypatch.setenv(configs.DEQUANT_ROWS_ENV, "0")
    backend = TritonBackend()
    x, w, ids = make_inputs(P, seed=2)
    monkeypatch.setenv(configs.FP4_LEAN_ENV, "0")  # LEAN is its own flag (on by default)
    outs, codes, stored = {}, {}, {}
    for carry in ("0", "1"):
        monkeypatch.setenv(configs.FP4_CARRY_ENV, carry)
        layer = backend.create_layer(ckpt, P)
        backend.process_weights_after_loading(layer)
        on = carry == "1" and dtype == "bf16"
        assert ("sign-carrying e2m1 words" in backend.describe(layer)) == on
        assert "lean e2m1 step" not in backend.describe(layer)  # LEAN is its own flag
        assert ("from 0 rows per expert" in backend.describe(layer)) == dense
        assert layer.meta["w13_carry"] == on
        codes[carry] = layer.get("w13_w").clone()
        stored[carry] = tb.stored_tensors(layer, "w13")
        outs[carry] = backend.apply(layer, x, w, ids)
    assert torch.equal(codes["0"], codes["1"]) == (dtype != "bf16")
    for name, t in stored["0"].items():
        assert torch.equal(stored["1"][name], t), name
    assert torch.isfinite(outs["0"]).all()
    assert torch.equal(outs["1"], outs["0"])
