"""Tolerance tables: which error a backend's output may carry against the float64 reference.

An entry of `conformance/harness/tolerances.toml` is a tuple, not a pair of numbers: a threshold
per gated metric (see `conformance/harness/metrics.py`), the atol/rtol that define a mismatching
element, and a `why` that says how the numbers were derived and measured. Entries are keyed by

    scheme [activation mode] / activation dtype / backend / device kind / shape class

each field a value or "*" (device kind: the torch device type, "cpu", "cuda", "xpu"; shape
class: `shape_class`). `Table.lookup` returns the most specific matching entry: the one with
the most non-"*" fields, ties going to the entry whose first differing field (in the order
above) is specific. The table always holds a catch-all "*" entry, so every lookup returns
one; its key (e.g. ``int8-w8a8[dynamic-token]/*/*/*/*``) goes into the result row.

How metrics are judged (`Tolerance.judge`):
    nonfinite            must be 0, whatever else the entry says
    rel_fro, max_abs_scaled, mismatch_frac, max_expert_rel_fro
                         ceilings: metric <= threshold, used metric / threshold
    cosine, min_row_cosine
                         floors: metric >= floor, used (1 - metric) / (1 - floor)
    norm_ratio           a band (lo, hi) around 1, used |metric - 1| / (distance from 1
                         to the band's edge on that side)
The verdict's `used` (error / threshold) is the worst over the gated metrics present in the
row (1.0 = at the
threshold); a metric the row lacks (max_expert_rel_fro without expert ids) is not gated.
"""

from __future__ import annotations

import functools
import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import torch
from moecert.reference.schemes import SCHEMES
from moecert.reports.schema import BANDS, FLOORS, GATED, MODEL_SHAPE_WEIGHTS
from moecert.reports.schema import shape_class as _shape_class

from .metrics import error_metrics

DEFAULT_PATH = Path(__file__).with_name("tolerances.toml")
KEY_FIELDS = ("scheme", "activation_mode", "dtype", "backend", "device_kind", "shape_class",
              "regime")
ANY = "*"

# Shape classes: one expert's w2 (N x K weights) below MODEL_WEIGHTS is "small" (CPU smoke
# sizes, K, N <= a few hundred), from it up "model" (Qwen3-30B-A3B's 2048 x 768 and larger).
# An entry may differ by class where calibration shows the need; none does yet: 16-bit errors
# do not depend on size, and with int8 activations one re-rounded token (M = 1) errs as much
# at model size as at smoke size (measured: the table's why texts). The rule is declared once,
# in reports/schema.py (failure signatures in the report key on it too).
MODEL_WEIGHTS = MODEL_SHAPE_WEIGHTS


def shape_class(problem) -> str:
    """ "model" when problem.K * problem.N >= 2^20 (model-size layers), else "small"."""
    return _shape_class(problem.K, problem.N)


@dataclass(frozen=True)
class Verdict:
    passed: bool
    used: float  # worst metric / threshold over the gated metrics; > 1 fails
    failures: list[str]
    thresholds: dict


