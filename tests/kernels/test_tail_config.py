"""TAIL_M on the host (gemm_kernel's TAIL_M, an expert's last row block on a smaller tile): the
launch's value from the entry, the default and MOECERT_TRITON_TAIL_M, fitted to the kernel's
levels; the tuned files' field; the tuner's grid. The kernel itself: test_prefill_tiles.py
(interpreter) and test_tail_tiles_cuda.py (compiled)."""

from __future__ import annotations

import pytest
from _gemm import tuned_file
from moecert.kernels.triton_moe import configs, heuristics, tune


def _tile(block_m, swap=False, **kw):
    return {"BLOCK_M": block_m, "BLOCK_N": 128, "BLOCK_K": 128, "num_warps": 4,
            "num_stages": 4, "SWAP_AB": swap, **kw}


@pytest.mark.parametrize(("config", "want"), [
    (_tile(64, swap=True), heuristics.SWAPPED_TAIL_M),  # the nibble prefill tile's default
    (_tile(128, swap=True), 32),  # the default fitted: a quarter of 128 rows at least
    (_tile(32, swap=True), 0),  # a swapped decode tile: none
    (_tile(128), 0), (_tile(64), 0), (_tile(16), 0),  # unswapped: none by default
    (_tile(128, TAIL_M=64), 64), (_tile(128, TAIL_M=32), 32),
    (_tile(128, TAIL_M=16), 32),  # below the kernel's quarter: its quarter
    (_tile(64, swap=True, TAIL_M=0), 0),  # the entry's 0 over the default
    (_tile(64, TAIL_M=64), 0), (_tile(32, TAIL_M=16), 16), (_tile(16, TAIL_M=16), 0),
])
def test_a_launchs_tail_comes_from_the_entry_else_the_default_fitted_to_the_kernel(
        config, want, monkeypatch):
    monkeypatch.delenv(configs.TAIL_M_ENV, raising=False)
    assert heuristics.tail_rows(config) == want


def test_the_variable_forces_every_launchs_tail(monkeypatch):
    monkeypatch.setenv(configs.TAIL_M_ENV, "0")
    assert heuristics.tail_rows(_tile(64, swap=True)) == 0
    monkeypatch.setenv(configs.TAIL_M_ENV, "64")
    assert heuristics.tail_rows(_tile(128, TAIL_M=0)) == 64
    assert heuristics.tail_rows(_tile(64, swap=True)) == 0  # a whole tile of 64 rows
    for bad in ("8", "24", "-16", "half"):
        monkeypatch.setenv(configs.TAIL_M_ENV, bad)
        with pytest.raises(ValueError, match="MOECERT_TRITON_TAIL_M"):
            heuristics.tail_rows(_tile(128))


def _file(tmp_path, tail):
    return tuned_file(tmp_path, "W16", 128, TAIL_M=tail)


@pytest.mark.parametrize("tail", [0, 32, 64])
def test_a_files_tail_is_read_where_set(tmp_path, tail):
    ((_, buckets),) = configs.read_table(_file(tmp_path, tail)).items()
    c1, c2 = buckets[512]
    assert c1["TAIL_M"] == tail and "TAIL_M" not in c2  # absent: the default at launch
    assert configs.complete(c1)["TAIL_M"] == tail and "TAIL_M" not in configs.complete(c2)


@pytest.mark.parametrize("tail", [16, 48, 128, 256, True, "32"])
def test_a_files_tail_off_the_kernels_levels_names_the_field(tmp_path, tail):
    with pytest.raises(configs.ConfigFileError, match="TAIL_M"):
        configs.read_table(_file(tmp_path, tail))


def test_the_tuner_tries_the_tails_of_the_starts_tile_at_prefill_sizes_only():
    prefill, decode = (tune.grid_for(rows, tune.GRID) for rows in (256, 16))
    assert "TAIL_M" in prefill and "TAIL_M" not in decode

    class Stage:  # the weights leave every field as it is; a big grid (no SPLIT_K)
        def weight_choices(self, gemm, config):
            return {}

        def programs(self, gemm, config):
            return 10 ** 6

    for block_m, tails in ((128, (0, 32, 64)), (64, (0, 16, 32)), (32, (0, 16))):
        grid = tune._gemm_grid(Stage(), 1, _tile(block_m), prefill, None)
        assert grid["TAIL_M"] == tails
    # from the swapped 64-row tile (its default 16 rows) the climb steps to 0 and 32
    start = _tile(64, swap=True)
    grid = {"TAIL_M": tune._gemm_grid(Stage(), 1, start, prefill, None)["TAIL_M"]}
    assert sorted(c["TAIL_M"] for c in tune.neighbours(start, grid)) == [0, 32]
