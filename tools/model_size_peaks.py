"""A run's model-size peaks as the memory model's test data, beside the model (issue 43).

    python tools/model_size_peaks.py RESULTS [--write]

RESULTS: a results file or folder of a GPU run (`moecert run --results`, e.g. what
tools/gpu_hosts.sh leaves in /tmp/results-0). Prints, per case, its largest
`device_peak_bytes` over its checks and M, the model's budget (schedule.device_need) and
their ratio, worst first; with --write, replaces tests/conformance/harness/data/
model_size_peaks.csv with these rows (then test_device_memory.py holds the model to them).
An external engine's rows (device_memory.ENGINE_BACKENDS: vllm) go to
vllm_model_size_peaks.csv instead, with `oom` 1 where a check ran out of memory (its peak is
a lower bound of what the case needs) and the `run` they come from: --write replaces that
run's rows and keeps the other runs' (an engine's suite is measured a few schemes at a time).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd
from moecert.conformance.harness.cases import Case
from moecert.conformance.harness.device_memory import ENGINE_BACKENDS
from moecert.conformance.harness.schedule import device_need, model_size
from moecert.reports.store import ResultsError, load

DATA = Path(__file__).parent.parent / "tests/conformance/harness/data"
CSV = DATA / "model_size_peaks.csv"
ENGINE_CSV = DATA / "vllm_model_size_peaks.csv"
KEYS = ["backend", "scheme", "model", "E", "K", "N", "topk", "bias", "activation"]


def peaks(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per model-size (backend, scheme, layer): the largest peak of its cases."""
    out = []
    oom = rows["message"].astype(str).str.contains("OutOfMemoryError|out of memory")
    grouped = rows.assign(oom=oom).groupby("case_json", observed=True)
    for (case_json, peak), ran_out, run in zip(grouped["device_peak_bytes"].max().items(),
                                               grouped["oom"].any(), grouped["run_id"].first(),
                                               strict=True):
        case = Case.from_json(case_json)
        if not model_size(case) or pd.isna(peak):
            continue
        P, c = case.problem, json.loads(case_json)
        out.append(dict(backend=case.backend, scheme=case.scheme, model=c.get("model", ""),
                        E=P.E, K=P.K, N=P.N, topk=P.topk, bias=int(P.bias),
                        activation=P.activation, peak_bytes=int(peak),
                        need=device_need(case), oom=int(ran_out), run=run))
    table = pd.DataFrame(out)
    return table.groupby([*KEYS, "run"], as_index=False).agg(
        peak_bytes=("peak_bytes", "max"), need=("need", "max"), oom=("oom", "max"))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results")
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args(argv)
    try:
        rows = load(args.results)
    except ResultsError:  # an older schema: the columns read here have not changed
        rows = pd.read_parquet(args.results)
    table = peaks(rows)
    table["ratio"] = table["peak_bytes"] / table["need"]
    shown = table.sort_values("ratio", ascending=False).assign(
        peak_gib=lambda t: (t.peak_bytes / 2**30).round(2),
        need_gib=lambda t: (t.need / 2**30).round(2), ratio=lambda t: t.ratio.round(3))
    print(shown[["model", "scheme", "backend", "peak_gib", "need_gib", "ratio"]]
          .to_string(index=False))
    print(f"{len(table)} rows; above the model: {int((table.ratio > 1).sum())}; per layer and "
          "backend, largest peak / largest budget (GiB):")
    per = table.groupby(["model", "backend"])[["peak_bytes", "need"]].max() / 2**30
    print(per.round(1).to_string())
    if args.write:
        engine = table["backend"].isin(ENGINE_BACKENDS)
        engine_rows = table[engine]
        if len(engine_rows) and ENGINE_CSV.exists():  # the other runs' rows stay
            kept = pd.read_csv(ENGINE_CSV)
            engine_rows = pd.concat([kept[~kept["run"].isin(engine_rows["run"])], engine_rows])
        for part, path, columns in ((table[~engine], CSV, [*KEYS, "peak_bytes"]),
                                    (engine_rows, ENGINE_CSV,
                                     [*KEYS, "peak_bytes", "oom", "run"])):
            if len(part):
                part.sort_values(["model", "scheme", "backend"])[columns].to_csv(path,
                                                                                 index=False)
                print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
