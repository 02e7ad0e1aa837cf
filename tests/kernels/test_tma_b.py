"""The weight tile by Hopper's TMA (gemm_kernel's TMA_B, issue 44 round twenty), under the
Triton interpreter: a tensor descriptor of the weights [E, runs, N / runs, K] and one block
copy a K step give the pointer tile's bits, at every place a tile can lie (a fused
activation's gate / up halves in one copy, rows past N or columns past K, split-K, an
expert's last rows on a smaller tile, GROUP_M's launch order), and a descriptor that does not
match the kernel's runs is seen. Compiled on an sm90 GPU: test_tma_b_cuda.py."""

from __future__ import annotations

import pytest
import torch
from _tma import BOUNDS, LAYERS, gemm, outputs_by_tma, weights16
from moecert.kernels.triton_moe.interpret import load_interpreted_kernels

load_interpreted_kernels()  # before the kernel modules are bound below

from moecert.kernels.triton_moe import configs, fused_moe, kinds  # noqa: E402
from moecert.kernels.triton_moe.backend import TritonBackend  # noqa: E402
from moecert.reference import MoEProblem, make_inputs, moe, synthesize  # noqa: E402

pytestmark = pytest.mark.usefixtures("interpreted")

TILES = {
    "plain": {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 32},
    "split-k": {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 32, "SPLIT_K": 2},
    "tail": {"BLOCK_M": 64, "BLOCK_N": 32, "BLOCK_K": 32, "TAIL_M": 16},
    "wide": {"BLOCK_M": 32, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 4, "K_UNROLL": 2},
}


# N = 40 intermediate columns and K = 96: no tile width divides the halves or K (rows past
# N, columns past K: the copy's zeros where the pointer tile clamps)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("pairs", [None, *configs.FUSED_ACT_ORDERS])
@pytest.mark.parametrize("tile", TILES)
def test_the_copied_tile_gives_the_pointer_tiles_bits(tile, pairs, dtype, monkeypatch,
                                                      spy_launches):
    E, K, N, M, topk = 3, 96, 40, 37, 2
    activation = None if pairs is None else "silu"
    rows = 2 * N
    weights = weights16(E, rows, K, dtype, seed=5)
    g = torch.Generator().manual_seed(6)
    a = torch.randn(M, K, generator=g).to(torch.bfloat16)
    ids = torch.randint(0, E, (M * topk,), generator=g, dtype=torch.int32)
    config = configs.complete({**TILES[tile], "num_warps": 4, "num_stages": 2})
    out_cols = rows if activation is None else N
    outs, seen = outputs_by_tma(
        lambda: gemm(weights, a, ids, config, activation, out_cols, pairs or "halves"),
        monkeypatch, spy_launches("TMA_B"))
    assert seen == {"1": {{None: 1, "halves": 2, "adjacent": 0}[pairs]}, "0": {0}}
    assert torch.isfinite(outs["1"]).all()
    assert torch.equal(outs["1"], outs["0"])


def test_a_descriptor_of_the_wrong_runs_is_seen(monkeypatch, spy_launches):
    """The comparison above can fail: the halves' tile copied as one run of BLOCK_N rows
    from the gate rows' first (gate rows of the next tile in place of up rows) is not the
    pointer tile's output."""
    E, K, N, M = 2, 64, 64, 9
    weights = weights16(E, 2 * N, K, torch.bfloat16, seed=7)
    g = torch.Generator().manual_seed(8)
    a = torch.randn(M, K, generator=g).to(torch.bfloat16)
    ids = torch.randint(0, E, (2 * M,), generator=g, dtype=torch.int32)
    config = configs.complete({**TILES["plain"], "num_warps": 4, "num_stages": 2})
    made = fused_moe.tma_weights
    monkeypatch.setattr(fused_moe, "tma_weights",
                        lambda q, runs, block_n, bk: made(q, 1, block_n, bk))
    outs, seen = outputs_by_tma(lambda: gemm(weights, a, ids, config, "silu", N),
                                monkeypatch, spy_launches("TMA_B"))
    assert seen["1"] == {2}
    assert torch.isfinite(outs["1"]).all() and not torch.equal(outs["1"], outs["0"])


def test_tma_applies_to_untiled_unswapped_tiles_of_one_element_a_column(monkeypatch):
    weights = weights16(2, 64, 64, torch.bfloat16, seed=9)
    cpu = torch.device("cpu")
    plain = configs.complete({**TILES["plain"], "num_warps": 4, "num_stages": 2})
    run = fused_moe.tma_b_run
    monkeypatch.delenv(configs.TMA_B_ENV, raising=False)
    assert run(weights, plain, 32, "silu", "halves", cpu) == 0  # not sm90: off unless forced
    monkeypatch.setenv(configs.TMA_B_ENV, "1")
    assert run(weights, plain, 32, "silu", "halves", cpu) == 2
    assert run(weights, plain, 32, "silu", "adjacent", cpu) == 0  # no block of rows
    assert run(weights, plain, 32, "relu2", "halves", cpu) == 1  # no gate
    assert run(weights, plain, 32, None, "halves", cpu) == 1
    nibbles = {**weights, "kind": kinds.W_INT4}
    assert run(nibbles, plain, 32, None, "halves", cpu) == 0  # two columns a byte
    assert run(weights, {**plain, "SWAP_AB": True}, 32, None, "halves", cpu) == 0
    assert run(weights, {**plain, "BLOCK_N": 1024}, 32, "silu", "halves", cpu) == 0
    odd = weights16(2, 64, 60, torch.bfloat16, seed=9)  # 120-byte rows: not 16-byte aligned
    assert run(odd, plain, 32, None, "halves", cpu) == 0
    # a copy addresses K's elements at stride 1: weights stored with K outermost stay on
    # the per-thread loads (which take any strides)
    kn = {**weights, "q": weights["q"].transpose(1, 2).contiguous().transpose(1, 2)}
    assert run(kn, plain, 32, None, "halves", cpu) == 0
    monkeypatch.setenv(configs.TMA_B_ENV, "0")
    assert run(weights, plain, 32, "silu", "halves", cpu) == 0
    monkeypatch.setenv(configs.TMA_B_ENV, "yes")
    with pytest.raises(ValueError, match=configs.TMA_B_ENV):
        run(weights, plain, 32, None, "halves", cpu)


@pytest.mark.parametrize(("scheme", "attrs"), LAYERS)
def test_a_layer_on_the_copied_tile_computes_the_reference(scheme, attrs, monkeypatch,
                                                           spy_launches):
    """Through the backend (its own tiles at M = 24): the layer with TMA forced gives the
    per-thread loads' output, and the float64 reference's within the scheme's bound
    (BOUNDS; measured here 1.6e-3 for both)."""
    P = MoEProblem(M=24, K=128, N=192, E=4, topk=2, bias=True)
    backend = TritonBackend()
    ckpt = synthesize(scheme, P, seed=1, **attrs)
    layer = backend.create_layer(ckpt, P)
    backend.process_weights_after_loading(layer)
    x, w, ids = make_inputs(P, seed=2)
    outs, seen = outputs_by_tma(lambda: backend.apply(layer, x, w, ids), monkeypatch,
                                spy_launches("TMA_B"))
    assert seen["1"] - {0} and seen["0"] == {0}
    assert torch.equal(outs["1"], outs["0"])
    ref = moe(ckpt, x, w, ids, P)
    err = ((outs["1"].double() - ref).norm() / ref.norm()).item()
    assert err < BOUNDS[scheme], err
