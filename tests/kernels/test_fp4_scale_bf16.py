"""Issue 44's fourth FP4 decode candidate, SCALE_BF16 (MOECERT_TRITON_FP4_SCALE_BF16; the default
in bf16 layers, MXFP4's since 2026-11-30, NVFP4's since 2026-12-01): the block scales decoded
into bf16 once at load (layout.scale_bf16: NVFP4's e4m3 codes in bf16 layers, times LEAN's 2^119
where LEAN folds; MXFP4's E8M0 codes in any layer), so the K loop loads the value its multiply
takes. Every code must be exact in bf16 (checked here against the format facts' values and
torch's own e4m3 conversion, subnormals and the E8M0 extremes included), the layout must invert
to the checkpoint's codes, and under the interpreter the GEMM and the prefill decode must give
the current path's output bit for bit (words of scale bytes, with and without CARRY and LEAN,
every finite code in the scales). The compiled path: test_fp4_scale_bf16_cuda.py."""

from __future__ import annotations

import math
import sys

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
ENVS = (configs.FP4_SCALE_BF16_ENV, configs.FP4_CARRY_ENV, configs.FP4_LEAN_ENV,
        configs.FP4_SCALE_WORDS_ENV, configs.DEQUANT_ROWS_ENV)
FOLD = 126 - gemm_kernel.LEAN_SHIFT  # LEAN's fold of NVFP4's scales in bf16: 2^119


@pytest.fixture(autouse=True)
def _interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    for name in ENVS:
        monkeypatch.delenv(name, raising=False)
    assert "moecert.kernels.triton_moe.fused_moe" in sys.modules


def _bf16_as_float(bits: int) -> float:
    """A bf16 bit pattern's value, exactly (bf16 is fp32's top half)."""
    return torch.tensor([bits << 16], dtype=torch.int64).to(torch.int32).view(
        torch.float32).double().item()


# --- every code exact ------------------------------------------------------------------------

def _e4m3_values() -> list[float]:
    """torch's own decode of every e4m3fn byte (independent of the format facts)."""
    return torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).double().tolist()


@pytest.mark.parametrize(("element", "fold"), [("e4m3", 0), ("e4m3", FOLD), ("e8m0", 0)])
def test_every_code_is_exact_in_bf16(element, fold):
    """Each of the 256 codes' bf16 pattern is its value times 2^fold exactly (sign of zero
    included); NaN codes are NaN of the code's sign. The claim's edges are in the 256: e4m3's
    subnormals 1..7 * 2^-9 and 448 (times 2^119: 1.75 * 2^127, bf16's top binade), E8M0's
    2^-127 (byte 0, a bf16 subnormal) and 2^127 (byte 254)."""
    table = (layout.scale_bf16_table(element, fold).to(torch.int64) & 0xFFFF).tolist()
    if element == "e4m3":
        values = _e4m3_values()
        nan_codes, signed = {0x7F, 0xFF}, True
    else:
        values = [math.nan if c == 255 else math.ldexp(1.0, c - 127) for c in range(256)]
        nan_codes, signed = {255}, False
    seen_subnormal = False
    for code, (bits, value) in enumerate(zip(table, values, strict=True)):
        got = _bf16_as_float(bits)
        if code in nan_codes:
            assert math.isnan(got) and (bits >> 15) == (code >> 7 if signed else 0), code
            continue
        want = math.ldexp(value, fold)
        assert got == want and math.copysign(1, got) == math.copysign(1, want), hex(code)
        seen_subnormal |= 0 < (bits & 0x7FFF) < 0x80  # a bf16 subnormal (E8M0's 2^-127)
    assert seen_subnormal == (element == "e8m0")
    assert len(set(table)) == 256  # one pattern per code: export gives each back


def test_e8m0s_byte_is_bf16s_exponent_field():
    """Why every E8M0 code fits: bias 127 both; byte 0 is 2^-127, bf16's subnormal 0x0040."""
    table = (layout.scale_bf16_table("e8m0").to(torch.int64) & 0xFFFF).tolist()
    assert table[1:255] == [b << 7 for b in range(1, 255)]
    assert (table[0], table[255]) == (0x0040, 0x7FC0)


