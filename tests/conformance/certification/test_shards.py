"""Certify across hosts as CI runs it (docs/contract.md, "Several hosts"): three shards as
three processes into three result folders, assembled, give the verdict, counts and bundle
of one process; and shards balanced by the cost each case took in the last run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from moecert.conformance.certification import certify
from moecert.conformance.harness import suites
from moecert.conformance.harness.cases import Case
from moecert.conformance.harness.shard_costs import balanced_shard, read_costs, shard_loads
from moecert.reference import MoEProblem
from moecert.reports.store import load

HELPERS = Path(__file__).parents[1] / "helpers"
SHARDS = 3


def _certify(out: Path, *extra: str) -> subprocess.Popen:
    """`moecert certify` in a process of its own, the suite made small by --import."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(HELPERS), *filter(None, [os.environ.get("PYTHONPATH")])])}
    return subprocess.Popen([sys.executable, "-m", "moecert.conformance.cli", "certify",
                             "--backend", "torch", "--device", "cpu", "--out", str(out),
                             "--import", "small_certify_suite", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _finish(proc: subprocess.Popen) -> tuple[int, str]:
    out, err = proc.communicate(timeout=600)
    return proc.returncode, out + err


def _bundle(out: Path) -> dict:
    """What two bundles of the same cases must agree on: the verdict line less the run's id
    and times, the manifest's verdict and counts, every row's status, the files."""
    manifest = json.loads((out / "manifest.json").read_text())
    rows = load(out / "results")
    names = {line.split("  ", 1)[1] for line in (out / "SHA256SUMS").read_text().splitlines()}
    first = (out / "CERTIFICATE.txt").read_text().splitlines()[0]
    return {"verdict": first.replace(manifest["run_id"], "RUN"),
            "manifest": {k: manifest[k] for k in ("verdict", "reasons", "backend", "suite",
                                                  "expected_cases", "outcomes", "waived")},
            "rows": sorted(zip(rows["case_id"], rows["check"], rows["status"].astype(str),
                               strict=True)),
            "files": sorted(n for n in names if not n.startswith("results/"))}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One process, then three shards balanced by its costs, each a process of its own with
    its own results folder, copied into one folder and assembled."""
    root = tmp_path_factory.mktemp("shards")
    one = _finish(_certify(root / "one"))
    assert one[0] == 0, one[1]
    hosts = [_certify(root / f"host{i}", "--shard", f"{i}/{SHARDS}", "--run-id", "ci-7",
                      "--shard-costs", str(root / "one" / "results")) for i in range(SHARDS)]
    done = [_finish(p) for p in hosts]  # the three at once, as three CI hosts
    assembled = root / "assembled"
    (assembled / "results").mkdir(parents=True)
    for i in range(SHARDS):
        for f in (root / f"host{i}" / "results").iterdir():
            shutil.copy(f, assembled / "results")
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(HELPERS))
        import small_suite  # the suite the shards ran, in this process until the context ends
        mp.setattr(suites, "build_suite", small_suite.build)
        line, code = certify.assemble(assembled)
        verified = certify.verify(assembled)
    return root, one, done, (line, code, verified)


def test_three_shards_assembled_equal_one_process(runs):
    root, _, shards, (line, code, verified) = runs
    for rc, text in shards:
        assert rc == 0 and "waiting for" in text, text
    assert code == 0 and verified == 0, line
    assert line.startswith("CERTIFIED")
    assembled, alone = _bundle(root / "assembled"), _bundle(root / "one")
    assert alone["manifest"]["expected_cases"] == 9 and len(alone["rows"]) > 9
    assert assembled == alone, (assembled["verdict"], alone["verdict"])
    manifest = json.loads((root / "assembled" / "manifest.json").read_text())
    assert len(manifest["shards"]) == SHARDS and all(s["cases"] for s in manifest["shards"])


def test_shards_disagreeing_on_the_cost_table_do_not_certify(runs, tmp_path, monkeypatch):
    root = runs[0]
    folder = tmp_path / "b"
    shutil.copytree(root / "assembled" / "results", folder / "results")
    record = next((folder / "results").glob("*shard0of3.record.json"))
    data = json.loads(record.read_text())
    data["shard_costs_sha256"] = "0" * 64
    record.write_text(json.dumps(data))
    monkeypatch.syspath_prepend(str(HELPERS))
    import small_suite
    monkeypatch.setattr(suites, "build_suite", small_suite.build)
    line, code = certify.assemble(folder)
    assert code == 1 and "shards disagree on shard_costs_sha256" in line


def _case(seed, E=4):
    return [Case(b, "bf16", MoEProblem(M=5, K=64, N=32, E=E, topk=2), seed=seed)
            for b in ("torch", "triton")]


def test_shards_balance_by_cost_and_keep_a_problems_cases_together():
    cases = [c for s in range(12) for c in _case(s)]
    costs = {c.case_id: 1.0 for c in cases}
    for c in _case(0) + _case(1):  # two problems take as long as the other ten together
        costs[c.case_id] = 5.0
    split = [balanced_shard(cases, i, 3, costs) for i in range(3)]
    assert sorted(c.case_id for s in split for c in s) == sorted(c.case_id for c in cases)
    for shard in split:  # a problem's backends in one shard: they share its checkpoint
        problems = {c.case_id.split("/", 1)[1] for c in shard}
        assert all(c.case_id.split("/", 1)[1] in problems for c in cases
                   if c.case_id.split("/", 1)[1] in problems) and len(shard) == 2 * len(problems)
    loads = shard_loads(cases, 3, costs)
    assert max(loads) - min(loads) <= 2.0  # one problem's cost at most
    by_count = [sum(costs[c.case_id] for c in suites.shard(cases, i, 3)) for i in range(3)]
    assert max(loads) <= max(by_count)
    assert split == [balanced_shard(list(cases), i, 3, dict(costs)) for i in range(3)]


def test_a_case_the_last_run_lacked_costs_the_median(tmp_path):
    cases = [c for s in range(4) for c in _case(s)]
    costs = {c.case_id: 2.0 for c in cases[:6]}  # the last problem is new
    loads = shard_loads(cases, 2, costs)
    assert sorted(loads) == [8.0, 8.0]


def test_costs_come_from_the_rows_check_time(runs):
    root = runs[0]
    costs = read_costs(root / "one" / "results")
    rows = load(root / "one" / "results")
    assert set(costs) == set(rows["case_id"])
    some = rows["case_id"].iloc[0]
    assert costs[some] == pytest.approx(rows[rows.case_id == some]["duration_s"].sum())
