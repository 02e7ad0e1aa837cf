"""`moecert bench` on the CPU with tiny layers: rows with stable ids in the result store, bytes
and flops from the routing actually drawn, a backend that raises costs its rows only, the CUDA
structure (graph capture, its failure) run with a stand-in clock, usage errors exit 2."""

from __future__ import annotations

import math

import pytest
import torch
from moecert.conformance.cli.app import main
from moecert.conformance.performance import bench
from moecert.conformance.performance.marlin_peer import MarlinPeer, marlin_runs, scale_group
from moecert.conformance.performance.timing import Clock
from moecert.kernels import Variant
from moecert.kernels.native import TorchBackend
from moecert.kernels.registry import register_backend, unregister_backend
from moecert.reference import MoEProblem, random_checkpoint
from moecert.reports import load

TINY = ["--layer", "tiny=4,64,64,2", "--M", "1,3", "--repeats", "2", "--warmup", "1"]


def _bench(tmp_path, capsys, *argv, run="a"):
    code = main(["bench", *argv, "--results", str(tmp_path), "--run-id", run])
    out, err = capsys.readouterr()
    return code, out, err


def test_rows_have_stable_ids_and_the_floors_inputs(tmp_path, capsys):
    code, out, _ = _bench(tmp_path, capsys, "--backend", "torch", "--scheme", "bf16", *TINY)
    assert code == 0, out
    first = load(tmp_path, run="a")
    _bench(tmp_path, capsys, "--backend", "torch", "--scheme", "bf16", *TINY, run="b")
    second = load(tmp_path, run="b")
    ids = {f"torch/bf16/tiny/M{M}/{mode}" for M in (1, 3) for mode in ("apply", "graph")}
    assert set(first["case_id"]) == set(second["case_id"]) == ids
    assert set(first["check"]) == {"bench"} and set(first["suite"]) == {"bench"}
    apply = first[first["case_id"].str.endswith("/apply")]
    assert (apply["status"] == "pass").all() and (apply["kernel_s"] > 0).all()
    assert (apply[["copy_bytes_s", "matmul_flop_s", "min_bytes", "flops"]] > 0).all().all()
    graph = first[first["case_id"].str.endswith("/graph")]
    assert (graph["status"] == "skip").all() and graph["kernel_s"].isna().all()
    assert graph["message"].str.contains("not available").all()
    # M=1 routes one token to topk=2 experts: 2 experts' weights plus the activations
    K, N, topk = 64, 64, 2
    one = apply[apply["M"] == 1].iloc[0]
    weights = 2 * (2 * N * K + K * N) * 2  # bf16 w13 and w2 of 2 experts
    assert one["min_bytes"] == weights + 2 * K * 2 + topk * 4 * 2  # x, out, weights and ids
    assert one["flops"] == 2 * topk * (2 * N * K + K * N)
    assert "torch/bf16/tiny/M1/apply" in out and "not available" in out


def test_a_variant_is_timed_under_its_own_ids(tmp_path, capsys):
    """--variant times the named variant of the scheme (its checkpoint: group 32, not the
    default 128, which a 64-wide layer could not hold), two variants get distinct ids, and a
    variant given twice (sym=true is gptq's default) is timed once."""
    code, out, err = _bench(tmp_path, capsys, "--backend", "torch", "--scheme", "gptq-int4",
                            "--variant", "group_size=32", "--variant", "group_size=64, sym=false",
                            "--variant", "sym=true,group_size=32", "--mode", "apply", *TINY)
    assert code == 0, out
    rows = load(tmp_path, run="a")
    labels = ["gptq-int4[g32]", "gptq-int4[g64,asym]"]
    assert sorted(rows["case_id"]) == sorted(f"torch/{label}/tiny/M{M}/apply"
                                             for label in labels for M in (1, 3))
    assert (rows["status"] == "pass").all(), rows["message"].tolist()
    configs = {cid.split("/")[1]: c for cid, c in zip(rows["case_id"], rows["config"],
                                                       strict=True)}
    assert "g32" in configs["gptq-int4[g32]"] and "g64" in configs["gptq-int4[g64,asym]"]
    assert "x 3 variant(s)" in err


