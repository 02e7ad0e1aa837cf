"""The note's table from a smoke run of the vllm backends: scheme variant -> vLLM's chosen
experts kernel (native and forced), each check's worst status, the worst headroom.

    python tools/vllm_repro/smoke_table.py RESULTS [--out FILE]

RESULTS: a results folder or file of `moecert run --suite smoke --backend vllm --backend
vllm-cpu-forced`. Reads rows through moecert.reports only (needs moecert, not vLLM)."""

import argparse
import sys

from moecert.conformance.checks import FULL
from moecert.reports import load, status_matrix, worst_headroom
from moecert.reports.schema import STATUSES

SHORT = {"pass": "ok", "unsupported": "-", "skip": "skip"}


def variant_rows(frame):
    """(variant, backend) -> chosen kernel (or vLLM's refusal), statuses, worst headroom."""
    by_variant = frame.assign(scheme=frame["config"])  # status_matrix groups by "scheme"
    statuses = status_matrix(by_variant)
    checks = [c for c in FULL if c in statuses.columns and statuses[c].notna().any()]
    out = []
    for (backend, config), cell in statuses.iterrows():
        rows = frame[(frame["backend"] == backend) & (frame["config"] == config)]
        claimed = bool(rows["claimed"].fillna(False).any())
        detail = next((d for d in rows["backend_detail"] if d), "")
        if not claimed:
            why = rows.loc[rows["check"] == "claims", "message"].iloc[0]
            detail = "refused: " + why.split(": ", 1)[-1][:90]
        head = rows["headroom"].max()
        cases = rows["case_id"].nunique()
        out.append((config, backend, cases, detail,
                    {c: str(cell[c]) for c in checks if str(cell[c]) != "nan"},
                    None if head != head else float(head)))
    return checks, out


def markdown(frame) -> str:
    checks, rows = variant_rows(frame)
    lines = ["| variant | backend | cases | vLLM's experts kernel | "
             + " | ".join(checks) + " | worst headroom |",
             "|---" * (5 + len(checks)) + "|"]
    refused = {}  # variant -> {backend: reason} of the variants no mode runs
    for config, backend, _, detail, _, _ in rows:
        if detail.startswith("refused"):
            refused.setdefault(config, {})[backend] = detail
    for config, backend, cases, detail, status, head in sorted(rows):
        both = refused.get(config, {})
        if len(both) == 2 and len(set(both.values())) == 1:  # one line for both modes
            if backend != min(both):
                continue
            backend = "both"
        cells = [SHORT.get(status.get(c, ""), status.get(c, "")) for c in checks]
        lines.append(f"| {config} | {backend} | {cases} | {detail} | " + " | ".join(cells)
                     + f" | {'' if head is None else f'{head:.2f}'} |")
    counts = frame.drop_duplicates("case_id").groupby("backend", observed=True).size()
    worst = frame.groupby("case_id")["status"].min().value_counts()
    lines += ["", "cases per backend: " + ", ".join(f"{b} {n}" for b, n in counts.items()),
              "cases by worst status: " + ", ".join(f"{s} {int(worst.get(s, 0))}"
                                                    for s in STATUSES if worst.get(s, 0))]
    entries = worst_headroom(frame)
    lines += ["", "| tolerance entry | rows | failed | worst headroom | metric | case |",
              "|---|---|---|---|---|---|"]
    for e in entries.itertuples():
        lines.append(f"| {e.tolerance} | {e.rows} | {e.failed} | {e.headroom:.2f} | "
                     f"{e.metric} | {e.case_id} |")
    return "\n".join(lines) + "\n"


def main(argv) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    text = markdown(load(args.results))
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
