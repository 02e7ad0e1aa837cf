"""Shared by test_zero_sums.py (the interpreter) and test_zero_sums_cuda.py (compiled): an
AWQ layer's two GEMMs with the zero points from the activation sums (gemm_kernel's ZERO_SUMS)
and inside the decode (MOECERT_TRITON_ZERO_SUMS=0), on the same inputs. The kernel modules are
imported inside the functions: each test module binds its own (interpreted or compiled)."""

from __future__ import annotations

import torch
from _gemm import record_launches

# tile shapes the tuned files run AWQ in at decode sizes (16 x 128 swapped, split-K, 32 rows)
TILES = {
    "decode": {"BLOCK_M": 16, "BLOCK_N": 128, "BLOCK_K": 128, "num_warps": 4, "num_stages": 4,
               "FAST_I4": True},
    "swapped": {"BLOCK_M": 16, "BLOCK_N": 128, "BLOCK_K": 128, "num_warps": 4,
                "num_stages": 3, "SWAP_AB": True, "FAST_I4": True},
    "split": {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 128, "num_warps": 4, "num_stages": 3,
              "SPLIT_K": 4, "SWAP_AB": True, "FAST_I4": True},
    "rows32": {"BLOCK_M": 32, "BLOCK_N": 64, "BLOCK_K": 128, "num_warps": 4,
               "num_stages": 3, "SWAP_AB": True, "FAST_I4": True},
}


def stage(monkeypatch, P, device: str):
    """The layer's two GEMMs on fixed inputs (tune_stages.LayerStage), int4 codes in nibble
    planes, its scale words carrying the zero points."""
    from moecert.kernels.triton_moe import configs, tune_stages
    from moecert.kernels.triton_moe.backend import TritonBackend
    from moecert.reference import make_inputs, synthesize

    monkeypatch.setenv(configs.NIB_SPAN_ENV, "128")
    backend = TritonBackend()
    layer = backend.create_layer(synthesize("awq-int4", P, seed=3, group_size=128).to(device),
                                 P)
    backend.process_weights_after_loading(layer)
    x, w, ids = (t.to(device) for t in make_inputs(P, seed=4))
    st = tune_stages.LayerStage(layer, x, w, ids)
    assert all(st.weights(g, {})["zero_words"] is not None for g in (1, 2))
    return st


def both(monkeypatch, P, tile: str, device: str) -> dict:
    """{gemm: (ZERO_SUMS' output, the decode's output, the tuner's reorder bound)}: the tile
    with its config's ZERO_SUMS on and off; each launch's ZERO_SUMS spied, so a run that took
    neither path fails here."""
    from moecert.kernels.triton_moe import tune

    seen = record_launches(monkeypatch, lambda args, kw: kw["ZERO_SUMS"])
    st = stage(monkeypatch, P, device)
    out = {}
    for gemm in (1, 2):
        got = {}
        for sums in (True, False):
            seen.clear()
            config = {**st.defaults[gemm - 1], **TILES[tile], "ZERO_SUMS": sums}
            got[sums] = st.run(gemm, config).clone()
            assert seen and set(seen) == {sums}, seen
        bound = tune.reorder_bound(got[False], st.magnitudes(gemm), st.shape(gemm)[1])
        out[gemm] = (got[True], got[False], bound)
    return out


def assert_agree(monkeypatch, P, tile: str, device: str) -> None:
    """Both GEMMs' sums path within the reorder bound of the decode path, non-trivially."""
    from moecert.kernels.triton_moe import tune

    for gemm, (sums, decode, bound) in both(monkeypatch, P, tile, device).items():
        assert torch.isfinite(sums).all() and sums.abs().max() > 0
        assert tune.disagreement(sums, decode, bound) is None, (gemm, tile)


def assert_doubled_sums_caught(monkeypatch, P, tile: str, device: str) -> None:
    """The comparison of `assert_agree` can fail: each row's activation sums doubled
    (`fused_moe.activation_sums` planted) move both GEMMs past the bound."""
    from moecert.kernels.triton_moe import fused_moe, tune

    real = fused_moe.activation_sums
    monkeypatch.setattr(fused_moe, "activation_sums", lambda a, block_k: 2 * real(a, block_k))
    for gemm, (sums, decode, bound) in both(monkeypatch, P, tile, device).items():
        assert tune.disagreement(sums, decode, bound) is not None, gemm