@dataclass(frozen=True)
class Tolerance:
    match: dict  # KEY_FIELDS -> value or "*"
    atol: float  # relative to the output scale max|reference|
    rtol: float
    thresholds: dict  # metric -> ceiling, floor or (lo, hi) band
    why: str
    # the calibration the thresholds come from (MEASURED_KEYS): date, command, rows, the
    # maxima, and a small sample with its rel_fro that tests re-measure (2x either way)
    measured: dict = field(default_factory=dict)

    @property
    def key(self) -> str:
        m = self.match
        scheme = m["scheme"]
        if m["activation_mode"] != ANY:
            scheme += f"[{m['activation_mode']}]"
        key = "/".join([scheme, m["dtype"], m["backend"], m["device_kind"], m["shape_class"]])
        return key if m["regime"] == ANY else f"{key}@{m['regime']}"

    def specificity(self) -> tuple[int, tuple[bool, ...]]:
        specific = tuple(self.match[f] != ANY for f in KEY_FIELDS)
        return sum(specific), specific

    def matches(self, values: dict) -> bool:
        return all(self.match[f] in (ANY, values[f]) for f in KEY_FIELDS)

    def measure(self, actual: torch.Tensor, reference: torch.Tensor,
                expert_ids: torch.Tensor | None = None) -> dict[str, float]:
        """`error_metrics` with this entry's mismatch rule: an element mismatches where
        |actual - reference| > atol * max|reference| + rtol * |reference| (the atol is a
        share of the output scale, so one entry serves outputs of any magnitude)."""
        scale = float(reference.abs().max()) if reference.numel() else 0.0
        return error_metrics(actual, reference, atol=self.atol * scale, rtol=self.rtol,
                             expert_ids=expert_ids)

    def judge(self, metrics: dict) -> Verdict:
        nonfinite = metrics.get("nonfinite", 0)
        if nonfinite:
            return Verdict(False, math.inf, [f"nonfinite {nonfinite} > 0"], self.thresholds)
        failures, used = [], 0.0
        for name, threshold in self.thresholds.items():
            if name not in metrics:
                continue
            h, failure = _judge_metric(name, float(metrics[name]), threshold)
            used = max(used, h)
            if failure:
                failures.append(failure)
        return Verdict(not failures, used, failures, self.thresholds)


def _judge_metric(name: str, value: float, threshold) -> tuple[float, str | None]:
    """(used, failure message or None) of one metric."""
    if math.isnan(value):
        return math.inf, f"{name} is NaN"
    if name in FLOORS:
        h = _share(1.0 - value, 1.0 - threshold)
        return h, f"{name} {value:.7f} < {threshold:.7f}" if value < threshold else None
    if name in BANDS:
        lo, hi = threshold
        h = _share(value - 1.0, hi - 1.0) if value >= 1.0 else _share(1.0 - value, 1.0 - lo)
        bad = not lo <= value <= hi
        return h, f"{name} {value:.5f} outside [{lo:.5f}, {hi:.5f}]" if bad else None
    h = _share(value, threshold)
    if value <= threshold:
        return h, None
    shown, limit = _apart(value, threshold)
    return h, f"{name} {shown} > {limit}"


def _apart(value: float, threshold: float) -> tuple[str, str]:
    """Both numbers with the fewest digits (at least two) that tell them apart, so that a
    failure reads true: 1.64e-02 > 1.56e-02, not 1.6e-02 > 1.6e-02."""
    for digits in range(1, 16):
        a, b = f"{value:.{digits}e}", f"{threshold:.{digits}e}"
        if a != b:
            return a, b
    return repr(value), repr(threshold)


def _share(value: float, limit: float) -> float:
    if limit > 0:
        return max(value, 0.0) / limit
    return 0.0 if value <= 0 else math.inf


@dataclass
class Table:
    entries: list[Tolerance] = field(default_factory=list)
    path: str = ""

    def lookup(self, scheme: str, dtype: str, backend: str = ANY, device_kind: str = ANY,
               shape_class: str = ANY, activation_mode: str | None = None,
               regime: str = "") -> Tolerance:
        """The most specific entry matching the case. `activation_mode` (Variant's
        `activation`) defaults to the scheme's default mode; `regime` is the inputs' regime
        (conformance/harness/inputs.py: "saturated" has entries of its own)."""
        if activation_mode is None:
            info = SCHEMES.get(scheme)
            activation_mode = info.activation_modes[0] if info else "none"
        values = dict(scheme=scheme, activation_mode=activation_mode, dtype=dtype,
                      backend=backend, device_kind=device_kind, shape_class=shape_class,
                      regime=regime)
        found = [e for e in self.entries if e.matches(values)]
        if not found:  # load_table insists on a catch-all entry; a hand-built table may not
            raise LookupError(f"no tolerance entry matches {values} in {self.path}")
        return max(found, key=Tolerance.specificity)


