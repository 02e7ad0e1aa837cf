"""`moecert certify`: a certification bundle for one backend on this device, and its check.

    moecert certify --backend NAME --out DIR [--waivers FILE] [-n N] [--device D] [--import M]
                    [--timeout S] [--shard I/N --run-id ID] [--resume]
    moecert certify --assemble DIR
    moecert certify --verify DIR

The first runs the whole `certify` suite for the backend (no subsetting: no flag selects
cases or checks, and no expected-failure list applies) into DIR/results through `moecert
run`'s machinery, records where and with what it ran (conformance/harness/provenance.py, the
tolerance table, the waivers, the source's git state and patch), and writes the bundle
(conformance/certification/bundle.py) whose first line says CERTIFIED or NOT CERTIFIED and why.

Several hosts: each runs `--shard I/N` with the same `--run-id` into its own DIR; copy every
DIR/results/* into one DIR/results and run `--assemble DIR` (a shard that finds every shard's
record beside its own assembles by itself, so shards writing into one shared DIR need no
extra step). One host with several GPUs needs no shards: `-n` workers spread over the GPUs.

Exit codes: run and assemble 0 certified, 1 not (a shard that waits for other shards: 0
when its own cases passed, 1 when not); --verify 0 certifying and intact, 1
non-certifying or tampered, 2 not a bundle or unreadable; 2 for a usage error.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from moecert.reports.store import run_id_of

from ..certification import bundle
from ..certification.bundle import BundleError
from ..certification.certify import (
    as_run_now,
    assemble,
    model_record,
    now,
    record_path,
    shard_record,
    verify,
)
from ..certification.waivers import parse_waivers
from ..harness.imports import import_modules
from ..harness.option_values import (
    UsageError,
    check_backends,
    device_or_default,
    output_file,
    writable_folder,
)
from ..harness.shard_costs import costs_sha256
from . import run_command
from .arguments import (
    add_execution_arguments,
    add_model_arguments,
    add_models,
    add_run_id,
    add_shard,
    add_suite,
)


def add_arguments(p) -> None:
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--out", metavar="DIR", help="run the certify suite; write the bundle here")
    mode.add_argument("--assemble", metavar="DIR",
                      help="make the bundle from the shards in DIR/results")
    mode.add_argument("--verify", metavar="DIR",
                      help="re-hash a bundle and re-judge its run: 0 certifying and intact")
    p.add_argument("--backend", metavar="NAME", help="the backend to certify (with --out)")
    p.add_argument("--waivers", metavar="FILE",
                   help="TOML [[waiver]] entries {case_id, checks, reason}: failures the "
                        "bundle lists as waived (the README's \"Certifying a backend\")")
    p.add_argument("--junit", metavar="FILE", default=None, type=output_file,
                   help="with --out or --assemble: also write the run's rows as JUnit XML, a "
                        "failing testcase named for the verdict when it does not certify")
    add_models(p, "only the model-size cases of this model: a partial run, NOT CERTIFIED "
                  "(to try a model's layers on this device first)")
    add_model_arguments(p)
    add_execution_arguments(p)
    add_shard(p)  # needs --run-id
    add_run_id(p)
    p.add_argument("--resume", action="store_true",
                   help="continue this folder's unfinished run (of this shard), judged whole")
    # tests and demonstrations only: another suite, and the bundle says NOT CERTIFIED for it
    add_suite(p, bundle.CERTIFY_SUITE, shown=False)


def main(args) -> int:
    if args.verify:
        _only(args, "--verify")
        return verify(Path(args.verify))
    if args.assemble:
        _only(args, "--assemble")
        return _report(assemble(Path(args.assemble)), Path(args.assemble), args.junit)
    return certify(args)


def _only(args, mode: str) -> None:
    given = [flag for flag, value in (("--backend", args.backend), ("--waivers", args.waivers),
                                      ("--shard", args.shard), ("--run-id", args.run_id),
                                      ("--import", args.imports), ("--device", args.device),
                                      ("--resume", args.resume),
                                      ("--checkpoint", args.checkpoint),
                                      ("--layer", args.layer), ("--inputs", args.inputs),
                                      ("--model", args.model),
                                      ("--junit", args.junit if mode == "--verify" else None))
             if value]
    if given:
        raise UsageError(f"{mode} takes a bundle folder only, not {', '.join(given)}")


def shard_costs_hash(run_args) -> str | None:
    """The hash of the cost table the shards were balanced by (None: split by case id)."""
    costs = run_command.shard_costs(run_args)
    return None if costs is None else costs_sha256(costs)


def certify(args) -> int:
    """Run the suite (or this shard of it) into DIR/results, record the shard, and assemble
    the bundle once every shard is there."""

    from ..harness.xfail import XfailList

    if not args.backend:
        raise UsageError("--out needs --backend NAME (the backend to certify)")
    if args.shard and args.shard[1] > 1 and not args.run_id:
        raise UsageError("--shard needs --run-id ID, the same on every shard, so that the "
                         "shards merge into one bundle")
    import_modules(args.imports)
    (backend,) = check_backends([args.backend])
    device = device_or_default(args.device)
    _check_available(backend, device)
    run_command.check_mps(args, device)
    waivers = _waivers_text(args.waivers)
    out = writable_folder(args.out)
    results = writable_folder(out / "results")
    _check_fresh(out, args.run_id)
    started, as_run = now(), as_run_now()  # what the workers will read, before they run
    run_args = argparse.Namespace(
        suite=args.suite, backend=[backend], scheme=[], check=[], case_id=[], keyword=None,
        case=[], shard=args.shard, results=str(results), workers=args.workers, device=device,
        run_id=args.run_id, resume=args.resume, timeout=args.timeout, imports=args.imports,
        in_process=False, checkpoint=args.checkpoint, layer=args.layer, inputs=args.inputs,
        shard_costs=args.shard_costs, no_cache=args.no_cache, model=args.model,
        mps=args.mps)
    cases = run_command.select_cases(run_args, device)
    workers = run_args.workers = run_command.workers_for(args.workers, device, cases,
                                                         mps=args.mps)
    model = model_record(cases)
    try:
        path, summary = run_command.execute(run_args, device, cases, XfailList([]))
    except run_command.RunInterrupted as stopped:  # no bundle: the run resumes
        from moecert.reports.verdict import NOT_GREEN, Verdict

        line = ("NOT CERTIFIED: incomplete: "
                + stopped.verdict.line.removeprefix("not green: "))
        print(f"run: {stopped.verdict.line}\n{line}")
        if args.junit:
            _write_junit(args.junit, stopped.path, Verdict(NOT_GREEN, line))
        return stopped.exit_code
    verdict = summary.verdict()
    print(f"run: {verdict.line}")
    shard = list(args.shard or (0, 1))
    record = shard_record(run_id_of(path), args.suite, backend, shard, len(cases), device,
                          imports=args.imports, waivers=waivers, started=started,
                          results=path.name, workers=workers, timeout_s=args.timeout,
                          as_run=as_run, model=model,
                          shard_costs=shard_costs_hash(run_args))
    bundle._write(record_path(path), json.dumps(record, indent=1) + "\n")
    print(f"shard {shard[0]}/{shard[1]}: {len(cases)} cases -> {path}", file=sys.stderr)
    records = bundle.read_records(results)
    lost = sorted(set(range(shard[1])) - {r["shard"][0] for r in records})
    if lost:
        # this shard's own verdict decides its exit code; the bundle's comes at assembly
        state = "passed" if verdict.green else "did not pass"
        print(f"shard {shard[0]}/{shard[1]} {state}; waiting for "
              f"{bundle.few_shards([f'{i}/{shard[1]}' for i in lost], shard[1])}: when their "
              f"results/* are in {results}, run `moecert certify --assemble {out}`")
        if args.junit:
            _write_junit(args.junit, path, verdict)
        return verdict.code
    return _report(assemble(out), out, args.junit)


def _check_available(backend: str, device: str) -> None:
    from moecert.kernels import get_backend

    from ..harness.execute import triton_for

    with triton_for(device):
        why = get_backend(backend).available()
    if why is not None:
        raise UsageError(f"backend {backend} is not available on {device}: {why}")


def _waivers_text(path: str | None) -> str | None:
    if path is None:
        return None
    try:
        text = Path(path).read_text(encoding="utf-8")
        parse_waivers(text, path)
    except OSError as e:
        raise UsageError(f"--waivers {path}: {e.strerror or e}") from None
    except ValueError as e:
        raise UsageError(f"--waivers {e}") from None
    return text


def _check_fresh(out: Path, run: str | None) -> None:
    """A bundle folder holds one run: refuse a made bundle, or another run's shards."""
    if (out / bundle.SUMS).exists() and not run:
        raise UsageError(f"{out} already holds a bundle; certify into a new folder")
    try:
        runs = {r.get("run_id") for r in bundle.read_records(out / "results")}
    except BundleError as e:
        raise UsageError(str(e)) from None
    if runs and runs != {run}:
        raise UsageError(f"{out}/results holds run {', '.join(map(str, sorted(runs)))}: "
                         "give its --run-id to add a shard to it, or certify into a new folder")


def _report(result: tuple[str, int], out: Path, junit: str | None) -> int:
    line, code = result
    print(line)
    if junit:
        from moecert.reports.verdict import Verdict

        _write_junit(junit, out / "results", Verdict(code, line))
    return code


def _write_junit(path: str, results: Path, verdict) -> None:
    """The run's rows as JUnit XML (as `moecert run --junit`), its verdict testcase the
    bundle's first line (or, for a shard that waits for others, its own run's verdict)."""
    from moecert.reports import load

    from ..harness.runner import write_junit

    write_junit(path, load(results), None, verdict)
    print(f"junit: {path}", file=sys.stderr)