def test_a_fold_past_bf16s_range_is_refused():
    """448 * 2^120 is 1.75 * 2^128: no bf16 holds it, so no table is made (the layer would
    keep the old path)."""
    with pytest.raises(ValueError, match=r"e4m3 code 0x7[8-E] .* not exact in bf16"):
        layout.scale_bf16_table("e4m3", FOLD + 1)


@pytest.mark.parametrize(("element", "cols", "fold"), [("e4m3", 16, FOLD), ("e4m3", 16, 0),
                                                        ("e8m0", 32, 0)])
def test_the_layout_holds_each_blocks_value_and_gives_the_codes_back(element, cols, fold):
    s = torch.arange(256, dtype=torch.uint8).repeat(2 * 3 * 4)[: 2 * 3 * (1024 // cols)]
    s = s[torch.randperm(len(s), generator=torch.Generator().manual_seed(1))].view(2, 3, -1)
    packed = layout.scale_bf16(s, cols, element, fold)
    per_span = layout.FP4_SPAN // cols
    assert packed.dtype == torch.bfloat16 and packed.shape == (2, 3, 1024 // 64, per_span)
    assert packed.stride() == (3 * 1024 // cols, per_span, 3 * per_span, 1)  # spans outer
    table = layout.scale_bf16_table(element, fold)
    assert torch.equal(packed.reshape(2, 3, -1).view(torch.int16), table[s.long()])
    assert torch.equal(layout.unscale_bf16(packed, cols, element, fold), s)
    bad = packed.clone()
    bad.view(torch.int16)[0, 0, 0, 0] = 0x3F81  # 1.0078125: no code's value
    with pytest.raises(ValueError, match=r"no e\w+ code"):
        layout.unscale_bf16(bad, cols, element, fold)


def test_the_fold_test_reads_bf16_scales_as_it_reads_bytes():
    """fused_moe.e8m0_folds on bf16-decoded scales: the same answer as on their bytes, at
    every boundary (2 and 252 fold, 1 and 253 do not)."""
    for lo, hi in ((2, 252), (1, 252), (2, 253), (0, 255), (120, 134)):
        s = torch.tensor([[[lo, hi]]], dtype=torch.uint8)
        assert fm.e8m0_folds(layout.scale_bf16(s, 32, "e8m0")) == fm.e8m0_folds(s), (lo, hi)
    assert fm.e8m0_folds(torch.tensor([[[2, 252]]], dtype=torch.uint8))


# --- the GEMM, interpreted ---------------------------------------------------------------------

def _codes(q: torch.Tensor, carry: bool) -> torch.Tensor:
    planes = layout.plane_nibbles(q, layout.FP4_SPAN)
    if carry:
        planes = layout.carry_bits(planes)
    return layout.tile_weights(planes, *layout.FP4_TILE)


def _scales(scale: str, K: int, gen) -> tuple[int, int, str, torch.Tensor]:
    """(kind, block columns, element, codes [E, N, K / cols]): every finite code of the
    element appears (shuffled over the experts and rows), tops up with random ones."""
    if scale.startswith("mxfp4"):
        kind, cols, element = kinds.S_E8M0, 32, "e8m0"
        codes = torch.arange(2, 253) if scale == "mxfp4-folded" else torch.arange(0, 255)
    else:  # e4m3: every finite byte, both signs, zeros and subnormals included
        kind, cols, element = kinds.S_E4M3, 16, "e4m3"
        codes = torch.tensor([c for c in range(256) if c & 0x7F != 0x7F])
    n = E * N * K // cols
    codes = codes.repeat(n // len(codes) + 1)[:n]
    if len(codes) < n or n < 254:
        raise AssertionError("too few scales for every code")
    s = codes[torch.randperm(n, generator=gen)].to(torch.uint8).view(E, N, K // cols)
    return kind, cols, element, s


def _described(q, s, kind, cols, element, carry, bf16, dtype=torch.bfloat16):
    fold = fm.lean_scale_fold(kind, dtype, configs.fp4_lean()) if bf16 else 0
    packed = (layout.scale_bf16(s, cols, element, fold) if bf16
              else layout.scale_words(s, cols))
    return fm.describe_weights(kinds.W_FP4, _codes(q, carry), dtype, s=packed, scale_cols=cols,
                               scale_kind=kind, nib_span=layout.FP4_SPAN, carry=carry,
                               scale_fold=fold)


@pytest.mark.parametrize(("scale", "carry", "lean"), [
    ("nvfp4", True, "1"), ("nvfp4", True, "0"), ("nvfp4", False, "1"), ("nvfp4", False, "0"),
    ("mxfp4-folded", True, "1"), ("mxfp4-folded", False, "0"), ("mxfp4-pairs", True, "1"),
    ("mxfp4-pairs", False, "0")],
    ids=["nvfp4-carry-lean", "nvfp4-carry", "nvfp4-lean", "nvfp4-words", "mxfp4-folded-carry-lean",
         "mxfp4-folded", "mxfp4-pairs-carry-lean", "mxfp4-pairs"])
@pytest.mark.parametrize(("K", "unroll", "split_k", "swap"), [
    (256, 1, 1, False), (192, 2, 1, False), (256, 1, 2, True)],
    ids=["even", "unrolled-past-K", "split-swapped"])
def test_bf16_scales_give_the_current_paths_bits(scale, carry, lean, K, unroll, split_k, swap,
                                                 monkeypatch):
    """The candidate against scale words (the default layout) with the same CARRY and LEAN:
    the interpreted GEMM's fp32 output bit for bit, every finite code in the scales (MXFP4:
    the E8M0 extremes too, whose products leave fp32's range: inf and NaN alike)."""
    monkeypatch.setenv(configs.FP4_LEAN_ENV, lean)
    gen = torch.Generator().manual_seed(K + unroll + 5 * split_k)
    q = torch.randint(0, 256, (E, N, K // 2), dtype=torch.uint8, generator=gen)
    kind, cols, element, s = _scales(scale, K, gen)
    now = _described(q, s, kind, cols, element, carry, False)
    new = _described(q, s, kind, cols, element, carry, True)
    assert new["constexprs"]["SCALE_BF16"] and not new["constexprs"]["SCALE_WORDS"]
    assert now["constexprs"]["SCALE_WORDS"] and not now["constexprs"]["SCALE_BF16"]
    assert new["e8m0_fold"] == now["e8m0_fold"] == (scale == "mxfp4-folded")
    assert new["scale_fold"] == (FOLD if scale == "nvfp4" and lean == "1" else 0)
    a = torch.randn(7, K, generator=gen).to(torch.bfloat16)
    ids = torch.stack([torch.randperm(E, generator=gen)[:TOPK] for _ in range(7)]).reshape(-1)
    config = {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 64, "num_warps": 4, "num_stages": 2,
              "K_UNROLL": unroll, "SPLIT_K": split_k, "SWAP_AB": swap}
    want = run_moe_gemm(now, a, ids, config, E, TOPK)
    got = run_moe_gemm(new, a, ids, config, E, TOPK)
    finite = torch.isfinite(want)
    assert want[finite].abs().max() > 1 and finite.all() == (scale == "nvfp4")
    assert torch.equal(got.view(torch.int32), want.view(torch.int32))


def test_mxfp4_in_fp16_reads_bf16_scales_on_its_pair_sums():
    """fp16 activations: MXFP4's E8M0 scales multiply fp32 pair sums (no fold into fp16), so
    the bf16 values serve there too, bit for bit."""
    K = 256
    gen = torch.Generator().manual_seed(11)
    q = torch.randint(0, 256, (E, N, K // 2), dtype=torch.uint8, generator=gen)
    kind, cols, element, s = _scales("mxfp4-pairs", K, gen)  # every code but NaN's
    now = _described(q, s, kind, cols, element, False, False, torch.float16)
    new = _described(q, s, kind, cols, element, False, True, torch.float16)
    assert new["constexprs"]["SCALE_BF16"] and not new["e8m0_fold"]
    a = torch.randn(7, K, generator=gen).to(torch.float16)
    ids = torch.stack([torch.randperm(E, generator=gen)[:TOPK] for _ in range(7)]).reshape(-1)
    config = {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 64, "num_warps": 4, "num_stages": 2}
    want = run_moe_gemm(now, a, ids, config, E, TOPK)
    got = run_moe_gemm(new, a, ids, config, E, TOPK)
    assert want[torch.isfinite(want)].abs().max() > 1
    assert torch.equal(got.view(torch.int32), want.view(torch.int32))


def test_scales_stored_for_one_lean_are_refused_under_the_other(monkeypatch):
    """The kernel reads NVFP4's stored bf16 as folded exactly when LEAN folds: a description
    built after LEAN changed is refused, not computed 2^119 off."""
    K = 128
    q = torch.zeros(E, N, K // 2, dtype=torch.uint8)
    s = torch.full((E, N, K // 16), 0x38, dtype=torch.uint8)
    monkeypatch.setenv(configs.FP4_LEAN_ENV, "1")
    packed = layout.scale_bf16(s, 16, "e4m3", FOLD)
    monkeypatch.setenv(configs.FP4_LEAN_ENV, "0")
    with pytest.raises(ValueError, match="stored times 2\\^119, but LEAN is off"):
        fm.describe_weights(kinds.W_FP4, _codes(q, True), torch.bfloat16, s=packed,
                            scale_cols=16, scale_kind=kinds.S_E4M3, nib_span=layout.FP4_SPAN,
                            carry=True, scale_fold=FOLD)


def test_the_variable_reads_as_documented():
    read = configs.fp4_scale_bf16
    assert read({}) is None and read({configs.FP4_SCALE_BF16_ENV: ""}) is None
    assert read({configs.FP4_SCALE_BF16_ENV: "0"}) is False
    assert read({configs.FP4_SCALE_BF16_ENV: " 1 "})
    with pytest.raises(ValueError, match="MOECERT_TRITON_FP4_SCALE_BF16='yes': expected 1"):
        read({configs.FP4_SCALE_BF16_ENV: "yes"})


# --- through the backend -----------------------------------------------------------------------

@pytest.mark.parametrize(("scheme", "dtype", "decoded"), [
    ("mxfp4", "bf16", True), ("mxfp4", "fp16", False), ("nvfp4", "bf16", True),
    ("nvfp4", "fp16", False)])
def test_the_default_decodes_fp4_scales_at_load_in_bf16_layers_only(scheme, dtype, decoded,
                                                                     monkeypatch):
    """Unset, the variable means the timed choice (configs' docstring): both formats' scales
    decoded into bf16 at load in bf16 layers, fp16 layers' kept as bytes."""
    from moecert.kernels.triton_moe.backend import TritonBackend
    from moecert.reference import MoEProblem, synthesize

    monkeypatch.delenv(configs.FP4_SCALE_BF16_ENV, raising=False)
    P = MoEProblem(M=3, K=256, N=64, E=3, topk=2, dtype=dtype)
    backend = TritonBackend()
    layer = backend.create_layer(synthesize(scheme, P, seed=1), P)
    backend.process_weights_after_loading(layer)
    assert (layer.get("w13_s").dtype == torch.bfloat16) == decoded
    assert ("pre-decoded to bf16" in backend.describe(layer)) == decoded



@pytest.mark.parametrize(("scheme", "dtype", "dense", "lean"), [
    ("nvfp4", "bf16", False, "1"), ("nvfp4", "bf16", False, "0"), ("mxfp4", "bf16", False, "1"),
    ("nvfp4", "bf16", True, "1"), ("mxfp4", "bf16", True, "1"), ("mxfp4", "fp16", False, "1"),
    ("nvfp4", "fp16", False, "1")],
    ids=["nvfp4", "nvfp4-lean-off", "mxfp4", "nvfp4-prefill-decode", "mxfp4-prefill-decode",
         "mxfp4-fp16", "nvfp4-fp16-keeps-words"])
def test_the_backend_stores_bf16_scales_and_gives_the_same_output(scheme, dtype, dense, lean,
                                                                   monkeypatch):
    """The variable read at process time (CARRY on, LEAN as given), backend_detail says so,
    export gives the checkpoint's codes back unchanged (and the scales the torch fallback and
    the tuner's bound read: stored_tensors), the output equals the default path's bit
    for bit, fused or on the prefill dispatch (DEQUANT_ROWS=0: the prefill decode reads the
    bf16 scales); NVFP4 in fp16 layers keeps the scale words."""
    from moecert.kernels.triton_moe import backend as tb

    P = MoEProblem(M=5, K=256, N=64, E=3, topk=2, bias=True, dtype=dtype)
    ckpt = synthesize(scheme, P, seed=1)
    if dense:
        monkeypatch.setenv(configs.DEQUANT_ROWS_ENV, "0")
    monkeypatch.setenv(configs.FP4_LEAN_ENV, lean)
    backend = TritonBackend()
    x, w, ids = make_inputs(P, seed=2)
    on = not (scheme == "nvfp4" and dtype == "fp16")
    outs, exported = {}, {}
    for flag in ("0", "1"):
        monkeypatch.setenv(configs.FP4_SCALE_BF16_ENV, flag)
        layer = backend.create_layer(ckpt, P)
        backend.process_weights_after_loading(layer)
        detail = backend.describe(layer)
        taken = flag == "1" and on
        assert ("block scales pre-decoded to bf16 at load" in detail) == taken
        assert ("plane scales in words" in detail) == (not taken)
        assert ("from 0 rows per expert" in detail) == dense
        assert (layer.get("w13_s").dtype == torch.bfloat16) == taken
        if taken:
            want_fold = FOLD if scheme == "nvfp4" and lean == "1" else 0
            assert layer.meta["w13_scale_fold"] == layer.meta["w2_scale_fold"] == want_fold
        for p in ("w13", "w2"):
            name = f"{p}_weight_scale"
            stored = tb.stored_tensors(layer, p)[f"{p}_s"]
            assert stored.dtype == ckpt.tensors[name].dtype
            assert torch.equal(stored.view(torch.uint8), ckpt.tensors[name].view(torch.uint8))
        exported[flag] = backend.canonical_weights(layer)
        outs[flag] = backend.apply(layer, x, w, ids)
    for p, lin in exported["0"].items():  # the canonical form: the same tensors, bit for bit
        for field in ("codes", "scales", "zeros", "g_idx", "global_scale"):
            a, b = getattr(lin, field), getattr(exported["1"][p], field)
            assert (a is None) == (b is None), (p, field)
            if a is not None:
                assert a.dtype == b.dtype and torch.equal(_bits(a), _bits(b)), (p, field)
    assert torch.isfinite(outs["0"]).all()
    assert torch.equal(outs["1"], outs["0"])


def _bits(t: torch.Tensor) -> torch.Tensor:
    """A tensor's bytes (NaN-safe equality)."""
    return t.contiguous().view(-1).view(torch.uint8)


def test_the_layout_looks_codes_up_a_chunk_at_a_time(monkeypatch):
    """layout._lookup's chunks (an int64 index of a whole DeepSeek-V3 w13 would be 3.8 GB)
    give what one look-up gives, both ways."""
    gen = torch.Generator().manual_seed(5)
    s = torch.randint(0, 256, (3, 5, 8), dtype=torch.uint8, generator=gen)
    whole = layout.scale_bf16(s, 16, "e4m3", FOLD)
    monkeypatch.setattr(layout, "PLANE_CHUNK_BYTES", 8 * 7)  # seven scales a chunk
    assert torch.equal(layout.scale_bf16(s, 16, "e4m3", FOLD).view(torch.int16),
                       whole.view(torch.int16))
    assert torch.equal(layout.unscale_bf16(whole, 16, "e4m3", FOLD), s)
