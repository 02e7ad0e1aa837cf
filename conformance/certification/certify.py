"""A certification bundle's parts: the record each shard writes beside its rows, the bundle
assembled from every shard's rows (first line CERTIFIED or NOT CERTIFIED, and why), and its
verification. `moecert certify` (conformance/cli/certify_command.py) runs the suite and calls
these; conformance/certification/bundle.py judges and hashes."""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import json
import os
import sys
from pathlib import Path

from moecert.reports import ResultsError, load, render
from moecert.reports.report import Report

from ..harness.option_values import UsageError
from ..harness.runner import DEFAULT_TIMEOUT_S
from ..harness.tolerances import DEFAULT_PATH as TOLERANCES_PATH
from . import bundle
from .bundle import RECORD_SUFFIX, BundleError, Judgement, sha256_text

# --- a shard's record -------------------------------------------------------------------------

def shard_record(run: str, suite: str, backend: str, shard, cases: int, device: str, *,
                 imports=(), waivers: str | None = None, started: str = "", results: str = "",
                 workers: int = 1, timeout_s: float = DEFAULT_TIMEOUT_S,
                 as_run: tuple | None = None, model: dict | None = None,
                 shard_costs: str | None = None) -> dict:
    """What a shard records beside its rows: its run, how it was run, the environment, the
    tolerance table's and the waiver file's text and hashes, the source's state and patch.
    `as_run`: (tolerances text, source, patch) as `as_run_now()` read them before the run."""
    from ..harness.provenance import environment_record

    tolerances, source, patch = as_run or as_run_now()
    return {
        "format": bundle.RECORD_FORMAT, "run_id": run, "suite": suite, "backend": backend,
        "shard": list(shard), "cases": cases, "device": device, "workers": workers,
        "timeout_s": timeout_s, "imports": list(imports), "argv": sys.argv[1:],
        "started_at": started or now(), "finished_at": now(), "results": results,
        "environment": environment_record(device, backend),
        "source": source, "patch_sha256": sha256_text(patch), "patch": patch,
        "tolerances_sha256": sha256_text(tolerances), "tolerances": tolerances,
        "waivers_sha256": sha256_text(waivers) if waivers is not None else None,
        "waivers": waivers, "model": model,
        # the cost table's hash where --shard-costs balanced the shards (bundle._AGREE)
        "shard_costs_sha256": shard_costs}


def model_record(cases) -> dict | None:
    """What a run on a model folder's layers records (None for the synthesized suite): the
    model, its folder, the layers and inputs, and every case of the suite as JSON (the suite
    a model gives cannot be rebuilt where the folder is absent, as at --verify). Which
    weights were judged (producer, tensors' sha256 per layer) the rows say."""
    sources = {c.source for c in cases if c.source is not None}
    if not sources:
        return None
    first = min(sources, key=lambda s: s.layer)
    return {"name": first.model, "folder": first.folder,
            "layers": sorted({s.layer for s in sources}), "inputs": first.inputs,
            "inputs_sha256": first.inputs_sha256,
            "cases": sorted(c.to_json() for c in cases)}


def as_run_now() -> tuple[str, dict, str]:
    """The tolerance table's text and the source's state and patch, now."""
    from ..harness.provenance import source_state

    return (TOLERANCES_PATH.read_text(encoding="utf-8"), *source_state())


def record_path(results_file: Path) -> Path:
    """A shard's record beside its rows: `<run>.<label>.record.json`."""
    return results_file.with_name(results_file.name.removesuffix(".parquet") + RECORD_SUFFIX)


def now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


# --- assembling --------------------------------------------------------------------------------

def judge_folder(folder: Path) -> tuple[list[dict], object, Judgement]:
    """The shard records, rows and judgement of the run in `folder`/results."""
    from moecert.reports.store import completion

    from ..harness.cases import Case
    from ..harness.suites import build_suite

    results = folder / "results"
    if not results.is_dir():
        raise BundleError(f"{folder}: no results folder; not a certify output")
    records = bundle.read_records(results)
    runs = sorted({str(r.get("run_id")) for r in records})
    if len(runs) > 1:
        raise BundleError(f"{results} holds several runs ({', '.join(runs)}); a bundle is "
                          "one run")
    if not records:
        raise BundleError(f"{results}: no shard records (*{RECORD_SUFFIX}); not a certify "
                          "output")
    try:
        rows = load(results, run=runs[0])
    except (OSError, KeyError, ResultsError) as e:
        raise BundleError(f"{results}: {e.args[0] if isinstance(e, KeyError) else e}") from None
    if rows.empty:
        raise BundleError(f"{results}: no result rows of run {runs[0]}")
    try:  # case ids need no backend module: a verifier without the vendor's package can check
        model = records[0].get("model")
        expected = ([Case.from_json(text) for text in model["cases"]] if model else
                    build_suite(records[0]["suite"], [records[0]["backend"]]))
    except (ValueError, KeyError) as e:
        raise BundleError(f"cannot rebuild the suite for backend "
                          f"{records[0].get('backend')!r}: {e}") from None
    return records, rows, bundle.judge(records, rows, expected,
                                       completion(results, run=runs[0]))


