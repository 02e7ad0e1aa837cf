"""The result schema (SPEC section 4): one row per (case, check), declared once.

Every writer (conformance/harness/execute.py) and reader (store, frames, calibrate, the runner's
summary) takes the columns, their dtypes, the statuses and the metric names from here.

Columns, in order: identity (run, suite, case, problem, backend, scheme, the problem's
fields), where it ran (platform, device, versions), the check, its status and whether the
backend claimed the case, every error metric (non-finite count first), the tolerance entry with
one column per threshold and `used` (error / threshold: the share of the tolerance used,
above 1 fails), timings, when the row was
made, a message, and the case as JSON so any row can be rerun.

`moecert bench` writes rows of the same schema, check "bench", one per (backend, scheme
variant, model, M, mode): `kernel_s` the median time, and the raw facts the floors are derived
from (reports/frames.py `bench_metrics`): the bytes the routed experts' weights and the
activations occupy, the flops, the device's copy bandwidth and GEMM rate measured in the same
run, and Marlin's time where it was measured.
"""

from __future__ import annotations

import math

import pandas as pd

# Bumped whenever a column is added, removed, renamed or changes meaning: `load` reads the
# older versions MIGRATIONS names (their columns renamed) and refuses any other rather than
# guessing.
SCHEMA_VERSION = 7
# `retried`'s reasons, the first words of its note: the runner writes them
# (conformance/harness/runner.py), the verdict counts them apart (reports/verdict.py). A case
# that ran out of memory beside others and ran again alone; a case that failed on the GPU
# under --mps, where another worker's fault reaches it, and ran again outside MPS.
RETRIED_OUT_OF_MEMORY = "ran out of memory beside other cases"
RETRIED_UNDER_MPS = "failed on the GPU under MPS"
# 7 (this release, from 6): `retried` (why a case was run a second time, alone on its GPU)
# and `regime`, the regime the row's inputs were drawn in (conformance/harness/inputs.py);
# a version 6 file reads with both empty.
# 6 (from 5): the model columns (model, model_path, model_layer, producer,
# tensors_sha256), `numerics` (what a backend declares it computes),
# Older versions `load` still reads: {version: {old column: new column}}. 6 renamed
# `headroom` (error / threshold, bigger is worse) to `used`, added `imports` and
# `error_profile`, and the status "oversize".
MIGRATIONS = {5: {"headroom": "used"}, 6: {}}
# The key under which Parquet metadata and the journal's header line carry the version.
VERSION_KEY = "moecert_schema_version"

# Worst first: a case's status is the worst status among its rows. "unsupported" (the backend
# does not claim the case; only the claims and oracle checks judged it) ranks above "pass", so
# an unclaimed case is never counted as passed; "skip" (one check has nothing to judge on a
# claimed case, e.g. no canonical_weights) ranks below it. "oversize": the case was not run,
# because it needs more memory than the machine has (conformance/harness/memory.py); neither a pass
# nor a failure of the backend, and a run holding one is not green.
STATUSES = ("crash", "timeout", "error", "fail", "oversize", "xfail", "unsupported", "pass",
            "skip")
# A case counts against the run when any of its rows has one of these.
FAILING = ("crash", "timeout", "error", "fail")
# Ordered worst first, so `.min()` of a status column is its worst status and sorting
# ascending puts the worst rows first.
STATUS_DTYPE = pd.CategoricalDtype(STATUSES, ordered=True)

# Metrics a tolerance entry gates (conformance/harness/tolerances.py judges them), by kind:
CEILINGS = ("rel_fro", "max_abs_scaled", "mismatch_frac", "max_expert_rel_fro")  # <= threshold
FLOORS = ("cosine", "min_row_cosine")  # >= floor
BANDS = ("norm_ratio",)  # inside [lo, hi]
GATED = CEILINGS + FLOORS + BANDS
# The check of a `moecert bench` row.
BENCH_CHECK = "bench"
# Every metric column (conformance/harness/metrics.py computes them), non-finite count first.
METRICS = ("nonfinite", "max_abs", "max_abs_scaled", "rel_fro", "cosine", "min_row_cosine",
           "norm_ratio", "mismatch_frac", "max_expert_rel_fro")
# The row's thresholds, one column each: a ceiling or floor as thr_<metric>, a band as
# thr_<metric>_lo and thr_<metric>_hi.
THRESHOLD_COLUMNS = {m: ((f"thr_{m}_lo", f"thr_{m}_hi") if m in BANDS else (f"thr_{m}",))
                     for m in GATED}

