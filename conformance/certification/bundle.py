"""A certification bundle: the judgement of a `moecert certify` run and the files that hold it.

    DIR/
      CERTIFICATE.txt   first line "CERTIFIED: ..." or "NOT CERTIFIED: <reasons> ..."; the facts
      SUMMARY.md        the same first line; outcomes, waivers, then the Markdown report
      report.html       the HTML report (reports/render.py), the verdict as its title
      manifest.json     the verdict, its reasons, outcome counts, waived cases, run, harness
      environment.json  per shard: device, driver, torch, triton, moecert, backend versions
      tolerances.toml   the tolerance table the run used (its sha256 in the manifest)
      waivers.toml      the waiver file given (--waivers), if any
      source.patch      `git diff HEAD` of the moecert checkout, if it was not clean
      results/          per shard: <run>.<label>.parquet (the rows) and <run>.<label>.record.json
      SHA256SUMS        sha256 of every other file, `sha256sum -c` format

A case's outcome is one of OUTCOMES ("oversize": not run, it needs more memory than the machine
has; the bundle is then not certified, and says so). The bundle certifies when every case of
the suite for the backend is present with every check of its depth, each case passed, was not
claimed (and the claims and oracle checks confirm it), or failed only where a waiver says so,
no check skipped without a reason, every shard is present, all shards agree on harness,
tolerances, source and device, and the backend claims at least one case. Anything else is a
reason on the first line.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from moecert.reports.schema import FAILING

from ..harness.cases import Case
from ..harness.checks import depth_checks
from ..harness.expectations import Expectation, Expectations
from .waivers import parse_waivers

OUTCOMES = ("pass", "unsupported", "waived", "fail", "oversize")
CERTIFY_SUITE = "certify"
RECORD_SUFFIX = ".record.json"
RECORD_FORMAT = "moecert-certify-shard/1"
SUMS = "SHA256SUMS"
# Shard records must agree on these (a bundle is one harness, one table, one source, one
# backend on one kind of device).
_AGREE = ("run_id", "suite", "backend", "imports", "tolerances_sha256", "waivers_sha256",
          "source", "patch_sha256", "model", "shard_costs_sha256")
_SHOWN = 5  # ids named in a reason before "and N more"


class BundleError(ValueError):
    """Not a bundle, or one that cannot be read (exit 2)."""


@dataclass
class Judgement:
    certified: bool
    reasons: list[str]  # why not certified (empty when certified)
    outcomes: dict[str, str]  # case id -> outcome, for the cases present
    waived: list[tuple[str, str]]  # (case id, the waivers' reasons)
    expected: int  # cases the suite holds for the backend
    unused_waivers: list[Expectation] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        c = Counter(self.outcomes.values())
        # "oversize" only where a case was not run (a run that ran everything reads as before)
        return {o: c.get(o, 0) for o in OUTCOMES if o != "oversize" or c.get(o)}


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def judge(records: list[dict], rows: pd.DataFrame, expected: list[Case],
          completion=None) -> Judgement:
    """The verdict on a run: its shard records, its rows (every shard's), the cases the
    suite holds for its backend, and how far the run got (reports.verdict.Completion of its
    results files: a shard interrupted and not resumed is not finished)."""
    reasons = _record_reasons(records)
    if completion is not None and not completion.complete:
        reasons.append(f"incomplete: {completion.words()}")
    waivers_text = records[0].get("waivers") if records else None
    waivers = (parse_waivers(waivers_text, "waivers.toml") if waivers_text
               else Expectations([]))
    by_id = {c.case_id: c for c in expected}
    present = {str(i): g for i, g in rows.groupby("case_id", sort=True)} if len(rows) else {}
    missing = [i for i in by_id if i not in present]
    extra = [i for i in present if i not in by_id]
    if missing:
        reasons.append(f"incomplete: {_few(missing)} of the {len(by_id)} cases of the suite "
                       "missing")
    if extra:
        reasons.append(f"{_few(extra)} not in the suite for this backend")
    dup = rows.duplicated(["case_id", "check"]) if len(rows) else pd.Series(dtype=bool)
    if dup.any():
        reasons.append(f"{_few(sorted(set(rows.loc[dup, 'case_id'])))} with rows run twice")
    outcomes, waived = {}, []
    short_checks, unexplained_skips, oversize = [], [], []
    for case_id, group in present.items():
        case_rows = group.to_dict("records")
        checks = {str(r["check"]) for r in case_rows}
        case = by_id.get(case_id)
        if case is not None and "setup" not in checks:
            lacking = set(depth_checks(case)) - checks
            if lacking:
                short_checks.append(case_id)
        if any(r["status"] == "skip" and not str(r["message"] or "").strip()
               for r in case_rows):
            unexplained_skips.append(case_id)
        bad = [r for r in case_rows if r["status"] in (*FAILING, "xfail")]
        if any(r["status"] == "oversize" for r in case_rows):
            outcomes[case_id] = "oversize"
            oversize.append((case_id, next(str(r["message"]) for r in case_rows
                                           if r["status"] == "oversize")))
        elif bad:
            matched = [waivers.first(r) for r in bad]
            if all(matched):  # only a case waived whole uses its waivers
                waivers.seen(bad)
                outcomes[case_id] = "waived"
                waived.append((case_id, "; ".join(dict.fromkeys(w.reason for w in matched))))
            else:
                outcomes[case_id] = "fail"
        elif any(r["claimed"] is True for r in case_rows):
            outcomes[case_id] = "pass"
        else:
            outcomes[case_id] = "unsupported"
    if short_checks:
        reasons.append(f"reduced run: {_few(short_checks)} without every check of its depth")
    if unexplained_skips:
        reasons.append(f"{_few(unexplained_skips)} with a check skipped without a reason")
    if oversize:
        largest = oversize[0][1].removeprefix("not run: ")
        reasons.append(f"{_few([i for i, _ in oversize])} not run: more memory than the "
                       f"machine had ({oversize[0][0]} {largest})")
    failed = [i for i, o in outcomes.items() if o == "fail"]
    if failed:
        reasons.append(f"{_few(failed)} failed (crash, timeout, error and fail count; "
                       "not waived)")
    claimed = any(o in ("pass", "waived") for o in outcomes.values()) or (
        len(rows) and rows["claimed"].eq(True).any())  # an oversize case it claims counts
    if present and not claimed:
        reasons.append("the backend claims none of the suite's cases")
    return Judgement(not reasons, reasons, outcomes, waived, len(by_id), waivers.unused())


def _record_reasons(records: list[dict]) -> list[str]:
    """What the shard records say against certification: a suite other than certify, shards
    missing, shards that disagree."""
    if not records:
        return ["no shard records (results/*.record.json)"]
    reasons = []
    first = records[0]
    if first["suite"] != CERTIFY_SUITE:
        reasons.append(f"reduced run: suite {first['suite']}, not {CERTIFY_SUITE}")
    for key in _AGREE:
        values = {json.dumps(r.get(key), sort_keys=True) for r in records}
        if len(values) > 1:
            reasons.append(f"shards disagree on {key}: {', '.join(sorted(values))}")
    devices = {device_text(r["environment"]) for r in records}
    if len(devices) > 1:
        reasons.append(f"shards ran on different devices: {', '.join(sorted(devices))}")
    counts = {r["shard"][1] for r in records}
    if len(counts) > 1:
        reasons.append(f"shards disagree on the shard count: {sorted(counts)}")
    count = max(counts)
    have = Counter(r["shard"][0] for r in records)
    lost = [f"{i}/{count}" for i in range(count) if not have[i]]
    if lost:
        reasons.append(f"reduced run: {few_shards(lost, count)} missing")
    twice = [f"{i}/{count}" for i, k in sorted(have.items()) if k > 1]
    if twice:
        reasons.append(f"shard {', '.join(twice)} recorded more than once")
    return reasons


def few_shards(shards: list[str], count: int) -> str:
    """"3 of 60 shards (0/60, 1/60, 2/60)", at most _SHOWN named."""
    shown = ", ".join(shards[:_SHOWN])
    more = f" and {len(shards) - _SHOWN} more" if len(shards) > _SHOWN else ""
    return f"{len(shards)} of {count} shard(s) ({shown}{more})"


def _few(ids: list[str]) -> str:
    shown = ", ".join(ids[:_SHOWN])
    more = f" and {len(ids) - _SHOWN} more" if len(ids) > _SHOWN else ""
    return f"{len(ids)} case(s) ({shown}{more})"


def device_text(env: dict) -> str:
    name, platform = env.get("device_name") or env.get("device"), env.get("platform")
    return f"{name} ({platform})" if platform and platform != name else str(name)


def source_text(record: dict) -> str:
    source = record["source"]
    if source.get("kind") != "git":
        return f"installed {source.get('version', '?')}"
    state = ("clean" if source.get("clean") else
             f"patched, source.patch sha256 {record['patch_sha256'][:12]}")
    return f"git {source['commit'][:12]} {state}"


def model_text(record: dict) -> str:
    """`on model NAME layers L1, L2` for a run on a model folder's layers, else ""."""
    model = record.get("model")
    if not model:
        return ""
    layers = ", ".join(map(str, model["layers"]))
    inputs = f", inputs sha256 {model['inputs_sha256'][:12]}" if model.get("inputs") else ""
    return f" on model {model['name']} layer(s) {layers}{inputs}"


def verdict_line(j: Judgement, records: list[dict]) -> str:
    """The bundle's first line."""
    if not records:
        return "NOT CERTIFIED: " + "; ".join(j.reasons)
    r = records[0]
    facts = (f"backend {r['backend']}{model_text(r)} on {device_text(r['environment'])}, "
             f"suite {r['suite']}, "
             f"moecert {r['environment']['moecert']} ({source_text(r)}), tolerances sha256 "
             f"{r['tolerances_sha256'][:12]}")
    counts = ", ".join(f"{n} {o}" for o, n in j.counts().items())
    if j.certified:
        return f"CERTIFIED: {facts}: {counts} of {j.expected} cases"
    return f"NOT CERTIFIED: {'; '.join(j.reasons)} ({facts}; {counts} of {j.expected} cases)"


# --- files -------------------------------------------------------------------------------------

def read_records(results: Path) -> list[dict]:
    """Every shard record under `results`, ordered by shard."""
    records = []
    for path in sorted(results.glob(f"*{RECORD_SUFFIX}")):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise BundleError(f"{path}: not a readable shard record: {e}") from None
        if not isinstance(record, dict) or record.get("format") != RECORD_FORMAT:
            raise BundleError(f"{path}: not a shard record of format {RECORD_FORMAT}")
        records.append(record)
    return sorted(records, key=lambda r: tuple(r.get("shard") or (0, 1)))


def hash_file(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def bundle_files(folder: Path) -> list[str]:
    """Every file under `folder` but SHA256SUMS, as sorted POSIX paths relative to it."""
    files = (p for p in folder.rglob("*") if p.is_file() or p.is_symlink())
    return sorted(name for name in (p.relative_to(folder).as_posix() for p in files)
                  if name != SUMS)


def write_sums(folder: Path) -> Path:
    lines = [f"{hash_file(folder / name)}  {name}\n" for name in bundle_files(folder)]
    return _write(folder / SUMS, "".join(lines))


def check_sums(folder: Path) -> tuple[int, list[str]]:
    """(files listed, problems): a file whose hash differs, one listed but gone, one present
    but not listed. A SHA256SUMS that cannot be read is a BundleError."""
    try:
        text = (folder / SUMS).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise BundleError(f"{folder}: no readable {SUMS} ({e}); not a bundle") from None
    listed = {}
    for n, line in enumerate(text.splitlines(), 1):
        digest, sep, name = line.partition("  ")
        if (not sep or len(digest) != 64 or name.startswith("/") or ".." in name.split("/")
                or not name):
            raise BundleError(f"{folder / SUMS}: line {n} is not '<sha256>  <path>': {line!r}")
        listed[name] = digest.lower()
    problems = []
    for name, digest in listed.items():
        path = folder / name
        if not path.is_file() or path.is_symlink():
            problems.append(f"{name}: listed in {SUMS} but missing")
        elif hash_file(path) != digest:
            problems.append(f"{name}: sha256 differs from {SUMS} (changed after the bundle "
                            "was made)")
    problems += [f"{name}: not listed in {SUMS} (added after the bundle was made)"
                 for name in bundle_files(folder) if name not in listed]
    return len(listed), problems


def _write(path: Path, text: str) -> Path:
    """Written whole: to a temporary name, then renamed."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return path