def test_touched_experts_come_from_the_routing():
    P = MoEProblem(M=1, K=64, N=64, E=16, topk=4)
    ckpt = random_checkpoint("gptq-int4", P, group_size=32)
    per_expert, shared = bench.expert_bytes(ckpt, P.E)
    assert per_expert * P.E + shared == sum(t.nbytes for t in ckpt.tensors.values())
    for M, least in ((1, 4), (64, 16)):  # one token reads topk experts; 64 tokens read all
        P = MoEProblem(M=M, K=64, N=64, E=16, topk=4)
        sets = bench.input_sets(P, per_expert, shared, torch.device("cpu"), cache=1, seed=0)
        assert len(sets) == 2  # a cache of 1 byte: the least number of sets
        for s in sets:
            experts, pairs = bench.routed(s.ids, P)
            assert experts == least and pairs == M * 4
            assert s.min_bytes == experts * per_expert + shared + sum(
                t.nbytes for t in (s.x, s.weights, s.ids, s.out))
    # with an expert map, experts of other ranks are neither read nor computed
    P = MoEProblem(M=1, K=64, N=64, E=2, topk=2, expert_map=(0, -1, 1, -1))
    assert bench.routed(torch.tensor([[0, 1]]), P) == (1, 1)
    assert bench.routed(torch.tensor([[1, 3]]), P) == (0, 0)


def test_input_sets_overflow_the_cache():
    P = MoEProblem(M=4, K=64, N=64, E=4, topk=2)
    sets = bench.input_sets(P, 1000.0, 0.0, torch.device("cpu"), cache=10_000, seed=0)
    assert sum(s.min_bytes for s in sets) >= bench.ROTATE * 10_000
    assert sum(s.min_bytes for s in sets[:-1]) < bench.ROTATE * 10_000
    assert len({tuple(s.ids.flatten().tolist()) for s in sets}) > 1  # distinct routings


class _FakeCudaClock(Clock):
    """The CUDA code path of `time_mode` on the CPU: a clock that says it is CUDA."""

    def __init__(self):
        super().__init__("cpu")
        self.cuda = True

    def stamp(self):
        return __import__("time").perf_counter()

    def seconds(self, start, end):
        return end - start

    def sync(self):
        pass


def _layer(backend, P):
    layer = backend.create_layer(random_checkpoint("bf16", P), P)
    backend.process_weights_after_loading(layer)
    return layer


def test_graph_mode_replays_the_forward_and_a_failed_capture_is_a_skip(monkeypatch):
    P = MoEProblem(M=2, K=64, N=64, E=4, topk=2)
    backend = TorchBackend()
    layer = _layer(backend, P)
    sets = bench.input_sets(P, 0.0, 0.0, torch.device("cpu"), cache=1, seed=0)
    plan = bench.Plan("cpu", ("torch",), ("bf16",), {}, repeats=2, warmup=1)
    captured = []

    def capture(steps, device):
        captured.extend(steps)
        return steps

    monkeypatch.setattr(bench, "graph_replays", capture)
    status, seconds, message = bench.time_mode("graph", backend, layer, sets, _FakeCudaClock(),
                                               plan)
    assert status == "pass" and seconds > 0 and "CUDA graph of forward()" in message
    assert [c.func for c in captured] == [backend.forward] * len(sets)

    def fails(steps, device):
        try:
            raise RuntimeError("operation not permitted when stream is capturing")
        finally:  # ending the capture fails too, hiding the cause
            raise RuntimeError("operation failed due to a previous error during capture")

    monkeypatch.setattr(bench, "graph_replays", fails)
    status, seconds, message = bench.time_mode("graph", backend, layer, sets, _FakeCudaClock(),
                                               plan)
    assert status == "skip" and math.isnan(seconds)
    assert message.startswith("graph capture failed: RuntimeError: operation not permitted")


def test_the_clock_cycles_the_calls_and_takes_the_median():
    calls = []

    class Scripted(Clock):  # the timed calls take 1, 2, 5, 9 and 1 ticks
        stamps = iter([0, 1, 10, 12, 20, 25, 30, 39, 40, 41])

        def stamp(self):
            return next(self.stamps)

    fns = [lambda i=i: calls.append(i) for i in range(3)]
    # the median, not the mean or the least
    assert Scripted("cpu").median_s(fns, reps=5, warmup=2) == (2, 5)
    assert calls == [0, 1, 0, 1, 2, 0, 1]


