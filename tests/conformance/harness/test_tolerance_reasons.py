"""Each tolerance entry's reason is today's measurement: its sample (a case or two of the smoke
suite, on the backend the entry was calibrated on, seeds 0 and 1, CPU) is re-measured, and the
median rel_fro must lie within 2x of the number the entry records (`[entry.measured]`
sample_rel_fro), either way. An entry whose error shrank (a rounding the backends no longer
make) is as stale as one whose error grew: its thresholds were sized for another error.
"""

from __future__ import annotations

import statistics
from dataclasses import replace

import pytest
from moecert.conformance.harness.execute import run_case
from moecert.conformance.harness.measured_sample import SEEDS, sample_cases
from moecert.conformance.harness.tolerances import load_table
from moecert.conformance.mutants import LEGIT, register_mutants
from moecert.reference.schemes import ACTIVATION_DTYPES, SCHEMES

TABLE = load_table()
MEASURED = [e for e in TABLE.entries if e.measured.get("sample")]


def test_every_entry_but_the_catch_all_records_its_measurement():
    for e in TABLE.entries:
        if e.specificity()[0]:
            assert e.measured, f"{e.key}: no [entry.measured]"
            assert e.measured["date"] >= "2026-11-28", (e.key, "re-measured before issue 31")
            # a saturated row exists only on a model folder's layer (no smoke sample): its
            # folder runs judge it (test_model_run.py, test_regime.py); a GPU entry's rows
            # exist only on a GPU (tools/gpu_ci.sh judges under it)
            assert (e.measured.get("sample") or e.match.get("regime") == "saturated"
                    or e.match.get("device_kind") not in ("*", "cpu")), e.key


def test_the_catch_all_covers_no_scheme_mode_or_dtype():
    """Its measurement: no case reaches it (every activation dtype has its own entry), so it
    judges only a backend's scheme the table has never seen, at the bf16 bounds."""
    for name, info in SCHEMES.items():
        for mode in info.activation_modes:
            for dtype in ACTIVATION_DTYPES:
                found = TABLE.lookup(name, dtype, activation_mode=mode)
                assert found.specificity()[0] > 0, (name, mode, dtype)


@pytest.mark.parametrize("entry", MEASURED, ids=lambda e: e.key)
def test_the_measured_error_is_still_todays(entry):
    m = entry.measured
    if m["backend"] in LEGIT:  # tests/conftest.py unregisters it after the test
        register_mutants([m["backend"]])
    values = []
    for case in sample_cases(entry):
        for seed in SEEDS:
            (row,) = run_case(replace(case, seed=seed), "cpu", checks=("accuracy",))
            assert row["tolerance"] == entry.key, (case.case_id, row["tolerance"])
            assert row["status"] == "pass", row["message"]
            values.append(row["rel_fro"])
    got, want = statistics.median(values), m["sample_rel_fro"]
    assert want / 2 <= got <= want * 2, (
        f"{entry.key}: the sample's rel_fro is {got:.3g} today, the entry records {want:.3g} "
        f"(measured {m['date']}): re-run `{m['command']}` and revisit the thresholds")


GPU_ENTRIES = [e for e in TABLE.entries if e.match["device_kind"] not in ("*", "cpu")
               and "rel_fro_max" in e.measured]


@pytest.mark.parametrize("entry", GPU_ENTRIES, ids=lambda e: e.key)
def test_a_gpu_entry_keeps_the_2x_rule_on_what_the_gpu_measured(entry):
    """A GPU entry has no CPU sample to re-measure; what keeps it honest is the header's rule
    against the maxima it records: each threshold at least 2x the GPU's largest error, and no
    looser than the unit's next step above that (no slack chosen to pass)."""
    m, t = entry.measured, entry.thresholds
    for metric, measured in (("rel_fro", m["rel_fro_max"]),
                             ("max_abs_scaled", m["max_abs_scaled_max"])):
        assert 2 * measured <= t[metric] <= 3 * measured, (entry.key, metric, t[metric])
    lo, hi = t["norm_ratio"]
    assert 2 * m["norm_dev_max"] <= min(1 - lo, hi - 1) <= 10 * m["norm_dev_max"], entry.key


def test_a_gpu_entry_judges_gpu_rows_only():
    """The cuda FP8 entries (the tensor-core GEMM's accumulation) never judge a CPU row: the
    CPU's exact accumulation keeps the tighter entries."""
    assert GPU_ENTRIES
    for e in GPU_ENTRIES:
        scheme, mode, kind = e.match["scheme"], e.match["activation_mode"], e.match["device_kind"]
        for regime in ("calibrated", "saturated"):
            on_gpu = TABLE.lookup(scheme, "bf16", "grouped", kind, "small",
                                  activation_mode=mode, regime=regime)
            on_cpu = TABLE.lookup(scheme, "bf16", "grouped", "cpu", "small",
                                  activation_mode=mode, regime=regime)
            assert on_gpu.match["device_kind"] == kind, (e.key, regime, on_gpu.key)
            assert on_cpu.match["device_kind"] == "*", (e.key, regime, on_cpu.key)
            if regime == "saturated" and mode == "static-tensor":
                assert on_gpu.match["regime"] == "saturated", on_gpu.key