def assemble(folder: Path) -> tuple[str, int]:
    """Write the bundle from the run in folder/results: (its first line, exit code)."""
    results = folder / "results"
    if not results.is_dir():
        raise UsageError(f"{folder}: no results folder (run `moecert certify --out {folder}` "
                         "first, or copy every shard's results/* there)")
    with _locked(results):  # shards finishing together in one folder assemble in turn
        unfinished = _unfinished_alone(results)
        if unfinished:
            return unfinished, 1
        try:
            records, rows, judgement = judge_folder(folder)
        except BundleError as e:
            raise UsageError(str(e)) from None
        line = bundle.verdict_line(judgement, records)
        _write_bundle(folder, records, rows, judgement, line)
    return line, 0 if judgement.certified else 1


def _unfinished_alone(results: Path) -> str | None:
    """The NOT CERTIFIED line of a folder whose run was interrupted before any shard wrote
    its record (nothing to make a bundle of yet: `--resume` finishes the run), else None."""
    from moecert.reports.store import completion, unfinished_journals

    if bundle.read_records(results) or not unfinished_journals(results):
        return None
    got = completion(results)
    resume = f"; resume with: {got.resume[0]}" if got.resume else ""
    return f"NOT CERTIFIED: incomplete: {got.words()}{resume}"


@contextlib.contextmanager
def _locked(folder: Path):
    fd = os.open(folder, os.O_RDONLY)  # a directory's descriptor, for flock
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _write_bundle(folder: Path, records, rows, j: Judgement, line: str) -> None:
    from ..harness.runner import rerun_command

    first = records[0]
    for stale in ("waivers.toml", "source.patch"):
        (folder / stale).unlink(missing_ok=True)
    manifest = {
        "format": "moecert-certify-bundle/1", "verdict": line.split(":", 1)[0],
        "first_line": line, "reasons": j.reasons, "backend": first["backend"],
        "suite": first["suite"], "run_id": first["run_id"], "expected_cases": j.expected,
        "outcomes": j.counts(), "waived": [{"case_id": c, "reason": r} for c, r in j.waived],
        "unused_waivers": [vars(w) for w in j.unused_waivers],
        "shards": [{k: r.get(k) for k in ("shard", "cases", "results", "device", "workers",
                                          "argv", "started_at", "finished_at")}
                   for r in records],
        "moecert": first["environment"]["moecert"], "source": first["source"],
        "tolerances_sha256": first["tolerances_sha256"],
        "waivers_sha256": first["waivers_sha256"], "model": _model_manifest(first, rows),
        "assembled_at": now()}
    bundle._write(folder / "manifest.json", json.dumps(manifest, indent=1) + "\n")
    bundle._write(folder / "environment.json",
                  json.dumps([r["environment"] | {"shard": r["shard"]} for r in records],
                             indent=1) + "\n")
    bundle._write(folder / "tolerances.toml", first["tolerances"])
    if first.get("waivers") is not None:
        bundle._write(folder / "waivers.toml", first["waivers"])
    if first.get("patch"):
        bundle._write(folder / "source.patch", first["patch"])
    bundle._write(folder / "CERTIFICATE.txt", _certificate(line, manifest, records, j))
    report = Report.build(rows, rerun_prefix=rerun_command(
        first["device"], first.get("imports", []), None, (), first.get("timeout_s",
                                                                       DEFAULT_TIMEOUT_S)))
    bundle._write(folder / "SUMMARY.md", _summary_md(line, j, report))
    bundle._write(folder / "report.html", render.html(report, title=line))
    bundle.write_sums(folder)


def _model_manifest(record: dict, rows) -> dict | None:
    """The model a run on a model folder certified: the record's facts and, per layer, the
    producer and the sha256 of the tensors read, as the rows carry them."""
    model = record.get("model")
    if not model:
        return None
    layers = []
    if "model_layer" in rows:
        seen = rows[rows["model_layer"].notna()].drop_duplicates(
            ["model_layer", "producer", "tensors_sha256"])
        layers = [{"layer": int(r["model_layer"]), "producer": r["producer"],
                   "tensors_sha256": r["tensors_sha256"]}
                  for _, r in seen.sort_values("model_layer").iterrows()
                  if r["tensors_sha256"]]
    return {k: model[k] for k in ("name", "folder", "layers", "inputs", "inputs_sha256")} | {
        "read": layers}


