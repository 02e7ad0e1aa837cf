"""`moecert tune`: the command without a GPU, and its whole tuning path on the CPU (the
Triton interpreter runs the real kernels; only the timer is fake)."""

from __future__ import annotations

import pytest
import torch
from moecert.conformance.cli.app import main
from moecert.conformance.performance import tune as tune_command
from moecert.kernels.triton_moe import configs
from moecert.kernels.triton_moe.interpret import load_interpreted_kernels
from moecert.reference.models import ModelShape

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.fixture
def triton_runs_here(monkeypatch):
    """The GPU when there is one, else the interpreter (as tests/kernels/conftest.py)."""
    if DEVICE == "cpu":
        load_interpreted_kernels()
        monkeypatch.setenv("TRITON_INTERPRET", "1")


def test_tune_without_cuda_is_one_line_and_exit_2(capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["tune"]) == 2
    captured = capsys.readouterr()
    # "moecert tune: error:" as every subcommand's usage error (issue 40: it lacked "error:")
    assert captured.err.startswith("moecert tune: error: needs a CUDA device")
    assert len(captured.err.splitlines()) == 1 and captured.out == ""


def test_tune_rejects_an_unknown_model_in_one_line(capsys):
    with pytest.raises(SystemExit) as info:
        main(["tune", "--model", "llama-moe"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "llama-moe" in err


def test_tune_reads_the_m_list_as_bench_does(capsys):
    with pytest.raises(SystemExit) as info:
        main(["tune", "--M", "16,x"])
    assert info.value.code == 2
    assert "M list '16,x'" in capsys.readouterr().err


def test_tune_rejects_a_routing_count_below_one_in_one_line(capsys):
    with pytest.raises(SystemExit) as info:
        main(["tune", "--routings", "0"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "--routings" in err and "at least 1" in err


def test_tune_rejects_a_max_seconds_that_is_not_positive_in_one_line(capsys):
    with pytest.raises(SystemExit) as info:
        main(["tune", "--max-seconds", "0"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "--max-seconds" in err


# BLOCK_K 32 and 64 are one kernel for group-32 weights (block_k_for): tried once
TINY_GRID = {"BLOCK_N": (32, 64, 128), "BLOCK_K": (32, 64), "num_warps": (4,), "num_stages": (1,),
             "SWAP_AB": (False, True)}


def test_tuning_on_the_interpreter_writes_a_file_the_backend_reads(triton_runs_here,
                                                                     tmp_path, monkeypatch):
    timed = []

    def timer(run, config):  # narrower is "faster": the climb walks down to BLOCK_N 32 (the
        timed.append(config)  # output check ran the kernel)
        return 10.0 + config["BLOCK_N"]

    shape = ModelShape(E=4, K=128, N=64, topk=2)
    table, timings, spans, rows = tune_command.run_tuning(
        {"tiny": shape}, ["gptq-int4"], [1, 8], DEVICE, timer, grid=TINY_GRID, group_size=32,
        log=lambda *a: None, routings=2)
    assert spans == {}  # group-32 codes have one nibble order (plane_nibbles needs 128)
    assert [r[2] for r in rows] == [1, 8]
    for _, _, _, choice in rows:
        # every candidate ran the real kernel and agreed with the default's output
        assert all(t.us is not None for g in choice.gemms for t in g.tried), \
            [t.why for g in choice.gemms for t in g.tried]
        assert [c["BLOCK_N"] for c in choice.configs] == [32, 32]
        assert choice.us < choice.default_us
    (key,) = table
    assert key == configs.LayerKey("W_INT4", "A16", 4, (128, 128), (128, 64))
    assert set(table[key]) == {2, 16}  # n = M x topk
    assert "tiny" in tune_command.format_rows(rows)

    path = configs.path_for("test-gpu", tmp_path)
    configs.write_table(path, "test-gpu", "Test GPU", {"triton": "x"}, table, timings)
    assert configs.read_table(path) == table
    # the backend on a "GPU" called test-gpu now launches with the tuned configs
    from moecert.kernels.triton_moe import heuristics, kinds

    monkeypatch.setattr(heuristics, "INTERPRET", False)
    monkeypatch.setattr(configs, "CONFIG_DIR", tmp_path)
    monkeypatch.setattr(configs, "current_device_key", lambda: "test-gpu")
    configs.load_table.cache_clear()
    try:
        got = heuristics.pick_configs(16, 4, kinds.W_INT4, kinds.A16, (128, 128),
                                     (128, 64))
    finally:
        configs.load_table.cache_clear()
    assert got == table[key][16]


@pytest.mark.parametrize("fused_cost", [-5.0, 5.0], ids=["fused-faster", "kernel-faster"])
def test_tuning_times_gemm1s_fused_activation_per_bucket(triton_runs_here, fused_cost):
    """Each bucket's GEMM1 entry says whether its activation runs in the epilogue
    (FUSED_ACT), as timed against GEMM1 then the activation kernel, and keeps it when a
    later M re-settles the bucket."""
    def timer(run, config):
        run()
        return 10.0 + config["BLOCK_N"] + (fused_cost if config.get("FUSED_ACT") else 0.0)

    shape = ModelShape(E=4, K=128, N=64, topk=2)
    table, *_ = tune_command.run_tuning(
        {"tiny": shape}, ["gptq-int4"], [1, 8], DEVICE, timer, grid=TINY_GRID, group_size=32,
        log=lambda *a: None, routings=1)
    ((_, buckets),) = table.items()
    assert sorted(buckets) == [2, 16]
    for c1, c2 in buckets.values():
        assert c1["FUSED_ACT"] is (fused_cost < 0) and "FUSED_ACT" not in c2


@pytest.mark.parametrize("sums_cost", [-5.0, 5.0], ids=["sums-faster", "decode-faster"])
def test_tuning_chooses_awqs_zero_points_from_the_sums_or_the_decode(triton_runs_here,
                                                                     sums_cost):
    """AWQ in planes: the climb tries ZERO_SUMS both ways (a per-GEMM choice, round thirteen)
    and writes false where the zero points inside the decode timed faster; the field stays
    out where the default (on) won, and out of a layer without zero points (gptq)."""
    def timer(run, config):
        run()
        sums = config.get("ZERO_SUMS", configs.FIELD_DEFAULTS["ZERO_SUMS"])
        planes = config.get("NIB_SPAN", 0) == 128
        return 10.0 + (0.0 if planes else 50.0) + (sums_cost if sums else 0.0)

    shape = ModelShape(E=4, K=128, N=128, topk=2)
    grid = {"BLOCK_N": (64,), "BLOCK_K": (128,), "num_warps": (4,), "num_stages": (1,)}
    for scheme in ("awq-int4", "gptq-int4"):
        table, _, spans, _ = tune_command.run_tuning(
            {"tiny": shape}, [scheme], [8], DEVICE, timer, grid=grid, group_size=128,
            log=lambda *a: None, routings=1)
        ((key, buckets),) = table.items()
        assert spans[key] == {"w13": 128, "w2": 128}
        for gemm in buckets[16]:
            if scheme == "awq-int4" and sums_cost > 0:
                assert gemm["ZERO_SUMS"] is False
            else:
                assert "ZERO_SUMS" not in gemm


@pytest.mark.parametrize("scheme", ["gptq-int4", "w4a8-int8"])
@pytest.mark.parametrize("prefer", [128, 0], ids=["planes-faster", "adjacent-faster"])
def test_tuning_picks_a_nibble_order_and_the_backend_stores_its_weights_so(
        triton_runs_here, tmp_path, monkeypatch, prefer, scheme):
    """Group-128 int4 weights can be stored in nibble planes (layout.plane_nibbles): the
    tuner times both orders, writes the faster one per linear, and a layer converted
    afterwards on that device stores its codes so, computes what the checkpoint's order
    computes and exports the checkpoint's codes. W4A8's entries are keyed by its int8
    activations, and its layers read their order there too (they once read none)."""
    from moecert.kernels.triton_moe import layout
    from moecert.kernels.triton_moe.backend import TritonBackend
    from moecert.reference import MoEProblem, make_inputs, random_checkpoint

    def timer(run, config):
        return 10.0 if config.get("NIB_SPAN", 0) == prefer else 20.0

    shape = ModelShape(E=4, K=128, N=128, topk=2)
    table, timings, spans, rows = tune_command.run_tuning(
        {"tiny": shape}, [scheme], [1, 8], DEVICE, timer, grid=TINY_GRID,
        group_size=128, log=lambda *a: None, routings=2)
    (key,) = table
    assert key.act == ("A_INT8" if scheme == "w4a8-int8" else "A16")
    assert spans == {key: {"w13": prefer, "w2": prefer}}
    assert all(c.spans == (prefer, prefer) for *_, c in rows)
    path = configs.path_for("test-gpu", tmp_path)
    configs.write_table(path, "test-gpu", "Test GPU", {}, table, timings, spans)
    assert configs.read_spans(path) == spans

    monkeypatch.setattr(configs, "CONFIG_DIR", tmp_path)
    monkeypatch.setattr(configs, "current_device_key", lambda: "test-gpu")
    configs.load_spans.cache_clear()
    P = MoEProblem(M=5, K=128, N=128, E=4, topk=2)
    backend = TritonBackend()
    ckpt = random_checkpoint(scheme, P, seed=3, device=DEVICE, group_size=128)
    try:
        tuned = backend.create_layer(ckpt, P)
        backend.process_weights_after_loading(tuned)
    finally:
        configs.load_spans.cache_clear()
    monkeypatch.setattr(configs, "current_device_key", lambda: None)
    plain = backend.create_layer(ckpt, P)
    backend.process_weights_after_loading(plain)
    assert tuned.meta["w13_nib_span"] == prefer and plain.meta["w13_nib_span"] == 0
    assert torch.equal(tuned.get("w2_q"), plain.get("w2_q")) == (prefer == 0)
    x, w, ids = (t.to(DEVICE) for t in make_inputs(P, seed=4))
    want, got = backend.apply(plain, x, w, ids), backend.apply(tuned, x, w, ids)
    assert want.abs().max() > 0
    torch.testing.assert_close(got, want, rtol=1e-2, atol=1e-2)  # one bf16 spacing
    for p in ("w13", "w2"):
        a, b = backend.canonical_weights(tuned)[p], backend.canonical_weights(plain)[p]
        assert torch.equal(a.codes, b.codes) and torch.equal(a.scales, b.scales)
    assert layout.NIB_SPAN == 128


def test_a_search_cut_by_max_seconds_is_recorded_so(triton_runs_here, tmp_path):
    """--max-seconds 0 on the interpreter: every M keeps the defaults (timed, the real
    kernels' outputs checked), the rows say the search was cut and the file records the bound
    beside the timings; without it nothing says so."""
    clock = iter(range(10**6)).__next__  # one second a reading: any bound is soon past

    def timer(run, config):
        return 10.0 + config["BLOCK_N"]

    shape = ModelShape(E=4, K=128, N=64, topk=2)
    table, timings, _, rows = tune_command.run_tuning(
        {"tiny": shape}, ["gptq-int4"], [1, 8], DEVICE, timer, grid=TINY_GRID, group_size=32,
        log=lambda *a: None, routings=1, max_seconds=1, clock=clock)
    assert all(choice.cut and choice.us == choice.default_us for *_, choice in rows)
    assert all(t.get("cut_at_s") == 1 for t in timings.values()) and len(timings) == 2
    assert tune_command.format_rows(rows).count("(search cut by --max-seconds)") == 2
    path = configs.path_for("test-gpu", tmp_path)
    configs.write_table(path, "test-gpu", "Test GPU", {}, table, timings)
    assert configs.recorded_timings(path) == timings
    _, whole, _, rows = tune_command.run_tuning(
        {"tiny": shape}, ["gptq-int4"], [1], DEVICE, timer, grid=TINY_GRID, group_size=32,
        log=lambda *a: None, routings=1)
    assert not rows[0][3].cut and "cut_at_s" not in next(iter(whole.values()))
    assert "cut" not in tune_command.format_rows(rows)


def test_the_tiles_a_layer_runs_now_are_timed_and_recorded(triton_runs_here, monkeypatch):
    """Where the layer reads a file's entry (here: a stand-in for pick_configs), the tuning
    times those tiles as they are and records their time beside the default's."""
    from moecert.kernels.triton_moe import heuristics

    def entry(num_rows, num_experts, weight, *rest):
        return tuple({**c, "BLOCK_N": 32} for c in heuristics.default_configs(
            num_rows, num_experts, weight))

    monkeypatch.setattr(heuristics, "pick_configs", entry)

    def timer(run, config):
        return 10.0 + config["BLOCK_N"]

    shape = ModelShape(E=4, K=128, N=64, topk=2)
    _, timings, _, rows = tune_command.run_tuning(
        {"tiny": shape}, ["gptq-int4"], [1], DEVICE, timer, grid=TINY_GRID, group_size=32,
        log=lambda *a: None, routings=1)
    (choice,) = [r[3] for r in rows]
    assert choice.shipped_us == 2 * 42.0 and choice.us <= choice.shipped_us
    assert next(iter(timings.values()))["shipped"] == 84.0
    assert "84.0" in tune_command.format_rows(rows)


def test_tuning_some_buckets_keeps_the_nibble_order_the_others_were_tuned_in(
        triton_runs_here, tmp_path, monkeypatch):
    """A file whose int4 entry holds a bucket in nibble planes: tuning the layer at another M
    only, where the adjacent order times faster, keeps the planes (the kept bucket's tiles run
    on weights stored so), says so, and records the planes; with nothing kept it takes the
    faster order (test_tuning_picks_a_nibble_order_and_the_backend_stores_its_weights_so)."""
    from moecert.kernels.triton_moe import heuristics

    def timer(run, config):
        return 10.0 if config.get("NIB_SPAN", 0) == 0 else 20.0

    shape = ModelShape(E=4, K=128, N=128, topk=2)
    args = ({"tiny": shape}, ["gptq-int4"])
    kw = dict(grid=TINY_GRID, group_size=128, routings=1)
    table, timings, spans, _ = tune_command.run_tuning(
        *args, [64], DEVICE, lambda run, c: 30.0 - timer(run, c), log=lambda *a: None, **kw)
    (key,) = table
    assert spans == {key: {"w13": 128, "w2": 128}}  # planes faster at that M
    path = configs.path_for("test-gpu", tmp_path)
    configs.write_table(path, "test-gpu", "Test GPU", {}, table, timings, spans)
    monkeypatch.setattr(heuristics, "INTERPRET", False)
    monkeypatch.setattr(configs, "CONFIG_DIR", tmp_path)
    monkeypatch.setattr(configs, "current_device_key", lambda: "test-gpu")
    configs.load_table.cache_clear()
    configs.load_spans.cache_clear()
    lines = []
    try:
        _, _, spans, rows = tune_command.run_tuning(*args, [1], DEVICE, timer, log=lines.append,
                                                     **kw)
    finally:
        configs.load_table.cache_clear()
        configs.load_spans.cache_clear()
    assert spans == {key: {"w13": 128, "w2": 128}}
    assert all(c.spans == (128, 128) for *_, c in rows)
    assert any("stored nibble order kept" in line and "[128]" in line for line in lines)
