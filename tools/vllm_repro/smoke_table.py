"""The note's table from a smoke run of the vllm backends: scheme variant -> vLLM's chosen
experts kernel (native and forced), each check's worst status over the claimed cases, the
worst share of the accuracy tolerance used (1 = at the tolerance) of passing and of expected-failure rows.

    python tools/vllm_repro/smoke_table.py RESULTS [--out FILE]

RESULTS: a results folder or file of `moecert run --suite smoke --backend vllm --backend
vllm-cpu-forced`. Reads rows through moecert.reports only (needs moecert, not vLLM)."""

import argparse
import sys

from moecert.conformance.harness.checks import FULL
from moecert.reports import load, status_matrix, worst_used
from moecert.reports.schema import STATUSES

SHORT = {"pass": "ok", "unsupported": "-"}


def variant_rows(frame):
    """(variant, backend) -> claimed cases, the kernel(s) vLLM built for them (or its refusal),
    each check's worst status over the claimed cases, the most of the accuracy tolerance used by the
    passing and of the expected-failure rows."""
    claimed_ids = set(frame.loc[frame["claimed"].fillna(False).astype(bool), "case_id"])
    claimed = frame[frame["case_id"].isin(claimed_ids)]
    statuses = status_matrix(claimed.assign(scheme=claimed["config"]))  # per variant
    checks = [c for c in FULL if c in statuses.columns and statuses[c].notna().any()]
    out = []
    for (backend, config), rows in frame.groupby(["backend", "config"], observed=True):
        cases = rows["case_id"].nunique()
        mine = rows[rows["case_id"].isin(claimed_ids)]
        n = mine["case_id"].nunique()
        if not n:
            why = rows.loc[rows["check"] == "claims", "message"].iloc[0]
            out.append((config, backend, f"0 of {cases}", "refused: " + _reason(why), {},
                        "", ""))
            continue
        kernels = " / ".join(sorted({d for d in mine["backend_detail"] if d}))
        cell = statuses.loc[(backend, config)]
        acc = mine[mine["check"] == "accuracy"]
        out.append((config, backend, f"{n} of {cases}", kernels,
                    {c: str(cell[c]) for c in checks if str(cell[c]) != "nan"},
                    _worst(acc[acc["status"] == "pass"]), _worst(acc[acc["status"] == "xfail"])))
    return checks, out


def _reason(message: str) -> str:
    """vLLM's refusal without the adapter's prefixes, cut to a table cell."""
    why = message.removeprefix("not claimed: ").split("refuses it: ", 1)[-1]
    why = why.split("; forcing it raised", 1)[0]
    return why[:100] + ("..." if len(why) > 100 else "")


def _worst(rows) -> str:
    return "" if rows.empty else f"{rows['used'].max():.2f}"


def markdown(frame) -> str:
    checks, rows = variant_rows(frame)
    lines = ["| variant | backend | claimed cases | vLLM's experts kernel | "
             + " | ".join(checks) + " | accuracy tolerance used (pass) | (xfail) |",
             "|---" * (6 + len(checks)) + "|"]
    refused = {}  # variant -> {backend: reason} of the variants no mode runs
    for config, backend, _, detail, _, _, _ in rows:
        if detail.startswith("refused"):
            refused.setdefault(config, {})[backend] = detail
    for config, backend, cases, detail, status, head, xhead in sorted(rows):
        both = refused.get(config, {})
        if len(both) == 2 and len(set(both.values())) == 1:  # one line for both modes
            if backend != min(both):
                continue
            backend = "both"
        cells = [SHORT.get(status.get(c, ""), status.get(c, "")) for c in checks]
        lines.append(f"| {config} | {backend} | {cases} | {detail} | " + " | ".join(cells)
                     + f" | {head} | {xhead} |")
    counts = frame.drop_duplicates("case_id").groupby("backend", observed=True).size()
    worst = frame.groupby("case_id")["status"].min().value_counts()
    lines += ["", "cases per backend: " + ", ".join(f"{b} {n}" for b, n in counts.items()),
              "cases by worst status: " + ", ".join(f"{s} {int(worst.get(s, 0))}"
                                                    for s in STATUSES if worst.get(s, 0))]
    entries = worst_used(frame[frame["status"] == "pass"])
    lines += ["", "Passing rows, per tolerance entry:", "",
              "| tolerance entry | rows | most used | metric | case |",
              "|---|---|---|---|---|"]
    for e in entries.itertuples():
        lines.append(f"| {e.tolerance} | {e.rows} | {e.used:.2f} | {e.metric} | "
                     f"{e.case_id} |")
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
