"""`moecert bench` rows in the report: the floors derived from the raw columns, and a slower
kernel against a baseline flagged by ratio (a planted 2x is, 1% is not; --slower-than moves the
line)."""

from __future__ import annotations

import math

import pytest
from moecert.conformance.cli.app import main
from moecert.reports import compare_runs, load
from moecert.reports.frames import bench, regressions
from moecert.reports.render import markdown, terminal
from moecert.reports.report import Report

COPY, MATMUL = 3e12, 8e14  # bytes/s, flop/s


def bench_row(case_id: str, kernel_s: float, run: str = "base", status: str = "pass",
              marlin_s: float = math.nan, min_bytes: float = 3e8, flops: float = 4e10) -> dict:
    backend, scheme = case_id.split("/")[:2]
    return {"run_id": run, "suite": "bench", "case_id": case_id, "backend": backend,
            "scheme": scheme, "config": scheme, "check": "bench", "status": status,
            "claimed": True, "device": "cuda", "M": int(case_id.split("/")[3][1:]),
            "kernel_s": kernel_s, "min_bytes": min_bytes, "flops": flops,
            "copy_bytes_s": COPY, "matmul_flop_s": MATMUL, "marlin_s": marlin_s,
            "message": "median of 100 calls", "finished_at": "2026-01-01T00:00:00+00:00",
            "case_json": "{}"}


IDS = [f"triton/gptq-int4/qwen3-30b-a3b/M{M}/{mode}" for M in (1, 64) for mode in
       ("apply", "graph")]


def _runs(tmp_path, synthetic, factors: dict[str, float]):
    """A baseline (1 ms each) and a current run with each id's time times its factor."""
    base = [bench_row(i, 1e-3) for i in IDS]
    current = [bench_row(i, 1e-3 * factors.get(i, 1.0), run="cur") for i in IDS]
    return (synthetic.write(tmp_path / "base", base),
            synthetic.write(tmp_path / "cur", current))


def test_the_floors_come_from_the_raw_columns(tmp_path, synthetic):
    rows = [bench_row(IDS[0], 2e-4, marlin_s=1e-4), bench_row(IDS[1], math.nan, status="skip")]
    table = bench(load(synthetic.write(tmp_path / "r", rows)))
    first = table.set_index("case_id").loc[IDS[0]]
    assert first["us"] == pytest.approx(200)
    assert first["achieved_GBps"] == pytest.approx(3e8 / 2e-4 / 1e9)  # 1500 GB/s
    assert first["memory_floor_pct"] == pytest.approx(100 * (3e8 / COPY) / 2e-4)  # 50%
    assert first["compute_floor_pct"] == pytest.approx(100 * (4e10 / MATMUL) / 2e-4)  # 25%
    assert first["ratio_to_marlin"] == pytest.approx(2.0)
    assert (first["model"], first["M"], first["mode"]) == ("qwen3-30b-a3b", 1, "apply")
    assert math.isnan(table.set_index("case_id").loc[IDS[1], "us"])
    report = Report.build(load(tmp_path / "r"))
    assert "timings (moecert bench" in terminal(report) and "1500.0" in terminal(report)
    assert "### Timings" in markdown(report)


def test_a_planted_2x_slowdown_is_flagged_and_a_1_percent_change_is_not(tmp_path, synthetic):
    slow, wobble = IDS[1], IDS[2]
    base, cur = _runs(tmp_path, synthetic, {slow: 2.0, wobble: 1.01})
    diff = compare_runs(load(base), load(cur))
    flagged = regressions(diff)
    assert list(flagged["case_id"]) == [slow] and list(flagged["change"]) == ["slower"]
    assert flagged.iloc[0]["detail"].startswith("x2.00 the baseline's time")
    assert main(["report", str(cur), "--baseline", str(base)]) == 1
    # a threshold above the slowdown lets it pass; one below the wobble flags that too
    assert main(["report", str(cur), "--baseline", str(base), "--slower-than", "2.5"]) == 0
    assert set(regressions(compare_runs(load(base), load(cur), slower_than=1.005))
               ["case_id"]) == {slow, wobble}


def test_a_bench_row_that_errors_now_is_a_new_failure(tmp_path, synthetic):
    base = synthetic.write(tmp_path / "base", [bench_row(i, 1e-3) for i in IDS])
    cur = synthetic.write(tmp_path / "cur", [bench_row(i, 1e-3, run="cur") for i in IDS[1:]]
                          + [bench_row(IDS[0], math.nan, run="cur", status="error")])
    flagged = regressions(compare_runs(load(base), load(cur)))
    assert list(zip(flagged["change"], flagged["case_id"], strict=True)) == [
        ("new_failure", IDS[0])]


@pytest.mark.parametrize("ratio", ["1", "0.5", "x"])
def test_slower_than_must_be_a_ratio_above_one(ratio, tmp_path, synthetic, capsys):
    base, cur = _runs(tmp_path, synthetic, {})
    with pytest.raises(SystemExit) as e:
        main(["report", str(cur), "--baseline", str(base), "--slower-than", ratio])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "--slower-than" in err