_STR, _INT, _FLOAT, _BOOL, _CAT = "str", "Int64", "float64", "boolean", "category"
COLUMN_DTYPES = {
    "run_id": _STR, "suite": _STR, "case_id": _STR, "problem_id": _STR,
    "backend": _CAT, "scheme": _CAT, "config": _STR,
    "M": _INT, "K": _INT, "N": _INT, "E": _INT, "topk": _INT, "dtype": _STR,
    "activation": _STR, "bias": _BOOL, "router_on_input": _BOOL, "expert_map": _STR,
    "activation_format": _STR, "routing": _STR, "seed": _INT, "depth": _STR,
    "platform": _STR, "device": _STR, "device_name": _STR, "device_uuid": _STR, "host": _STR,
    "moecert_version": _STR, "backend_version": _STR, "torch_version": _STR,
    "triton_version": _STR,
    "backend_detail": _STR,  # what the case's processed layer runs (the backend's describe)
    # a case on a model folder's layer (`moecert run --checkpoint`); empty for synthesized
    # checkpoints: the folder's name and path, the decoder layer, the producing tool as the
    # loader read it, and a sha256 over the tensors read (which weights were judged)
    "model": _STR, "model_path": _STR, "model_layer": _INT, "producer": _STR,
    "tensors_sha256": _STR,
    # what the processed layer declares it computes where that differs from the checkpoint's
    # scheme (the backend's numerics, e.g. "activation=dynamic-token, weight_scale_dtype=
    # bfloat16"); the case was judged against that reading of the checkpoint; "" for none
    "numerics": _STR,
    # the regime the row's hidden states were drawn in (conformance/harness/inputs.py): for a
    # model folder's layer with static input scales "calibrated" (GEMM1's input amax 0.9x its
    # calibrated amax) or, the saturation check's row, "saturated" (4x); "given" for
    # `--inputs` hidden states; "" for synthesized checkpoints and layers without static scales
    "regime": _STR,
    "check": _CAT, "status": STATUS_DTYPE, "claimed": _BOOL,
    **{m: _FLOAT for m in METRICS},
    "tolerance": _STR,
    **{c: _FLOAT for cols in THRESHOLD_COLUMNS.values() for c in cols},
    "used": _FLOAT,  # error / threshold, the worst gated metric: 0.4 used 0.4 of it
    # failing accuracy rows only: where the error sits, as JSON {"expert": [rel_fro of each
    # expert's rows], "token": [rel_fro of each output row]} (conformance/harness/metrics.py)
    "error_profile": _STR,
    "duration_s": _FLOAT,  # the check's wall time, reference included
    "kernel_s": _FLOAT,  # the backend's time per call (`moecert bench`: the median)
    # the GPU memory the check's process held at most (the caching allocator's reserved
    # high-water mark; empty on a CPU): what the runner's memory budget per GPU is sized from
    "device_peak_bytes": _FLOAT,
    # why the case's rows are its second try, "" for a first: it ran out of device memory
    # beside other cases and was run again alone on its GPU (conformance/harness/runner.py)
    "retried": _STR,
    # `moecert bench` only (conformance/performance/bench.py):
    "min_bytes": _FLOAT,  # weights of the experts the routing touches + activations in/out
    "flops": _FLOAT,  # 2 x routed tokens x (w13 rows x K + K x N)
    "copy_bytes_s": _FLOAT,  # the device's copy bandwidth, bytes read + written per second
    "matmul_flop_s": _FLOAT,  # the device's bf16 GEMM rate
    "marlin_s": _FLOAT,  # vLLM's Marlin on the same layer and M (--marlin-lib)
    "finished_at": "datetime64[ns, UTC]",
    "message": _STR, "case_json": _STR,
    # the modules `--import` loaded for the run (space-separated): a rerun needs them too
    "imports": _STR,
}
COLUMNS = tuple(COLUMN_DTYPES)


# A problem is of the "model" shape class when K x N reaches this (model-size layers), else
# "small": tolerance entries (conformance/harness/tolerances.py) and failure signatures key on it.
MODEL_SHAPE_WEIGHTS = 1 << 20


def shape_class(K: int, N: int) -> str:
    """ "model" when K * N >= MODEL_SHAPE_WEIGHTS, else "small"."""
    return "model" if K * N >= MODEL_SHAPE_WEIGHTS else "small"


def case_status(statuses) -> str:
    """The status of a case from its rows' statuses: the worst one ("skip" for no rows)."""
    return min(statuses, key=STATUSES.index, default="skip")


def problem_id(case_id: str) -> str:
    """The case id without its backend: the same problem on every backend."""
    return case_id.split("/", 1)[1] if "/" in case_id else case_id


def threshold_columns(thresholds: dict) -> dict:
    """A tolerance entry's thresholds ({metric: ceiling, floor or (lo, hi)}) as row columns."""
    out = {}
    for metric, value in thresholds.items():
        names = THRESHOLD_COLUMNS[metric]
        values = tuple(value) if len(names) == 2 else (value,)
        out.update({n: float(v) for n, v in zip(names, values, strict=True)})
    return out


def thresholds_of(row) -> dict:
    """The inverse of `threshold_columns`: {metric: threshold} of a row (a dict or a Series),
    the metrics it has thresholds for."""
    out = {}
    for metric, names in THRESHOLD_COLUMNS.items():
        values = [row.get(n) for n in names]
        if all(_number(v) for v in values):
            out[metric] = tuple(float(v) for v in values) if len(names) == 2 else float(values[0])
    return out


def error_form(metric: str, value: float) -> float:
    """A metric as an error, 0 exact and larger worse: a ceiling as it is, a floor as
    1 - value, a band as |value - 1|."""
    if metric in FLOORS:
        return 1.0 - value
    if metric in BANDS:
        return abs(value - 1.0)
    return value


def threshold_form(metric: str, threshold) -> float:
    """A threshold in the same error form (a band's nearer edge)."""
    if metric in FLOORS:
        return 1.0 - threshold
    if metric in BANDS:
        lo, hi = threshold
        return min(1.0 - lo, hi - 1.0)
    return float(threshold)


def _number(v) -> bool:
    return v is not None and v is not pd.NA and not (isinstance(v, float) and math.isnan(v))