def default_table() -> Table:
    """The packaged table (`load_table()`), read once per process while its file is unchanged:
    every case's setup read and checked it anew, 13 ms a case on this project's CPU, outside
    any check's time, on each of certify's 8360 cases."""
    stat = DEFAULT_PATH.stat()
    return _table_of_file(str(DEFAULT_PATH), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=4)
def _table_of_file(path: str, mtime_ns: int, size: int) -> Table:
    return load_table(path)


def load_table(path: str | Path | None = None) -> Table:
    """Read and check a tolerance table (default: the packaged
    conformance/harness/tolerances.toml)."""
    path = Path(path) if path is not None else DEFAULT_PATH
    with open(path, "rb") as f:
        data = tomllib.load(f)
    entries = [_entry(raw, f"{path}: entry {i}") for i, raw in enumerate(data.get("entry", []))]
    keys = [e.key for e in entries]
    duplicates = sorted({k for k in keys if keys.count(k) > 1})
    if duplicates:
        raise ValueError(f"{path}: duplicate tolerance entries {duplicates}")
    if not any(e.specificity()[0] == 0 for e in entries):
        raise ValueError(f"{path}: no catch-all entry (every key field '*')")
    return Table(entries, str(path))


# [entry.measured]: the measurement behind an entry's thresholds, as data (the `why` says
# what it means). sample: problem ids of the smoke suite (and sample_dtype, to run them in
# another activation dtype), sample_rel_fro: the median rel_fro of the sample on `backend`
# over seeds 0 and 1, which tests/conformance/harness/test_tolerance_reasons.py re-measures.
MEASURED_KEYS = {"date": str, "command": str, "backend": str, "rows": int,
                 "rel_fro_max": float, "max_abs_scaled_max": float, "norm_dev_max": float,
                 "sample": list, "sample_dtype": str, "sample_rel_fro": float}


def _measured(raw, where: str) -> dict:
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: measured must be a table")
    unknown = sorted(set(raw) - set(MEASURED_KEYS))
    if unknown:
        raise ValueError(f"{where}: measured: unknown keys {unknown}; keys: "
                         f"{', '.join(MEASURED_KEYS)}")
    for key, kind in MEASURED_KEYS.items():
        if key in raw and not isinstance(raw[key], kind | int if kind is float else kind):
            raise ValueError(f"{where}: measured.{key} must be a {kind.__name__}")
    missing = sorted({"date", "command", "backend"} - set(raw))
    if missing:
        raise ValueError(f"{where}: measured needs {', '.join(missing)}")
    # a sample is a smoke case re-measured by the reason test; a saturated entry has none (its
    # rows exist only on model folders' layers): the two keys come together or not at all
    if ("sample" in raw) != ("sample_rel_fro" in raw):
        raise ValueError(f"{where}: measured needs sample and sample_rel_fro together")
    return dict(raw)


def _entry(raw: dict, where: str) -> Tolerance:
    raw = dict(raw)
    match = {f: str(raw.pop(f, ANY)) for f in KEY_FIELDS}
    why = str(raw.pop("why", "")).strip()
    if not why:
        raise ValueError(f"{where}: a non-empty `why` is required")
    measured = _measured(raw.pop("measured"), where) if "measured" in raw else {}
    try:
        atol, rtol = float(raw.pop("atol")), float(raw.pop("rtol"))
    except KeyError as e:
        raise ValueError(f"{where}: {e.args[0]} is required") from None
    unknown = set(raw) - set(GATED)
    if unknown:
        raise ValueError(f"{where}: unknown fields {sorted(unknown)}; metrics: {GATED}")
    missing = set(GATED) - set(raw)
    if missing:
        raise ValueError(f"{where}: every metric needs a threshold; missing {sorted(missing)}")
    thresholds = {}
    for name in GATED:
        value = raw[name]
        if name in BANDS:
            lo, hi = (float(v) for v in value)
            if not lo <= 1.0 <= hi:
                raise ValueError(f"{where}: {name} band [{lo}, {hi}] must contain 1")
            thresholds[name] = (lo, hi)
        else:
            thresholds[name] = float(value)
    return Tolerance(match, atol, rtol, thresholds, why, measured)
