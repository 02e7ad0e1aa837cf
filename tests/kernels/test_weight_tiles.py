"""Tiled weights and strided scales in the grouped MoE GEMM (fused_moe `tile_weights`,
describe_weights' `tile`), under the Triton interpreter.

The layout changes where each value lives, never which values meet: a launch on tiled weights
(each tile one run of memory) with the scales stored transposed must give the same bits as
the plain layout, for nibble and byte weights, with zero points, whole and partial K steps,
unrolled and split-K launches, and a tile narrower or wider than the launch's K tile.
"""

from __future__ import annotations

import pytest
import torch
from moecert.kernels.triton_moe.interpret import load_interpreted_kernels

load_interpreted_kernels()  # before the kernel modules are bound below

from _gemm import run_moe_gemm  # noqa: E402
from moecert.kernels.triton_moe import fused_moe as fm  # noqa: E402
from moecert.kernels.triton_moe import kinds, layout  # noqa: E402


@pytest.fixture(autouse=True)
def _interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")


E, N, TOPK = 3, 64, 2


def _weights(kind, K, group, gen):
    """(codes [E, N, stored K], scales [E, N, K / group], zero points or None, sym_zero)."""
    s = torch.rand(E, N, K // group, generator=gen) + 0.5
    if kind == kinds.W_INT4:
        q = torch.randint(0, 256, (E, N, K // 2), dtype=torch.uint8, generator=gen)
        return q, s, None, 8
    if kind == kinds.W_UINT8:
        q = torch.randint(0, 256, (E, N, K), dtype=torch.uint8, generator=gen)
        z = torch.randint(100, 156, (E, N, K // group), dtype=torch.uint8, generator=gen)
        return q, s, z, 0
    q = torch.randint(-127, 128, (E, N, K), dtype=torch.int8, generator=gen)
    return q, s, None, 0


def _run(weights, a, ids, K, config):
    return run_moe_gemm(weights, a, ids, config, E, TOPK)


@pytest.mark.parametrize("split_k", [1, 2])
@pytest.mark.parametrize("unroll", [1, 2])
@pytest.mark.parametrize("K", [192, 96], ids=["whole-steps", "tile-past-K"])
@pytest.mark.parametrize(("kind", "tile"), [
    (kinds.W_INT4, (16, 16)), (kinds.W_INT4, (32, 8)), (kinds.W_INT4, (64, 48)),
    (kinds.W_UINT8, (16, 32)), (kinds.W_INT8, (32, 16)),
], ids=["int4-16x16", "int4-32x8", "int4-64x48", "uint8-zero-16x32", "int8-32x16"])
def test_tiled_weights_and_transposed_scales_give_the_same_bits(kind, tile, K, unroll,
                                                                split_k):
    gen = torch.Generator().manual_seed(K + unroll + 7 * split_k)
    group = 32
    q, s, z, sym = _weights(kind, K, group, gen)
    a = torch.randn(5, K, generator=gen).to(torch.bfloat16)
    ids = torch.stack([torch.randperm(E, generator=gen)[:TOPK] for _ in range(5)]).reshape(-1)
    config = {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 32, "num_warps": 4, "num_stages": 2,
              "K_UNROLL": unroll, "SPLIT_K": split_k}
    plain = fm.describe_weights(kind, q, torch.bfloat16, s=s, zp=z, scale_cols=group,
                                sym_zero=sym)
    s_t = s.transpose(1, 2).contiguous().transpose(1, 2)  # [E, N, C] view, rows side by side
    tiled = fm.describe_weights(kind, layout.tile_weights(q, *tile), torch.bfloat16, s=s_t, zp=z,
                                scale_cols=group, sym_zero=sym)
    assert tiled["N"] == N and tiled["strides"][4] == N  # the scale column stride
    want = _run(plain, a, ids, K, config)
    got = _run(tiled, a, ids, K, config)
    assert torch.isfinite(want).all() and want.abs().max() > 0
    assert torch.equal(got.view(torch.int32), want.view(torch.int32))


def test_tile_weights_places_each_tile_in_one_run():
    q = torch.arange(2 * 8 * 12, dtype=torch.int32).reshape(2, 8, 12)
    t = layout.tile_weights(q, 4, 6)
    assert t.shape == (2, 2, 2, 4, 6) and t.is_contiguous()
    # tile (row block 1, column block 0) of expert 1: rows 4-7, columns 0-5
    assert torch.equal(t[1, 1, 0], q[1, 4:8, 0:6])
    assert torch.equal(layout.untile_weights(t), q)
    with pytest.raises(ValueError, match=r"multiples of the tile \(3, 6\)"):
        layout.tile_weights(q, 3, 6)


# --- the Triton backend stores int4 codes tiled ----------------------------------------------

def _layer(scheme, P, attrs):
    from moecert.kernels.triton_moe.backend import TritonBackend
    from moecert.reference import synthesize

    backend = TritonBackend()
    layer = backend.create_layer(synthesize(scheme, P, seed=1, **attrs), P)
    backend.process_weights_after_loading(layer)
    return backend, layer


@pytest.mark.parametrize(("scheme", "attrs"), [
    ("gptq-int4", {"group_size": 32}), ("awq-int4", {"group_size": 64}),
    ("gptq-int4", {"group_size": 32, "act_order": True}),
], ids=["gptq-g32", "awq-g64-zero", "gptq-actorder"])
def test_backend_tiles_int4_codes_and_computes_the_same_bits(scheme, attrs, monkeypatch):
    from moecert.reference import MoEProblem, make_inputs

    P = MoEProblem(M=5, K=256, N=128, E=3, topk=2)
    backend, layer = _layer(scheme, P, attrs)
    assert layer.get("w13_q").shape == (3, 256 // 16, 128 // 64, 16, 64)  # 256 rows, 128 B
    assert layer.get("w2_q").shape == (3, 256 // 16, 1, 16, 64)  # 256 rows, 64 bytes
    x, w, ids = make_inputs(P, seed=2)
    tiled = backend.apply(layer, x, w, ids)
    monkeypatch.setattr(layout, "weight_tile", lambda kind, q: None)
    _, plain_layer = _layer(scheme, P, attrs)
    assert plain_layer.get("w13_q").dim() == 3
    plain = backend.apply(plain_layer, x, w, ids)
    assert torch.equal(tiled.view(torch.int16), plain.view(torch.int16))
    # read back out of the tiles: the plain layer's export, bit for bit
    for p in ("w13", "w2"):
        a, b = backend.canonical_weights(layer)[p], backend.canonical_weights(plain_layer)[p]
        assert torch.equal(a.codes, b.codes) and torch.equal(a.scales, b.scales)


def test_weight_tile_only_where_it_divides():
    q = torch.zeros(2, 32, 128, dtype=torch.uint8)
    assert layout.weight_tile(kinds.W_INT4, q) == layout.INT4_TILE
    assert layout.weight_tile(kinds.W_INT4, q[:, :24].contiguous()) is None   # 24 rows
    assert layout.weight_tile(kinds.W_INT4, q[:, :, :96].contiguous()) is None  # 96 bytes
    assert layout.weight_tile(kinds.W_INT8, q.view(torch.int8)) is None


# --- int4 codes in four planes per 128 columns (plane_nibbles) -----------------------------------

def test_plane_nibbles_puts_column_j_plus_32p_in_nibble_p_of_word_j():
    gen = torch.Generator().manual_seed(5)
    q = torch.randint(0, 256, (2, 3, 128), dtype=torch.uint8, generator=gen)
    cols = torch.stack([q & 0xF, q >> 4], dim=-1).flatten(-2)  # [2, 3, 256] one per column
    p = layout.plane_nibbles(q, 128)
    words = p[..., 0::2].to(torch.int32) | (p[..., 1::2].to(torch.int32) << 8)  # little-endian
    for span in (0, 1):
        for j in (0, 17, 31):
            word = words[..., span * 32 + j]
            for plane in range(4):
                assert torch.equal((word >> (4 * plane)) & 0xF,
                                   cols[..., span * 128 + plane * 32 + j].to(torch.int32))
    assert torch.equal(layout.unplane_nibbles(p, 128), q)


@pytest.mark.parametrize("swap", [False, True], ids=["plain", "swap-ab"])
@pytest.mark.parametrize(("unroll", "split_k"), [(1, 1), (2, 1), (1, 2)])
@pytest.mark.parametrize("zero", [False, True], ids=["sym", "zero-points"])
def test_nibble_planes_compute_the_adjacent_layouts_values(swap, unroll, split_k, zero):
    """The same weights stored in planes and tiled: the same products, summed per nibble
    plane in another order (each plane's dot, then the four planes), so equal up to fp32
    reassociation; K = 384 (three spans), a row count off the tile."""
    gen = torch.Generator().manual_seed(11 + unroll + 3 * split_k + 5 * zero)
    K = 384
    q = torch.randint(0, 256, (E, N, K // 2), dtype=torch.uint8, generator=gen)
    s = torch.rand(E, N, K // 128, generator=gen) + 0.5
    z = (torch.randint(3, 13, (E, N, K // 128), dtype=torch.uint8, generator=gen)
         if zero else None)
    a = torch.randn(5, K, generator=gen).to(torch.bfloat16)
    ids = torch.stack([torch.randperm(E, generator=gen)[:TOPK] for _ in range(5)]).reshape(-1)
    config = {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 128, "num_warps": 4, "num_stages": 2,
              "K_UNROLL": unroll, "SPLIT_K": split_k, "SWAP_AB": swap}
    plain = fm.describe_weights(kinds.W_INT4, q, torch.bfloat16, s=s, zp=z, scale_cols=128,
                                sym_zero=8)
    tiled = layout.tile_weights(layout.plane_nibbles(q, 128), 16, 64)
    planes = fm.describe_weights(kinds.W_INT4, tiled,
                                 torch.bfloat16, s=s, zp=z, scale_cols=128, sym_zero=8,
                                 nib_span=128)
    want = _run(plain, a, ids, K, config)
    got = _run(planes, a, ids, K, {**config, "BLOCK_K": 64})  # the span sets the tile
    assert want.abs().max() > 1
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-4)


def test_nibble_planes_need_whole_spans_in_one_scale_group():
    q = torch.zeros(2, 32, 64, dtype=torch.uint8)  # K = 128
    s = torch.ones(2, 32, 2)
    with pytest.raises(ValueError, match="nibble planes over 128 columns"):
        fm.describe_weights(kinds.W_INT4, q, torch.bfloat16, s=s, scale_cols=64, sym_zero=8,
                            nib_span=128)
    assert layout.nib_span_fits(kinds.W_INT4, 256, 128, act_order=False)
    assert not layout.nib_span_fits(kinds.W_INT4, 192, 64, act_order=False)
    assert not layout.nib_span_fits(kinds.W_INT4, 256, 128, act_order=True)
    assert not layout.nib_span_fits(kinds.W_INT8, 256, 128, act_order=False)


def test_forced_nib_span_reads_the_variable():
    from moecert.kernels.triton_moe import configs

    assert configs.forced_nib_span({}) is None
    assert configs.forced_nib_span({configs.NIB_SPAN_ENV: "128"}) == 128
    assert configs.forced_nib_span({configs.NIB_SPAN_ENV: "0"}) == 0
    for bad in ("1", "96", "x"):
        with pytest.raises(ValueError, match=rf"MOECERT_TRITON_NIB_SPAN='{bad}'"):
            configs.forced_nib_span({configs.NIB_SPAN_ENV: bad})


@pytest.mark.parametrize(("scheme", "attrs"), [
    ("gptq-int4", {"group_size": 128}), ("awq-int4", {"group_size": 128}),
    ("w4a8-int8", {"group_size": 128}), ("gptq-int4", {"group_size": 64}),
], ids=["gptq-g128", "awq-g128-zero", "w4a8-g128", "gptq-g64-stays-adjacent"])
def test_forced_nib_span_stores_planes_that_compute_the_reference(scheme, attrs,
                                                                 monkeypatch):
    """The harness's path with MOECERT_TRITON_NIB_SPAN=128: the whole layer (a bias, the
    router weight) against the float64 reference, the triton backend tests' bound (bf16
    unit roundoff); group 64 cannot be stored in planes over 128 columns and keeps its
    order."""
    from moecert.kernels.triton_moe import configs
    from moecert.reference import MoEProblem, make_inputs, moe, synthesize

    monkeypatch.setenv(configs.NIB_SPAN_ENV, "128")
    P = MoEProblem(M=3, K=256, N=128, E=3, topk=2, bias=True)
    backend, layer = _layer(scheme, P, attrs)
    want_span = 128 if attrs["group_size"] == 128 else 0
    assert (layer.meta["w13_nib_span"], layer.meta["w2_nib_span"]) == (want_span, want_span)
    x, w, ids = make_inputs(P, seed=2)
    out = backend.apply(layer, x, w, ids)
    ref = moe(synthesize(scheme, P, seed=1, **attrs), x, w, ids, P)  # _layer's checkpoint
    err = ((out.double() - ref).norm() / ref.norm()).item()
    assert err <= 2.0**-8, f"relative error {err:.3e}"


def test_planes_in_chunks_are_the_planes_at_once(monkeypatch):
    """plane_nibbles runs over chunks of rows (issue 43: temporaries four times the codes);
    a chunk that splits an expert's rows gives the bytes of one pass, and they read back."""
    q = torch.randint(0, 256, (3, 5, 64), dtype=torch.int32).to(torch.uint8)
    whole = layout.plane_nibbles(q, 32)
    monkeypatch.setattr(layout, "PLANE_CHUNK_BYTES", 2 * 64)  # two rows a chunk
    chunked = layout.plane_nibbles(q, 32)
    assert chunked.shape == q.shape and torch.equal(chunked, whole)
    assert torch.equal(layout.unplane_nibbles(chunked, 32), q)