def test_a_time_budget_stops_the_repeats_but_not_before_the_least():
    slow = [lambda: __import__("time").sleep(0.002)]
    _, n = Clock("cpu").median_s(slow, reps=1000, warmup=0, budget_s=0.02)
    assert 5 <= n < 100
    _, n = Clock("cpu").median_s(slow, reps=1000, warmup=0, budget_s=1e-9)
    assert n == 5


class _Raises(TorchBackend):
    """torch, raising in apply for M = 3 only."""
    name = "test-bench-raises"

    def apply(self, layer, hidden_states, *args, **kw):
        if hidden_states.shape[0] == 3:
            raise RuntimeError("kernel launch failed")
        return super().apply(layer, hidden_states, *args, **kw)


class _CannotLoad(TorchBackend):
    name = "test-bench-cannot-load"

    def process_weights_after_loading(self, layer):
        raise ValueError("w13_weight: expected a multiple of 256 rows")


@pytest.fixture
def bad_backends():
    for b in (_Raises(), _CannotLoad()):
        register_backend(b)
    yield _Raises.name, _CannotLoad.name
    for name in (_Raises.name, _CannotLoad.name):
        unregister_backend(name)


def test_a_backend_that_raises_costs_its_rows_not_the_run(tmp_path, capsys, bad_backends):
    raises, cannot = bad_backends
    code, out, _ = _bench(tmp_path, capsys, "--backend", raises, "--backend", cannot,
                          "--backend", "torch", "--scheme", "bf16", "--mode", "apply", *TINY)
    assert code == 1, out
    status = dict(zip(load(tmp_path)["case_id"], load(tmp_path)["status"], strict=True))
    assert status == {f"{raises}/bf16/tiny/M1/apply": "pass",
                      f"{raises}/bf16/tiny/M3/apply": "error",
                      f"{cannot}/bf16/tiny/M1/apply": "error",
                      f"{cannot}/bf16/tiny/M3/apply": "error",
                      "torch/bf16/tiny/M1/apply": "pass", "torch/bf16/tiny/M3/apply": "pass"}
    assert "RuntimeError: kernel launch failed" in out
    assert "ValueError: w13_weight: expected a multiple of 256 rows" in out


def test_marlin_is_a_ratio_column_where_it_runs(tmp_path):
    calls = []

    def timer(ops, E, K, N, topk, M, quant, bias, graph):  # time_marlin_w4's us, noisy
        calls.append(M)
        assert quant == Variant.defaults("gptq-int4") and not bias and not graph
        return (70.0, 50.0, 90.0)[len(calls) % 3 - 1] * M

    plan = bench.Plan("cpu", ("torch",), ("gptq-int4", "bf16"),
                      {"tiny": (4, 128, 128, 2)}, Ms=(1, 2), modes=("apply",), repeats=2,
                      warmup=1)
    rows = bench.Bench(plan, marlin=MarlinPeer(None, timer=timer), echo=lambda s: None).run()
    marlin = {r["case_id"]: r["marlin_s"] for r in rows}
    assert marlin["torch/gptq-int4/tiny/M1/apply"] == 50e-6
    assert marlin["torch/gptq-int4/tiny/M2/apply"] == 100e-6
    assert math.isnan(marlin["torch/bf16/tiny/M1/apply"])
    assert calls == [1, 1, 1, 2, 2, 2]  # the fastest of three, once per shape and M
    quant = Variant.defaults("gptq-int4")
    assert marlin_runs(quant, MoEProblem(M=1, K=256, N=256, E=4, topk=2))
    assert not marlin_runs(quant, MoEProblem(M=1, K=256, N=256, E=4, topk=2, dtype="fp16"))
    assert not marlin_runs(Variant.defaults("awq-int4"),
                           MoEProblem(M=1, K=256, N=256, E=4, topk=2))


@pytest.mark.parametrize("scheme,group", [("gptq-int4", 128), ("mxfp4", 32), ("nvfp4", 16)])
def test_the_peers_scales_cover_the_schemes_group(scheme, group):
    """The int4 record's block is 0 (a variant's group): the peer reading it alone divided by
    zero on every gptq-int4 row of the H200 bench of 2026-11-30 ("Marlin failed:
    ZeroDivisionError")."""
    assert scale_group(Variant.defaults(scheme)) == group