def _certificate(line: str, manifest: dict, records: list[dict], j: Judgement) -> str:
    env = records[0]["environment"]
    lines = [line, "",
             f"backend:     {manifest['backend']} (version {env.get('backend_version') or '-'})",
             f"device:      {bundle.device_text(env)}; driver {env.get('driver') or '-'}, "
             f"cuda {env.get('cuda_runtime') or '-'}, hip {env.get('hip_runtime') or '-'}",
             f"software:    moecert {env['moecert']}, torch {env['torch']}, triton "
             f"{env['triton']}, python {env['python']}",
             f"source:      {bundle.source_text(records[0])}",
             f"tolerances:  sha256 {manifest['tolerances_sha256']} (tolerances.toml)",
             *_model_lines(manifest.get("model")),
             f"suite:       {manifest['suite']}, {j.expected} cases, run {manifest['run_id']}, "
             f"{len(records)} shard(s)",
             "outcomes:    " + ", ".join(f"{n} {o}" for o, n in j.counts().items())]
    lines += [f"not certified because: {r}" for r in j.reasons]
    lines += [f"waived:      {c}: {r}" for c, r in j.waived]
    lines += [f"unused waiver: {w.case_id} ({', '.join(w.checks)}): {w.reason}"
              for w in j.unused_waivers]
    lines += ["", f"Check with: moecert certify --verify <this folder> (files: {bundle.SUMS})"]
    return "\n".join(lines) + "\n"


def _model_lines(model: dict | None) -> list[str]:
    if not model:
        return []
    lines = [f"model:       {model['name']} ({model['folder']}), layer(s) "
             f"{', '.join(map(str, model['layers']))}"]
    if model.get("inputs"):
        lines.append(f"inputs:      {model['inputs']} sha256 {model['inputs_sha256']}")
    lines += [f"layer {r['layer']}:     {r['producer']}, tensors read sha256 "
              f"{r['tensors_sha256']}" for r in model.get("read", [])]
    return lines


def _summary_md(line: str, j: Judgement, report: Report) -> str:
    import pandas as pd

    parts = [line, "", "## Certification", "",
             render.markdown_table(pd.DataFrame([j.counts()]).assign(expected=j.expected)), ""]
    if j.reasons:
        parts += ["Not certified because:", ""] + [f"- {render.md_text(r)}" for r in j.reasons]
        parts += [""]
    if j.waived:
        waived = pd.DataFrame(j.waived, columns=["case_id", "reason"])
        parts += [f"### Waived cases ({len(waived)})", "", render.markdown_table(waived), ""]
    return "\n".join(parts) + "\n" + render.markdown(report, title="moecert certify")


# --- verifying ---------------------------------------------------------------------------------

def verify(folder: Path) -> int:
    """0: every file as hashed and the run, judged again here, certifies; 1: a file changed,
    added or gone, or the run does not certify; 2: not a bundle or unreadable."""
    try:
        return _verify(folder)
    except BundleError as e:
        print(f"moecert certify: error: --verify {e}", file=sys.stderr)
        return 2


def _verify(folder: Path) -> int:
    if not folder.is_dir():
        raise BundleError(f"{folder}: no such folder; not a bundle")
    for name in (bundle.SUMS, "manifest.json"):
        if not (folder / name).is_file():
            raise BundleError(f"{folder}: no {name}; not a bundle")
    listed, problems = bundle.check_sums(folder)
    if problems:
        print(f"TAMPERED: {len(problems)} of {listed} files do not match {bundle.SUMS}")
        for p in problems:
            print(f"  {p}")
        return 1
    print(f"intact: {listed} files match {bundle.SUMS}")
    try:
        manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
        recorded = (folder / "CERTIFICATE.txt").read_text(encoding="utf-8").split("\n", 1)[0]
        summary = (folder / "SUMMARY.md").read_text(encoding="utf-8").split("\n", 1)[0]
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BundleError(f"{folder}: unreadable bundle file: {e}") from None
    records, _, j = judge_folder(folder)
    from ..harness.provenance import versions

    here = versions()["moecert"]
    made = records[0]["environment"]["moecert"]
    rebuilt = f"suite {records[0]['suite']} rebuilt with moecert {here}" + (
        f" (the bundle was made with {made})" if here != made else "")
    print(f"{'complete' if not j.reasons else 'judged'}: {len(j.outcomes)} of {j.expected} "
          f"cases present ({rebuilt}); " + ", ".join(f"{n} {o}" for o, n in j.counts().items()))
    line = bundle.verdict_line(j, records)
    disagree = [what for what, first in (("CERTIFICATE.txt", recorded), ("SUMMARY.md", summary),
                                         ("manifest.json", manifest.get("first_line")))
                if first != line]
    if disagree:
        print(f"TAMPERED: the first line of {', '.join(disagree)} is not the verdict its "
              f"results give here: {line}")
        return 1
    print(line)
    return 0 if j.certified else 1
