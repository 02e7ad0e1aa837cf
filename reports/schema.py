"""The result schema (SPEC section 4): one row per (case, check).

Columns, in order: identity (run, case, backend, scheme, the problem's fields), where it ran
(platform, device, versions), the check, its status and whether the backend claimed the
case, every error metric (non-finite count
first), the tolerance entry with its thresholds and the headroom (metric / threshold), the
duration, a message, and the case as JSON so any row can be rerun.
"""

from __future__ import annotations

# Worst first: a case's status is the worst status among its rows. "unsupported" (the backend
# does not claim the case; only the claims and oracle checks judged it) ranks above "pass", so
# an unclaimed case is never counted as passed; "skip" (one check has nothing to judge on a
# claimed case, e.g. no canonical_weights) ranks below it.
STATUSES = ("crash", "timeout", "error", "fail", "xfail", "unsupported", "pass", "skip")
# A case counts against the run when any of its rows has one of these.
FAILING = ("crash", "timeout", "error", "fail")


def case_status(statuses) -> str:
    """The status of a case from its rows' statuses: the worst one ("skip" for no rows)."""
    return min(statuses, key=STATUSES.index, default="skip")

COLUMNS = (
    "run_id", "case_id", "backend", "scheme", "config",
    "M", "K", "N", "E", "topk", "dtype", "activation", "bias", "router_on_input",
    "expert_map", "activation_format", "routing", "seed", "depth",
    "platform", "device", "device_name", "device_uuid", "host",
    "moecert_version", "backend_version", "torch_version", "triton_version",
    "check", "status", "claimed",
    "nonfinite", "max_abs", "max_abs_scaled", "rel_fro", "cosine", "min_row_cosine",
    "norm_ratio", "mismatch_frac", "max_expert_rel_fro",
    "tolerance", "thresholds", "headroom", "duration_s", "message", "case_json",
)
