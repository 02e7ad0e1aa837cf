"""Tuned tile configurations: the data file (configs.py), the backend's lookup with its
fallback, and the search (tune.py) with a fake timer and a fake stage on the CPU."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from moecert.kernels.triton_moe import configs, tune, tune_stages
from moecert.kernels.triton_moe.interpret import load_interpreted_kernels


def _heuristics():
    """The config choice as this machine's tests run it: the kernel modules defined for the
    interpreter on a CPU (a compiled definition first would break the interpreted kernels of
    later tests)."""
    if not torch.cuda.is_available():
        load_interpreted_kernels()
    from moecert.kernels.triton_moe import heuristics

    return heuristics


KEY = configs.LayerKey("W_INT4", "A16", 8, (256, 128), (128, 128))


def _cfg(block_m=16, **kw):
    return {"BLOCK_M": block_m, "BLOCK_N": 64, "BLOCK_K": 128, "num_warps": 4,
            "num_stages": 3, "SWAP_AB": False, "FAST_I4": True, "SPLIT_K": 1, "K_UNROLL": 1,
            "GROUP_M": 1, **kw}


def _write(tmp_path, table, device="h100-80gb-hbm3"):
    path = configs.path_for(device, tmp_path)
    configs.write_table(path, device, "NVIDIA H100 80GB HBM3", {"triton": "x"}, table)
    return path


# --- the file ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name, key", [
    ("NVIDIA H100 80GB HBM3", "h100-80gb-hbm3"),
    ("NVIDIA H200", "h200"),
    ("NVIDIA GeForce RTX 4090", "geforce-rtx-4090"),
    ("AMD Instinct MI300X", "instinct-mi300x"),
])
def test_device_key(name, key):
    assert configs.device_key(name) == key


def test_rows_bucket_rounds_up_to_a_power_of_two():
    assert [configs.rows_bucket(n) for n in (0, 1, 2, 3, 8, 9, 1000)] == \
        [1, 1, 2, 4, 8, 16, 1024]


def test_kind_names_read_the_kernel_enums():
    _heuristics()
    from moecert.kernels.triton_moe import kinds

    assert kinds.WEIGHT_NAMES[kinds.W_INT4] == "W_INT4"
    assert kinds.WEIGHT_NAMES[kinds.W16] == "W16"
    assert kinds.ACT_NAMES[kinds.A_MX] == "A_MX"
    with pytest.raises(ValueError, match="named twice"):
        configs.kind_names({"W_A": 1, "W_B": 1}, "W")


def test_round_trip_and_nearest_bucket(tmp_path):
    table = {KEY: {8: (_cfg(16, BLOCK_N=32), _cfg(16, SWAP_AB=True)),
                   512: (_cfg(64, BLOCK_N=128, num_warps=8), _cfg(64))}}
    path = _write(tmp_path, table)
    assert configs.read_table(path) == table
    # n=3 -> bucket 4: nearest tuned is 8; n=100 -> 128: 512 is 2 steps, 8 is 4
    assert configs.lookup(configs.read_table(path), KEY, 3) == table[KEY][8]
    assert configs.lookup(configs.read_table(path), KEY, 100) == table[KEY][512]
    assert configs.lookup(configs.read_table(path), KEY, 10**6) == table[KEY][512]
    other = configs.LayerKey("W_INT4", "A16", 16, (256, 128), (128, 128))
    assert configs.lookup(configs.read_table(path), other, 8) is None


def test_split_k_and_unroll_round_trip_and_read_as_one_where_a_file_lacks_them(tmp_path):
    table = {KEY: {8: (_cfg(SPLIT_K=4, K_UNROLL=2), _cfg(SPLIT_K=2))}}
    path = _write(tmp_path, table)
    assert configs.read_table(path) == table
    data = json.loads(path.read_text())
    for gemm in ("gemm1", "gemm2"):  # a file written before split-K and unrolling
        del data["layers"][0]["buckets"]["8"][gemm]["SPLIT_K"]
        del data["layers"][0]["buckets"]["8"][gemm]["K_UNROLL"]
        del data["layers"][0]["buckets"]["8"][gemm]["GROUP_M"]
    path.write_text(json.dumps(data))
    assert configs.read_table(path) == {KEY: {8: (_cfg(), _cfg())}}
    assert configs.complete({**_cfg(), "SPLIT_K": 8})["SPLIT_K"] == 8
    assert configs.complete({"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 64, "num_warps": 4,
                             "num_stages": 1})["SPLIT_K"] == 1


def test_writing_other_layers_keeps_the_timings_recorded_beside_entries(tmp_path):
    other = configs.LayerKey("W_INT4", "A16", 8, (64, 32), (32, 32))
    path = configs.path_for("h100-80gb-hbm3", tmp_path)
    timed = {"default": 20.0, "tuned": 10.0}
    configs.write_table(path, "h100-80gb-hbm3", "H100", {}, {KEY: {8: (_cfg(), _cfg())}},
                        {(KEY, 8): timed})
    configs.write_table(path, "h100-80gb-hbm3", "H100", {}, {other: {8: (_cfg(), _cfg())}},
                        {(other, 8): {"default": 5.0, "tuned": 4.0}})
    assert configs.recorded_timings(path) == {(KEY, 8): timed,
                                              (other, 8): {"default": 5.0, "tuned": 4.0}}


def test_writing_merges_with_the_file_and_refuses_two_block_ms(tmp_path):
    _write(tmp_path, {KEY: {8: (_cfg(), _cfg())}})
    path = _write(tmp_path, {KEY: {64: (_cfg(32), _cfg(32))}})
    assert set(configs.read_table(path)[KEY]) == {8, 64}
    with pytest.raises(ValueError, match="BLOCK_M 16 != 64"):
        _write(tmp_path, {KEY: {8: (_cfg(16), _cfg(64))}})


def _entry_file(tmp_path, mutate):
    path = _write(tmp_path, {KEY: {8: (_cfg(), _cfg())}})
    data = json.loads(path.read_text())
    mutate(data)
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("mutate, key", [
    (lambda d: d["layers"][0]["buckets"]["8"]["gemm1"].pop("BLOCK_K"),
     r"layers\[0\].buckets\[8\].gemm1.BLOCK_K: expected a int, got 'nothing \(missing\)'"),
    (lambda d: d["layers"][0]["buckets"]["8"]["gemm2"].update(num_warps="4"),
     r"layers\[0\].buckets\[8\].gemm2.num_warps: expected a int"),
    (lambda d: d["layers"][0]["buckets"]["8"].update(BLOCK_M=24),
     r"layers\[0\].buckets\[8\].BLOCK_M: expected a power of two, got 24"),
    (lambda d: d["layers"][0]["buckets"]["8"]["gemm1"].update(BLOCK_N=True),
     r"gemm1.BLOCK_N: expected a int, got True"),
    (lambda d: d["layers"][0]["buckets"]["8"]["gemm1"].update(BLOCKN=64),
     r"gemm1: expected only BLOCK_N, .*, got 'BLOCKN'"),
    (lambda d: d["layers"][0]["buckets"]["8"]["gemm1"].update(SPLIT_K=3),
     r"layers\[0\].buckets\[8\].gemm1.SPLIT_K: expected a power of two, got 3"),
    (lambda d: d["layers"][0]["buckets"]["8"]["gemm2"].update(SPLIT_K="2"),
     r"layers\[0\].buckets\[8\].gemm2.SPLIT_K: expected a int, got '2'"),
    (lambda d: d["layers"][0]["buckets"]["8"]["gemm2"].update(K_UNROLL=0),
     r"layers\[0\].buckets\[8\].gemm2.K_UNROLL: expected >= 1, got 0"),
    (lambda d: d["layers"][0]["buckets"].update({"12": {}}),
     r"layers\[0\].buckets: expected power-of-two row counts as keys, got '12'"),
    (lambda d: d["layers"][0].update(gemm2=[128]), r"layers\[0\].gemm2: expected \[N, K\]"),
    (lambda d: d.update(format=99), r"format: expected 1, got 99"),
    (lambda d: d["layers"].append(d["layers"][0]), r"layers\[1\]: expected one entry per"),
    (lambda d: d["layers"][0].update(nibble_spans={"w1": 128}),
     r"layers\[0\].nibble_spans.w1: expected a linear of w13, w2, got 'w1'"),
    (lambda d: d["layers"][0].update(nibble_spans={"w2": 96}),
     r"layers\[0\].nibble_spans.w2: expected 0 or a power of two >= 2, got 96"),
    (lambda d: d["layers"][0].update(nibble_spans=[128]),
     r"layers\[0\].nibble_spans: expected a dict"),
])
def test_malformed_file_names_the_file_and_the_key(tmp_path, mutate, key):
    path = _entry_file(tmp_path, mutate)
    with pytest.raises(configs.ConfigFileError, match=key) as info:
        configs.read_table(path)
    assert str(path) in str(info.value)


def test_invalid_json_names_the_file(tmp_path):
    path = tmp_path / "h100.json"
    path.write_text('{"format": 1,')
    with pytest.raises(configs.ConfigFileError, match=r"h100.json: line 1: expected JSON"):
        configs.read_table(path)


# --- the backend's lookup ---------------------------------------------------------------------

@pytest.fixture
def compiled_lookup(monkeypatch, tmp_path):
    """pick_configs as on a GPU named "test-gpu" whose files live in tmp_path."""
    heuristics = _heuristics()

    monkeypatch.setattr(heuristics, "INTERPRET", False)
    monkeypatch.setattr(configs, "CONFIG_DIR", tmp_path)
    monkeypatch.setattr(configs, "current_device_key", lambda: "test-gpu")
    monkeypatch.setattr(configs, "current_capability", lambda: None)
    configs.load_table.cache_clear()
    configs.config_devices.cache_clear()
    yield heuristics
    configs.load_table.cache_clear()
    configs.config_devices.cache_clear()


def _pick(heuristics, n=16):
    from moecert.kernels.triton_moe import kinds

    return heuristics.pick_configs(n, KEY.experts, kinds.W_INT4, kinds.A16,
                                  KEY.gemm1, KEY.gemm2)


@pytest.mark.parametrize("capability, reads_it", [((9, 0), True), ((8, 0), False)])
def test_a_device_without_a_file_reads_one_of_its_generation(compiled_lookup, tmp_path,
                                                             monkeypatch, capability,
                                                             reads_it):
    """No file for "test-gpu": the file tuned on another device of the same compute
    capability (an H200 reads the H100's), never one of another generation."""
    tuned = (_cfg(64, BLOCK_N=256), _cfg(64, BLOCK_K=64))
    path = configs.path_for("other-gpu", tmp_path)
    configs.write_table(path, "other-gpu", "Other GPU", {}, {KEY: {16: tuned}},
                        capability=(9, 0))
    assert configs.file_capability(path) == (9, 0)
    monkeypatch.setattr(configs, "current_capability", lambda: capability)
    default = compiled_lookup.default_configs(16)
    assert _pick(compiled_lookup) == (tuned if reads_it else default)
    # its own file, for another layer: the other device's file still serves this one
    other = configs.LayerKey("W_FP4", "A16", 8, (256, 128), (128, 128))
    _write(tmp_path, {other: {16: (_cfg(), _cfg())}}, device="test-gpu")
    configs.config_devices.cache_clear()
    assert _pick(compiled_lookup) == (tuned if reads_it else default)


@pytest.mark.parametrize("weight", ["W_INT4", "W_MXFP8"])
def test_of_two_files_the_nearer_bucket_wins_but_int4_reads_its_own(compiled_lookup, tmp_path,
                                                                  monkeypatch, weight):
    """The device's own file tuned at decode sizes only, its generation's file at every size.
    MXFP8: a size near the own file's buckets reads them, a size the other file has and the
    own file is two powers of two from reads the other's, a tie reads the own file. int4
    (heuristics.TUNED_AT_EVERY_SIZE): the own file, the one of its nibble order, at every size
    (the other device's nearer bucket was measured slower on the H200)."""
    import dataclasses

    from moecert.kernels.triton_moe import kinds

    key = dataclasses.replace(KEY, weight=weight, experts=64)
    own = (_cfg(16, BLOCK_N=32), _cfg(16, BLOCK_N=32))
    other_small = (_cfg(16, BLOCK_N=128), _cfg(16, BLOCK_N=128))
    other_big = (_cfg(64, BLOCK_N=256), _cfg(64, BLOCK_N=256))
    configs.write_table(configs.path_for("other-gpu", tmp_path), "other-gpu", "Other", {},
                        {key: {16: other_small, 256: other_big}}, capability=(9, 0))
    _write(tmp_path, {key: {16: own}}, device="test-gpu")
    monkeypatch.setattr(configs, "current_capability", lambda: (9, 0))
    int4 = weight == "W_INT4"

    def pick(n):
        # decode-sized rows per expert only: no prefill limit on the distance
        return compiled_lookup.pick_configs(n, key.experts, getattr(kinds, weight), kinds.A16,
                                            key.gemm1, key.gemm2)

    assert pick(16) == own  # a tie: the own file
    assert pick(32) == own  # one step from both: the own file
    assert pick(128) == (own if int4 else other_big)  # 3 steps from 16, 1 from 256
    assert pick(256) == (own if int4 else other_big)
    assert configs.layer_file(key, "test-gpu", tmp_path) == "test-gpu"


def test_int4_with_zero_points_reads_its_own_entries_else_those_without(compiled_lookup,
                                                                       tmp_path):
    """AWQ's int4 (zero points) is keyed W_INT4_ZERO, apart from gptq-int4's W_INT4: tuning
    one no longer writes over the other's entries; until a file has W_INT4_ZERO entries for
    the layer it reads W_INT4's, tiles and nibble spans alike (heuristics.tuned_key)."""
    import dataclasses

    from moecert.kernels.triton_moe import kinds

    heuristics = compiled_lookup
    zero = dataclasses.replace(KEY, weight="W_INT4_ZERO")
    assert heuristics.int4_weight_name(True) == "W_INT4_ZERO"
    assert heuristics.int4_weight_name(False) == "W_INT4"
    without = (_cfg(16, BLOCK_N=32), _cfg(16, BLOCK_N=32))
    own = (_cfg(16, BLOCK_N=128), _cfg(16, BLOCK_N=128))

    def pick():
        return heuristics.pick_configs(16, KEY.experts, kinds.W_INT4, kinds.A16, KEY.gemm1,
                                       KEY.gemm2, heuristics.int4_weight_name(True))

    _write(tmp_path, {KEY: {16: without}}, device="test-gpu")
    assert heuristics.tuned_key(zero) == KEY
    assert pick() == without  # not tuned yet: gptq-int4's entries, as before the split
    _write(tmp_path, {KEY: {16: without}, zero: {16: own}}, device="test-gpu")
    configs.load_table.cache_clear()
    assert heuristics.tuned_key(zero) == zero
    assert pick() == own
    assert _pick(heuristics) == without  # gptq-int4's entries are its own still
    assert heuristics.tuned_key(KEY) == KEY  # a kind without a fallback is its own key


def test_a_key_tuned_at_some_sizes_keeps_its_fallbacks_tiles_at_the_others(compiled_lookup,
                                                                          tmp_path):
    """W_INT4_ZERO tuned at 16 rows only, W_INT4 at 16 and 128: 16 and 32 rows read the own
    entry (nearer, or a tie), 64 and 128 W_INT4's strictly nearer bucket (awq-int4's Mixtral
    entry at M = 16 alone ran M = 64 1.27x slower on its 32-row tile, 2026-12-01); unless the
    two entries store the weights in other nibble orders: then the own entry at every size."""
    import dataclasses

    from moecert.kernels.triton_moe import kinds

    heuristics = compiled_lookup
    zero = dataclasses.replace(KEY, weight="W_INT4_ZERO")
    without = {16: (_cfg(16, BLOCK_N=32), _cfg(16, BLOCK_N=32)),
               128: (_cfg(32, BLOCK_N=64), _cfg(32, BLOCK_N=64))}
    own = (_cfg(16, BLOCK_N=128), _cfg(16, BLOCK_N=128))
    path = configs.path_for("test-gpu", tmp_path)

    def pick(n):
        return heuristics.pick_configs(n, KEY.experts, kinds.W_INT4, kinds.A16, KEY.gemm1,
                                       KEY.gemm2, "W_INT4_ZERO")

    spans = {KEY: {"w13": 128, "w2": 128}, zero: {"w13": 128, "w2": 128}}
    configs.write_table(path, "test-gpu", "Test GPU", {}, {KEY: without, zero: {16: own}},
                        spans=spans)
    assert [pick(n) for n in (16, 32, 64, 128)] == [own, own, without[128], without[128]]
    assert _pick(heuristics, 128) == without[128]  # gptq-int4 reads its own, as before
    path.unlink()
    configs.load_table.cache_clear()
    configs.load_spans.cache_clear()
    configs.write_table(path, "test-gpu", "Test GPU", {}, {KEY: without, zero: {16: own}},
                        spans={KEY: {"w13": 128, "w2": 128}, zero: {"w13": 0, "w2": 128}})
    assert [pick(n) for n in (16, 64, 128)] == [own, own, own]


def test_a_tie_between_a_keys_bucket_and_its_fallbacks_takes_the_smaller(compiled_lookup,
                                                                          tmp_path):
    """64 rows lie as near the 32-row bucket as the 128-row one: the smaller answers, the
    fallback's or the own key's (the lookups' tie rule). W4A8's and AWQ's Mixtral-8x7B
    entries tuned at M = 64 (128 rows) ran M = 32 in 437.9 / 346.6 us on their 128-row
    tiles, 355.1 / 291.3 on W_INT4's 32-row bucket (2026-12-01, docs/speed.md round ten)."""
    import dataclasses

    from moecert.kernels.triton_moe import kinds

    heuristics = compiled_lookup
    zero = dataclasses.replace(KEY, weight="W_INT4_ZERO")
    small = (_cfg(16, BLOCK_N=32), _cfg(16, BLOCK_N=32))
    large = (_cfg(32, BLOCK_N=128), _cfg(32, BLOCK_N=64))
    path = configs.path_for("test-gpu", tmp_path)
    spans = {KEY: {"w13": 128, "w2": 128}, zero: {"w13": 128, "w2": 128}}

    def pick(n):
        return heuristics.pick_configs(n, KEY.experts, kinds.W_INT4, kinds.A16, KEY.gemm1,
                                       KEY.gemm2, "W_INT4_ZERO")

    for fallback, own in ((small, large), (large, small)):
        configs.load_table.cache_clear()
        configs.load_spans.cache_clear()
        configs.write_table(path, "test-gpu", "Test GPU", {},
                            {KEY: {32 if fallback is small else 128: fallback},
                             zero: {128 if own is large else 32: own}}, spans=spans)
        assert [pick(n) for n in (32, 64, 128)] == [small, small, large]


def test_pick_configs_reads_the_device_file(compiled_lookup, tmp_path):
    tuned = (_cfg(64, BLOCK_N=256), _cfg(64, BLOCK_K=64))
    _write(tmp_path, {KEY: {16: tuned}}, device="test-gpu")
    assert _pick(compiled_lookup) == tuned


def test_pick_configs_falls_back_without_a_file_or_an_entry(compiled_lookup, tmp_path):
    fm = compiled_lookup
    heuristic = fm.default_configs(16)
    assert heuristic == (fm.pick_config(16), fm.pick_config(16))
    assert _pick(fm) == heuristic  # no file for "test-gpu"
    _write(tmp_path, {KEY: {16: (_cfg(64), _cfg(64))}}, device="other-gpu")
    assert _pick(fm) == heuristic
    other = configs.LayerKey("W_FP8", "A16", 8, (256, 128), (128, 128))
    _write(tmp_path, {other: {16: (_cfg(64), _cfg(64))}}, device="test-gpu")
    assert _pick(fm) == heuristic


def test_prefill_sizes_take_the_prefill_tile(compiled_lookup):
    """Rows per expert (n / E) decide: 32 (DeepSeek-V3 at M = 1024) keeps the decode tile,
    64 (Qwen3 at M = 1024) and 256 (Mixtral at M = 1024) take wider row blocks; without the
    expert count the decode tile as before. The 128-row tile by operand width, nibble weights
    with 16-bit activations swapped (heuristics.PREFILL_TILE_WIDE, PREFILL_NIBBLE_TILE)."""
    h = compiled_lookup
    assert h.pick_config(8192, 256)["BLOCK_M"] == 16
    assert h.pick_config(8192, 128)["BLOCK_M"] == 64
    assert h.pick_config(2048, 8)["BLOCK_M"] == 128
    assert h.pick_config(2048) == h.pick_config(16)
    for n, e in ((8192, 128), (2048, 8)):
        c = h.pick_config(n, e)
        assert c == {"BLOCK_M": c["BLOCK_M"], **h.PREFILL_TILE[c["BLOCK_M"]], "FAST_I4": True}
    from moecert.kernels.triton_moe import kinds

    # nibble weights with 16-bit activations, and W4A8's codes (multiplied in 16 bits on the
    # planes): the weight tile as the MMA's first operand, 64 rows at every prefill size;
    # with 8-bit activations of another kind, or 8-bit weights, not
    for n in (512, 2048, 8192):
        for w in (kinds.W_INT4, kinds.W_FP4):
            for act in (kinds.A16, kinds.A_INT8):
                assert h.pick_config(n, 8, w, act) == {**h.PREFILL_NIBBLE_TILE,
                                                       "FAST_I4": True}
    assert h.PREFILL_NIBBLE_TILE["SWAP_AB"] and h.PREFILL_NIBBLE_TILE["BLOCK_M"] == 64
    w4afp8 = h.pick_config(2048, 8, kinds.W_INT4, kinds.A_FP8)
    assert (w4afp8["BLOCK_M"], w4afp8["BLOCK_N"]) == (128, h.PREFILL_NIBBLE_N)
    assert not w4afp8.get("SWAP_AB")
    assert not h.pick_config(2048, 8, kinds.W_INT8, kinds.A_INT8).get("SWAP_AB")
    # 16-bit and 8-bit operands: the 128-row tile's width and depth; the 64-row tile as before
    assert h.pick_config(2048, 8, kinds.W16, kinds.A16) == {
        "BLOCK_M": 128, **h.PREFILL_TILE_WIDE[16], "FAST_I4": True}
    assert h.pick_config(2048, 8, kinds.W_FP8, kinds.A_FP8_G) == {
        "BLOCK_M": 128, **h.PREFILL_TILE_WIDE[8], "FAST_I4": True}
    assert h.pick_config(2048, 8, kinds.W_FP8, kinds.A16) == h.pick_config(2048, 8)
    assert h.pick_config(8192, 128, kinds.W16, kinds.A16) == h.pick_config(8192, 128)
    assert h.pick_config(64, 8, kinds.W_INT4, kinds.A16)["BLOCK_N"] == 128  # decode: unchanged
    # the layer's experts, kind and activations reach the heuristics through pick_configs
    # (KEY: 8 experts, W_INT4, A16)
    assert _pick(h, 2048) == (h.pick_config(2048, 8, kinds.W_INT4, kinds.A16),) * 2


def _pick_kind(heuristics, weight, n):
    from moecert.kernels.triton_moe import kinds

    key = configs.LayerKey(kinds.WEIGHT_NAMES[weight], "A16", KEY.experts, KEY.gemm1,
                           KEY.gemm2)
    return key, heuristics.pick_configs(n, key.experts, weight, kinds.A16, key.gemm1,
                                        key.gemm2)


def test_a_decode_bucket_is_not_a_prefill_tile(compiled_lookup, tmp_path):
    """A file tuned at decode sizes only: at prefill sizes its nearest bucket is taken only
    within a factor of two of the rows, else the prefill heuristics; at decode sizes the
    nearest bucket however far (as before)."""
    h = compiled_lookup
    from moecert.kernels.triton_moe import kinds

    decode = (_cfg(32, BLOCK_N=256), _cfg(32, BLOCK_K=64))
    key, _ = _pick_kind(h, kinds.W16, 16)
    _write(tmp_path, {key: {256: decode}}, device="test-gpu")  # 32 rows per expert
    assert _pick_kind(h, kinds.W16, 512)[1] == decode  # 64 rows per expert, one step
    # two steps: the prefill heuristics of the layer (8 experts, 16-bit weights)
    assert _pick_kind(h, kinds.W16, 1024)[1] == h.default_configs(1024, KEY.experts,
                                                                   kinds.W16, kinds.A16)
    assert _pick_kind(h, kinds.W16, 1024)[1][0]["BLOCK_M"] == 128
    assert _pick_kind(h, kinds.W16, 2)[1] == decode  # decode: seven steps, still the nearest
    assert configs.lookup(configs.read_table(configs.path_for("test-gpu", tmp_path)), key,
                          1024, max_steps=2) == decode


def test_a_prefill_bucket_is_not_a_decode_tile(compiled_lookup, tmp_path):
    """A file tuned at prefill sizes only (bf16 Mixtral-8x7B's 2048- and 8192-row buckets,
    2026-12-01): a decode size takes the heuristics' decode tile, not the nearest bucket's
    128-row tile; int4 (read at every size) alike. A decode bucket still answers at decode."""
    h = compiled_lookup
    from moecert.kernels.triton_moe import kinds

    prefill = (_cfg(128, BLOCK_N=256), _cfg(128, BLOCK_N=256))
    key, _ = _pick_kind(h, kinds.W16, 16)
    _write(tmp_path, {key: {2048: prefill}, KEY: {8192: prefill}}, device="test-gpu")
    for n in (2, 16, 256):  # 32 rows per expert at most: decode sizes
        assert _pick_kind(h, kinds.W16, n)[1] == h.default_configs(n, KEY.experts, kinds.W16,
                                                                    kinds.A16)
        assert _pick(h, n) == h.default_configs(n, KEY.experts, kinds.W_INT4, kinds.A16)
    assert _pick_kind(h, kinds.W16, 2048)[1] == prefill
    assert _pick(h, 8192) == prefill
    decode = (_cfg(16, BLOCK_N=32), _cfg(16, BLOCK_N=32))
    _write(tmp_path, {key: {2048: prefill, 32: decode}}, device="test-gpu")
    assert _pick_kind(h, kinds.W16, 256)[1] == decode  # three steps, the decode bucket


def test_int4_tuned_buckets_count_at_every_size_but_prefill_with_16_bit_activations(
        compiled_lookup, tmp_path):
    """int4 weights keep their tuned bucket however far at decode sizes (TUNED_AT_EVERY_SIZE);
    with 16-bit activations or W4A8's int8 codes (NIBBLE_PREFILL_ACTS) a prefill size takes a
    bucket within PREFILL_STEPS, else the swapped prefill tile (measured faster than the
    decode buckets on an H200: round nine; W4A8 round twelve), and with fp8 activations the
    nearest bucket at any distance."""
    h = compiled_lookup
    from moecert.kernels.triton_moe import kinds

    assert kinds.W_INT4 in h.TUNED_AT_EVERY_SIZE
    prefill = h.default_configs(2048, KEY.experts, kinds.W_INT4, kinds.A16)
    assert _pick(h, 2048) == prefill  # no file: the prefill tile
    decode = (_cfg(32, BLOCK_N=128, SWAP_AB=True), _cfg(32, SPLIT_K=2))
    w4a8 = dataclasses.replace(KEY, act="A_INT8")
    _write(tmp_path, {KEY: {128: decode}, w4a8: {128: decode}}, device="test-gpu")
    assert _pick(h, 16) == decode
    assert _pick(h, 256) == decode  # 32 rows per expert: a decode size, three steps
    assert _pick(h, 2048) == prefill  # four steps at a prefill size: not taken
    assert h.pick_configs(2048, KEY.experts, kinds.W_INT4, kinds.A_INT8, KEY.gemm1,
                          KEY.gemm2) == h.default_configs(2048, KEY.experts, kinds.W_INT4,
                                                          kinds.A_INT8)
    assert h.pick_configs(256, KEY.experts, kinds.W_INT4, kinds.A_INT8, KEY.gemm1,
                          KEY.gemm2) == decode
    w4afp8 = dataclasses.replace(KEY, act="A_FP8")
    _write(tmp_path, {KEY: {128: decode}, w4afp8: {128: decode}}, device="test-gpu")
    assert h.pick_configs(2048, KEY.experts, kinds.W_INT4, kinds.A_FP8, KEY.gemm1,
                          KEY.gemm2) == decode
    tuned = (_cfg(64, BLOCK_N=128, SWAP_AB=True, GROUP_M=4), _cfg(64, BLOCK_N=128))
    _write(tmp_path, {KEY: {128: decode, 2048: tuned}}, device="test-gpu")
    assert _pick(h, 4096) == tuned  # one step
    assert _pick(h, 16384) == prefill


def test_pick_configs_ignores_the_file_under_the_interpreter(compiled_lookup, tmp_path,
                                                            monkeypatch):
    _write(tmp_path, {KEY: {16: (_cfg(64), _cfg(64))}}, device="test-gpu")
    monkeypatch.setattr(compiled_lookup, "INTERPRET", True)
    assert _pick(compiled_lookup)[0]["BLOCK_M"] == 16


def test_pick_configs_forces_split_k_from_the_environment(compiled_lookup, tmp_path,
                                                          monkeypatch):
    tuned = (_cfg(64, BLOCK_N=256), _cfg(64, BLOCK_K=64, SPLIT_K=2))
    _write(tmp_path, {KEY: {16: tuned}}, device="test-gpu")
    monkeypatch.setenv(configs.SPLIT_K_ENV, "8")
    assert _pick(compiled_lookup) == tuple({**c, "SPLIT_K": 8} for c in tuned)
    monkeypatch.setattr(compiled_lookup, "INTERPRET", True)  # the heuristics: forced too
    assert [c["SPLIT_K"] for c in _pick(compiled_lookup)] == [8, 8]
    monkeypatch.setenv(configs.SPLIT_K_ENV, "6")
    with pytest.raises(ValueError, match="MOECERT_TRITON_SPLIT_K='6'"):
        _pick(compiled_lookup)


def test_pick_configs_raises_on_a_malformed_file(compiled_lookup, tmp_path):
    path = configs.path_for("test-gpu", tmp_path)
    path.write_text('{"format": 1, "layers": [{"weight": "W_INT4"}]}')
    with pytest.raises(configs.ConfigFileError, match=r"test-gpu.json: layers\[0\].act"):
        _pick(compiled_lookup)


# --- correctness of a candidate -----------------------------------------------------------------

def test_reorder_bound_admits_one_rounding_flip_and_rejects_more():
    ref = torch.tensor([[1.0, 3.0]], dtype=torch.bfloat16)
    magnitude = torch.tensor([[1.0, 3.0]], dtype=torch.float64)
    bound = tune.reorder_bound(ref, magnitude, K=64)
    flip = ref.clone()
    flip[0, 1] = 3.0 + 2**-6  # the next bf16 after 3.0 (spacing 2^-6 in [2, 4))
    assert tune.disagreement(flip, ref, bound) is None
    off = ref.clone()
    off[0, 0] = 1.0 + 4 * 2**-7
    assert "out[0, 0] = 1.03125, default 1" in tune.disagreement(off, ref, bound)
    nan = ref.clone()
    nan[0, 0] = float("nan")
    assert "non-finite" in tune.disagreement(nan, ref, bound)


def test_reorder_bound_grows_with_the_magnitudes_not_the_output():
    ref = torch.zeros(1, 1)  # cancellation: the sum is 0, its terms are not
    shifted = torch.full((1, 1), 1e-5)
    assert tune.disagreement(shifted, ref, tune.reorder_bound(ref, torch.full((1, 1), 1.0),
                                                               K=4096)) is None
    assert tune.disagreement(shifted, ref, tune.reorder_bound(ref, torch.full((1, 1), 1e-3),
                                                               K=4096)) is not None


# --- the search ----------------------------------------------------------------------------------

def test_neighbours_step_one_field_one_grid_value():
    grid = {"BLOCK_N": (32, 64, 128), "num_stages": (2, 3, 4)}
    got = tune.neighbours({"BLOCK_N": 64, "num_stages": 1}, grid)
    assert got == [{"BLOCK_N": 32, "num_stages": 1}, {"BLOCK_N": 128, "num_stages": 1},
                   {"BLOCK_N": 64, "num_stages": 2}]



@pytest.mark.parametrize("rows_per_expert, swap, group", [
    (8, True, False), (16, True, False), (63, False, False), (64, False, True),
    (1024, False, True)])
def test_the_grid_drops_swaps_past_decode_and_row_groups_below_prefill(rows_per_expert, swap,
                                                                       group):
    grid = tune.grid_for(rows_per_expert, tune.GRID)
    assert (len(grid["SWAP_AB"]) > 1) == swap
    assert (len(grid["GROUP_M"]) > 1) == group
    # a climb's start at the launch order (GROUP_M 1) steps to a row group where allowed
    steps = tune.neighbours({"GROUP_M": 1}, {"GROUP_M": grid["GROUP_M"]})
    assert steps == ([{"GROUP_M": 4}] if group else [])

def test_climb_reaches_the_fastest_and_skips_rejected():
    grid = {"BLOCK_N": (32, 64, 128, 256)}
    times = {32: 9.0, 64: 5.0, 128: None, 256: 1.0}  # 256 is behind a rejected config
    best, us = tune.climb(lambda c: times[c["BLOCK_N"]], {"BLOCK_N": 32}, grid)
    assert (best, us) == ({"BLOCK_N": 64}, 5.0)


class FakeStage:
    """tune_layer's view of a LayerStage: GEMM g of 4 rows is a fixed fp32 product; the
    `planted` config returns a wrong result (a kernel bug for one tile)."""

    def __init__(self, planted: dict | None = None, rows_per_expert=4):
        gen = torch.Generator().manual_seed(0)
        self.n = 4 * rows_per_expert
        self.ids = torch.arange(self.n) // rows_per_expert
        self.defaults = (_cfg(16), _cfg(16))
        self.a = torch.randn(self.n, 32, generator=gen)
        self.w = {1: torch.randn(32, 32, generator=gen), 2: torch.randn(32, 16, generator=gen)}
        self.planted = planted or {}
        self.runs = []
        self.stored = {1: 0, 2: 0}
        self.span_options = (0,)

    routings = 1

    def launch(self, g, config):
        self.run(g, config)

    def weight_rounding(self, g, *configs):  # (exact weights under every config)
        return 0.0

    def spans(self, g):
        return self.span_options

    def shape(self, g):
        return (self.w[g].shape[1], 32)

    def run(self, g, config):
        self.runs.append((g, dict(config)))
        self.last_gemm = g
        out = self.a @ self.w[g]
        if all(config.get(k) == v for k, v in self.planted.items()) and self.planted:
            out = out.clone()
            out[1, 2] += 0.5
        return out

    def magnitudes(self, g):
        return self.a.double().abs() @ self.w[g].double().abs()

    def effective(self, g, config):
        return tuple(sorted(config.items()))

    def weight_choices(self, g, config):
        return {}


def fake_timer(prefer: dict):
    """Each config field with the preferred value takes 10 us off 100 us; the call runs."""
    def timer(run, config):
        run()
        return 100.0 - sum(10.0 for k, v in prefer.items() if config.get(k) == v)
    return timer


GRID = {"BLOCK_N": (32, 64, 128), "num_warps": (4, 8), "SWAP_AB": (False, True)}


class CostedStage(FakeStage):
    """A FakeStage whose launches cost what `costs` says of their BLOCK_N (a routing on
    which some tiles fall off a cliff), added to a shared meter that the timer reads."""

    def __init__(self, costs: dict, meter: list, planted=None):
        super().__init__(planted)
        self.costs, self.meter = costs, meter

    def run(self, g, config):
        self.meter[0] += self.costs[config["BLOCK_N"]]
        return super().run(g, config)


def test_tuning_over_routings_takes_the_mean_and_checks_each():
    """BLOCK_N 128 is fastest on the first routing and falls off a cliff on the second: over
    both, 64 wins. A config wrong on one routing only is rejected."""
    meter = [0.0]

    def timer(run, config):
        before = meter[0]
        run()
        return meter[0] - before

    grid = {"BLOCK_N": (32, 64, 128)}
    first = CostedStage({32: 50.0, 64: 44.0, 128: 40.0}, meter)
    second = CostedStage({32: 50.0, 64: 46.0, 128: 70.0}, meter)
    alone = tune.tune_layer(first, timer, grid)
    assert [c["BLOCK_N"] for c in alone.configs] == [128, 128]
    both = tune.tune_layer(tune_stages.RoutingStages([first, second]), timer, grid)
    assert [c["BLOCK_N"] for c in both.configs] == [64, 64]
    assert both.us == 2 * 45.0  # two GEMMs, each the mean of 44 and 46
    assert alone.default_us == 2 * 44.0  # the default (_cfg: BLOCK_N 64), timed the same way
    # BLOCK_N 32, now the fastest on both, computes a wrong output on the second routing
    fast = CostedStage({32: 30.0, 64: 44.0, 128: 40.0}, meter)
    wrong = CostedStage({32: 30.0, 64: 46.0, 128: 70.0}, meter, planted={"BLOCK_N": 32})
    checked = tune.tune_layer(tune_stages.RoutingStages([fast, wrong]), timer, grid)
    assert [c["BLOCK_N"] for c in checked.configs] == [64, 64]
    rejected = [t for g in checked.gemms for t in g.tried if t.us is None]
    assert rejected and all(t.config["BLOCK_N"] == 32 for t in rejected)
    with pytest.raises(ValueError, match="at least one stage"):
        tune_stages.RoutingStages([])


def test_tune_layer_rejects_a_planted_wrong_config():
    timer = fake_timer({"BLOCK_N": 128, "num_warps": 8})
    clean = tune.tune_layer(FakeStage(), timer, GRID)
    assert clean.configs[0]["BLOCK_N"] == 128 and clean.configs[0]["num_warps"] == 8
    stage = FakeStage(planted={"BLOCK_N": 128})
    choice = tune.tune_layer(stage, timer, GRID)
    assert choice.configs[0]["BLOCK_N"] != 128 and choice.configs[0]["num_warps"] == 8
    rejected = [t for g in choice.gemms for t in g.tried if t.us is None]
    assert rejected and all(t.config["BLOCK_N"] == 128 for t in rejected)
    assert "out[1, 2]" in rejected[0].why
    assert choice.us < choice.default_us


def test_tune_layer_gives_both_gemms_one_block_m():
    """Wide rows per expert try BLOCK_M 32, 64 and 128 beside 16: GEMM1 gains more from 64
    than GEMM2 loses, so both get 64 (GEMM2 alone would keep 16)."""
    stage = FakeStage(rows_per_expert=64)

    def timer(run, config):
        run()
        wide = config["BLOCK_M"] == 64
        return 50.0 - 20 * wide if stage.last_gemm == 1 else 50.0 + 5 * wide

    choice = tune.tune_layer(stage, timer, GRID)
    assert [c["BLOCK_M"] for c in choice.configs] == [64, 64]
    assert {c["BLOCK_M"] for _, c in stage.runs} == {16, 32, 64, 128}
    assert tune.block_ms(4.0, 16) == [16]  # few rows per expert: 16 only
    assert tune.block_ms(16.0, 16) == [16, 32]  # half of 32
    assert tune.block_ms(31.0, 16) == [16, 32]
    assert tune.block_ms(32.0, 64) == [64, 32]
    assert tune.block_ms(64.0, 128) == [128, 32, 64]  # a prefill default


def test_tune_layer_keeps_the_default_when_nothing_is_faster():
    choice = tune.tune_layer(FakeStage(), fake_timer({}), GRID)
    assert choice.configs == tuple(configs.complete(c) for c in FakeStage().defaults)
    assert choice.us == choice.default_us


def test_a_split_that_pays_only_with_wider_tiles_is_found():
    """From an unsplit start each single step is slower (a split alone, a wider tile
    alone); the climb from the split start finds the pair (Mixtral-8x7B GEMM2 at M = 1)."""
    times = {(32, 1): 50.0, (64, 1): 52.0, (128, 1): 55.0,
             (32, 4): 51.0, (64, 4): 46.0, (128, 4): 44.0}
    grid = {"BLOCK_N": (32, 64, 128), "SPLIT_K": (1, 4)}

    def timer(run, config):
        run()
        return times[config["BLOCK_N"], config.get("SPLIT_K", 1)]

    assert tune.climb_starts({"BLOCK_N": 32}, grid) == [{"BLOCK_N": 32},
                                                        {"BLOCK_N": 32, "SPLIT_K": 4}]
    start = {**_cfg(16), "BLOCK_N": 32}
    choice = tune.tune_gemm(FakeStage(), 2, start, timer, grid, *_reference(FakeStage(), 2))
    assert (choice.config["BLOCK_N"], choice.config["SPLIT_K"], choice.us) == (128, 4, 44.0)
    one_start = tune.climb(lambda c: times[c["BLOCK_N"], c.get("SPLIT_K", 1)], start, grid)
    assert one_start[1] == 50.0  # what a single climb from the default settles for


def _reference(stage, g):
    ref = stage.run(g, stage.defaults[g - 1]).clone()
    return ref, tune.reorder_bound(ref, stage.magnitudes(g), stage.shape(g)[1])


def test_each_gemm_gets_the_nibble_order_it_is_faster_in():
    """GEMM1 runs faster with nibble planes, GEMM2 slower: each gets its own order, and
    a planted wrong result in one order is never chosen."""
    stage = FakeStage()
    stage.span_options = (0, 128)

    def timer(run, config):
        run()
        planes = config.get("NIB_SPAN") == 128
        return 50.0 + (-10.0 if planes else 0.0) * (1 if stage.last_gemm == 1 else -1)

    choice = tune.tune_layer(stage, timer, GRID)
    assert choice.spans == (128, 0) and choice.us == 40.0 + 50.0
    assert all("NIB_SPAN" not in c for c in choice.configs)  # a weight property, not a tile's
    planted = FakeStage(planted={"NIB_SPAN": 128})
    planted.span_options = (0, 128)
    stage = planted
    choice = tune.tune_layer(planted, timer, GRID)
    assert choice.spans == (0, 0) and (16, 1, 128) not in choice.options


def test_one_nibble_order_per_linear_over_the_buckets():
    """The order with the least summed time over the buckets wins, even where another
    bucket alone prefers the other order; each bucket is then settled in that order."""
    def options(times):  # {(gemm, span): us} at BLOCK_M 16
        return {(16, g, s): tune.GemmChoice({**_cfg(16), "NIB_SPAN": s}, us, 99.0)
                for (g, s), us in times.items()}

    small = options({(1, 0): 10.0, (1, 128): 12.0, (2, 0): 10.0, (2, 128): 9.0})
    large = options({(1, 0): 100.0, (1, 128): 90.0, (2, 0): 50.0, (2, 128): 60.0})
    assert tune.best_spans([small]) == (0, 128)
    assert tune.best_spans([small, large]) == (128, 0)
    settled = tune.settle(small, (128, 0), (_cfg(16), _cfg(16)), [99.0, 99.0], {1: 0, 2: 0})
    assert settled.us == 12.0 + 10.0 and settled.spans == (128, 0)
    # an order tuned at no BLOCK_M the other GEMM's order has: the stored orders
    del small[16, 1, 128]
    small[32, 1, 128] = tune.GemmChoice({**_cfg(32), "NIB_SPAN": 128}, 1.0, 99.0)
    fallback = tune.settle(small, (128, 0), (_cfg(16), _cfg(16)), [99.0, 99.0], {1: 0, 2: 0})
    assert fallback.spans == (0, 0) and fallback.us == 20.0


H100_SMEM, L40S_SMEM, MI300_SMEM = 232448, 101376, 65536  # bytes a program may use


def test_the_heuristic_tile_fits_the_device_shared_memory(compiled_lookup, monkeypatch):
    """Without a tuned entry the H100-sized default is fitted to the device: unchanged on an
    H100 for every weight and activation kind, fewer stages then narrower tiles where the
    shared memory is smaller, always within it."""
    from moecert.kernels.triton_moe import kinds

    h = compiled_lookup
    for n in (1, 16, 1024):
        for weight in kinds.WEIGHT_NAMES:
            for act in kinds.ACT_NAMES:
                default = h.pick_config(n)
                assert h.fit_shared_memory(default, weight, act, H100_SMEM) == default
                for smem in (L40S_SMEM, MI300_SMEM):
                    fitted = h.fit_shared_memory(default, weight, act, smem)
                    assert h.shared_memory_bytes(fitted, weight, act) <= smem
                    assert fitted["BLOCK_M"] == default["BLOCK_M"]  # one row alignment
    bf16 = h.pick_config(16)
    assert bf16["num_stages"] == 4 and bf16["BLOCK_N"] == 128
    l40s = h.fit_shared_memory(bf16, kinds.W16, kinds.A16, L40S_SMEM)
    assert (l40s["num_stages"], l40s["BLOCK_N"]) == (2, 128)
    mi300 = h.fit_shared_memory(bf16, kinds.W16, kinds.A16, MI300_SMEM)
    assert (mi300["num_stages"], mi300["BLOCK_N"]) == (2, 64)
    assert h.fit_shared_memory(bf16, kinds.W_INT4, kinds.A16, MI300_SMEM) == bf16
    # the lookup fits the heuristics to the device it runs on, never a tuned entry
    monkeypatch.setattr(configs, "current_shared_memory", lambda: L40S_SMEM)
    picked = h.pick_configs(16, 8, kinds.W16, kinds.A16, KEY.gemm1, KEY.gemm2)
    assert [c["num_stages"] for c in picked] == [2, 2]


def test_a_tuned_entry_is_not_fitted(compiled_lookup, tmp_path, monkeypatch):
    tuned = (_cfg(64, BLOCK_N=256), _cfg(64, BLOCK_K=64))
    _write(tmp_path, {KEY: {16: tuned}}, device="test-gpu")
    monkeypatch.setattr(configs, "current_shared_memory", lambda: MI300_SMEM)
    assert _pick(compiled_lookup) == tuned


def test_the_config_folder_variable_points_the_lookup_there(compiled_lookup, tmp_path,
                                                          monkeypatch):
    """MOECERT_TRITON_CONFIG_DIR: the backend reads the tuned files of that folder (what
    `moecert tune --out DIR` wrote), not the package's; a path that is no folder is refused
    naming the variable."""
    tuned = (_cfg(64, BLOCK_N=256), _cfg(64, BLOCK_K=64))
    elsewhere = tmp_path / "tuned-here"
    elsewhere.mkdir()
    _write(elsewhere, {KEY: {16: tuned}}, device="test-gpu")
    assert _pick(compiled_lookup) == compiled_lookup.default_configs(16)  # CONFIG_DIR: none
    monkeypatch.setenv(configs.CONFIG_DIR_ENV, str(elsewhere))
    configs.config_devices.cache_clear()
    assert _pick(compiled_lookup) == tuned
    monkeypatch.setenv(configs.CONFIG_DIR_ENV, str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="MOECERT_TRITON_CONFIG_DIR=.*missing.*folder"):
        _pick(compiled_lookup)


def test_a_deadline_ends_the_search_with_the_fastest_timed_so_far():
    """Each timing costs one second on a fake clock. Unbounded, the search finds BLOCK_M 64
    with BLOCK_N 128 and 8 warps; a deadline of 0 s keeps both defaults (always timed, so a
    cut search is never slower than the heuristics); one of 10 s has timed every BLOCK_M's
    start (breadth before depth) and no climb: it takes the wider BLOCK_M, a tile it timed,
    where climbing the default's first would have spent the time on one BLOCK_M."""
    ticks = [0.0]
    prefer = fake_timer({"BLOCK_N": 128, "num_warps": 8})

    def timer(run, config):
        ticks[0] += 1.0
        return prefer(run, config) - (40.0 if config["BLOCK_M"] == 64 else 0.0)

    full_stage = FakeStage(rows_per_expert=64)
    full = tune.tune_layer(full_stage, timer, GRID)
    full_ticks = ticks[0]
    assert not full.cut and full.us == 2 * 40.0
    assert [c["BLOCK_M"] for c in full.configs] == [64, 64]
    assert {c["BLOCK_M"] for _, c in full_stage.runs} == {16, 32, 64, 128}

    ticks[0] = 0.0
    stage = FakeStage(rows_per_expert=64)
    at_once = tune.tune_layer(stage, timer, GRID, deadline=tune.Deadline(0, lambda: ticks[0]))
    assert at_once.cut
    assert at_once.configs == tuple(configs.complete(c) for c in stage.defaults)
    assert at_once.us == at_once.default_us
    assert {c["BLOCK_M"] for _, c in stage.runs} == {16}

    ticks[0] = 0.0
    stage = FakeStage(rows_per_expert=64)
    some = tune.tune_layer(stage, timer, GRID, deadline=tune.Deadline(10, lambda: ticks[0]))
    assert some.cut and ticks[0] < full_ticks
    assert [c["BLOCK_M"] for c in some.configs] == [64, 64]
    assert some.us == 2 * 60.0 < some.default_us  # the start alone, no climb from it
    assert {c["BLOCK_M"] for _, c in stage.runs} == {16, 32, 64, 128}


def test_the_tiles_the_layer_runs_now_are_a_climb_start_too():
    """A shipped tile (a file's entry) faster than anything the climb from the heuristics
    reaches: the tuning keeps it, and says what it ran in; one that is slower loses to the
    climb; one whose output disagrees with the default's stops the tuning, named."""
    shipped = (_cfg(32, BLOCK_N=128, num_warps=8), _cfg(32, BLOCK_N=128, num_warps=8))

    def timer(run, config):  # a valley: every single step from the default is slower
        run()
        if config["BLOCK_M"] == 32 and config["BLOCK_N"] == 128 and config["num_warps"] == 8:
            return 30.0
        return 50.0 if (config["BLOCK_N"], config["num_warps"]) == (64, 4) else 60.0

    assert tune.tune_layer(FakeStage(), timer, GRID).us == 100.0  # the defaults: 2 x 50
    stage = FakeStage()
    stage.shipped = shipped
    choice = tune.tune_layer(stage, timer, GRID)
    assert choice.configs == tuple(configs.complete(c) for c in shipped)
    assert (choice.us, choice.shipped_us, choice.default_us) == (60.0, 60.0, 100.0)

    slow = FakeStage()
    slow.shipped = (_cfg(16, BLOCK_N=32), _cfg(16, BLOCK_N=32))
    choice = tune.tune_layer(slow, fake_timer({"BLOCK_N": 128}), GRID)
    assert choice.configs[0]["BLOCK_N"] == 128 and choice.shipped_us == 200.0

    wrong = FakeStage(planted={"BLOCK_M": 32, "BLOCK_N": 128})
    wrong.shipped = shipped
    with pytest.raises(tune.StartRejected, match="the tiles the layer runs now"):
        tune.tune_layer(wrong, timer, GRID)


def test_each_gemms_fastest_start_is_climbed_before_either_gemms_second(monkeypatch):
    """The second GEMM takes half the first's time at every tile (a gated layer's w2): ranked
    by plain time all of its starts would be climbed before the first GEMM's fastest, and a
    deadline would cut the first GEMM's climbs. Ranked against each GEMM's own fastest start,
    BLOCK_M 64 of both GEMMs is climbed first."""
    climbs = []
    original = tune.tune_gemm

    def recording(stage, gemm, start, timer, grid, reference, bound, deadline=tune.NO_DEADLINE,
                  rounds=tune.MAX_ROUNDS, tried=None):
        if rounds:
            climbs.append((gemm, start["BLOCK_M"]))
        return original(stage, gemm, start, timer, grid, reference, bound, deadline, rounds,
                        tried)

    monkeypatch.setattr(tune, "tune_gemm", recording)
    stage = FakeStage(rows_per_expert=64)
    prefer = fake_timer({"BLOCK_N": 128})

    def timer(run, config):
        us = prefer(run, config) - {64: 30.0, 128: 20.0}.get(config["BLOCK_M"], 0.0)
        return us / 2 if stage.last_gemm == 2 else us

    choice = tune.tune_layer(stage, timer, GRID)
    assert sorted(climbs[:2]) == [(1, 64), (2, 64)]
    assert [c["BLOCK_M"] for c in choice.configs] == [64, 64]
