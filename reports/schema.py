"""The result schema (SPEC section 4): one row per (case, check).

Columns, in order: identity (run, case, backend, scheme, the problem's fields), where it ran
(platform, device, versions), the check and its status, every error metric (non-finite count
first), the tolerance entry with its thresholds and the headroom (metric / threshold), the
duration, a message, and the case as JSON so any row can be rerun.
"""

from __future__ import annotations

STATUSES = ("pass", "fail", "error", "crash", "timeout", "skip", "unsupported", "xfail")
# A case counts against the run when any of its rows has one of these.
FAILING = ("fail", "error", "crash", "timeout")

COLUMNS = (
    "run_id", "case_id", "backend", "scheme", "config",
    "M", "K", "N", "E", "topk", "dtype", "activation", "bias", "router_on_input",
    "expert_map", "activation_format", "routing", "seed", "depth",
    "platform", "device", "device_name", "device_uuid", "host",
    "moecert_version", "backend_version", "torch_version", "triton_version",
    "check", "status",
    "nonfinite", "max_abs", "max_abs_scaled", "rel_fro", "cosine", "min_row_cosine",
    "norm_ratio", "mismatch_frac", "max_expert_rel_fro",
    "tolerance", "thresholds", "headroom", "duration_s", "message", "case_json",
)