def test_a_graph_rows_peer_is_timed_as_a_graph_replay():
    """The peer is timed the way its row is: launched from Python beside an apply row, a
    CUDA graph's replay beside a graph row (on small layers the two differ by the host's
    launches: 129-131 against 187-202 us for Marlin on Qwen3-30B-A3B at M = 16, H200)."""
    asked = []

    def timer(ops, E, K, N, topk, M, quant, bias, graph):
        asked.append(graph)
        return 40.0 if graph else 90.0

    peer = MarlinPeer(None, repeats=1, timer=timer)
    P = MoEProblem(M=2, K=256, N=256, E=4, topk=2)
    quant = Variant.defaults("gptq-int4")
    assert peer.seconds(P, quant, graph=True) == 40e-6
    assert peer.seconds(P, quant) == 90e-6
    assert peer.seconds(P, quant, graph=True) == 40e-6  # measured once per mode
    assert asked == [True, False]


def test_a_peer_that_fails_says_so_on_its_printed_row(tmp_path):
    def timer(ops, E, K, N, topk, M, quant, bias, graph):
        raise ZeroDivisionError("integer division or modulo by zero")

    printed = []
    plan = bench.Plan("cpu", ("torch",), ("gptq-int4",), {"tiny": (4, 128, 128, 2)}, Ms=(1,),
                      modes=("apply",), repeats=2, warmup=1)
    rows = bench.Bench(plan, marlin=MarlinPeer(None, timer=timer), echo=printed.append).run()
    assert rows[0]["status"] == "pass" and math.isnan(rows[0]["marlin_s"])
    assert any(line.startswith("torch/gptq-int4/tiny/M1/apply") and line.endswith(
        "(Marlin failed: ZeroDivisionError: integer division or modulo by zero)")
        for line in printed), printed


def test_marlin_without_cuda_says_not_available_and_the_run_goes_on(tmp_path, capsys):
    lib = tmp_path / "lib.so"
    lib.write_bytes(b"")
    code, out, err = _bench(tmp_path / "r", capsys, "--backend", "torch", "--scheme", "bf16",
                            "--mode", "apply", "--marlin-lib", str(lib), *TINY)
    assert code == 0, out
    assert "ratio_to_marlin: not available: Marlin runs on CUDA only" in err


@pytest.mark.parametrize("argv, says", [
    (["--backend", "nope"], "unknown backend 'nope'"),
    (["--model", "llama"], "unknown model 'llama'"),
    (["--scheme", "int3"], "unknown scheme 'int3'"),
    (["--M", "0,16"], "M list '0,16'"),
    (["--M", "1,x"], "M list '1,x'"),
    (["--M", "4,4"], "a value twice"),
    (["--layer", "tiny=4,64"], "expected NAME=E,K,N,TOPK"),
    (["--layer", "tiny=2,64,64,4"], "TOPK at most E"),
    (["--mode", "eager"], "invalid choice: 'eager'"),
    (["--repeats", "0"], "at least 1"),
    (["--marlin-lib", "/no/such/lib.so"], "--marlin-lib /no/such/lib.so: no such file"),
    (["--scheme", "fp8-w8a8", "--variant", "strategy=channel"],
     "unknown variant key 'strategy' (did you mean 'weight_strategy'?); known: group_size"),
    (["--scheme", "fp8-w8a8", "--variant", "weight_strategy"], "expected KEY=VALUE"),
    (["--scheme", "gptq-int4", "--variant", "sym=no"], "sym takes true or false"),
    (["--scheme", "fp8-w8a8", "--variant", "weight_strategy=row"],
     "--variant weight_strategy=row: not a variant of fp8-w8a8: checkpoint.weight_strategy: "
     "expected one of ('block', 'tensor', 'channel'), found 'row'"),
    (["--scheme", "bf16", "--scheme", "gptq-int4", "--variant", "group_size=32"],
     "not a variant of bf16"),
    (["--variant", "group_size=32"], "--variant needs --scheme"),
])
def test_a_usage_error_is_one_line_and_exit_two(argv, says, tmp_path, capsys):
    try:
        code = main(["bench", *argv, "--results", str(tmp_path / "out")])
    except SystemExit as e:  # argparse's own errors
        code = e.code
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and says in err, err
    assert err.startswith("moecert bench: error: ")
    assert not (tmp_path / "out").exists()
