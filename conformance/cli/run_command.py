"""`moecert run`: a suite over the chosen backends and schemes, with a progress bar, rows to
the results folder as they finish, a summary, and an exit code: 0 green (every claimed case
passed, and at least one claimed case ran a check), 1 not green (the last line says why), 2 a
usage error (one line on stderr, before anything runs).

Cases can be narrowed by id: `--case-id ID` (exact, repeatable), `-k EXPR` (substrings of
the id with and/or/not, as pytest's -k) and `--model NAME` (a suite's model-size cases of that
model); `--list-cases` prints the selection without running it. `--resume` continues the
newest unfinished run of the same suite (and shard) in the results folder, and its summary
and exit code cover the whole run. The journal records the run's plan (reports/store.py): a
run resumed with another selection of cases is refused. SIGTERM or Ctrl-C stops a run
cleanly (harness/interrupt.py): every finished case stays in the journal, and the run says
how far it got and the command that resumes it, and exits 143 or 130.
"""

from __future__ import annotations

import shlex
import sys
from collections import Counter
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

try:
    from tqdm import tqdm
except ImportError:  # a checkout run without installing (a GPU box's PYTHONPATH)
    tqdm = None

from moecert.reference import CheckpointError
from moecert.reports.groups import failure_groups
from moecert.reports.schema import FAILING, STATUSES, case_status
from moecert.reports.store import (
    Journal,
    journal_cases,
    journal_plan,
    load,
    plan_of,
    rows_frame,
    run_id_of,
    unfinished_journals,
)
from moecert.reports.verdict import Completion, Tally, Verdict, tally_rows, verdict

from ..harness import checkpoint_cache
from ..harness.case_filter import case_filter
from ..harness.cases import Case
from ..harness.checks import CHECKS
from ..harness.context import SharedSteps
from ..harness.execute import by_problem, new_run_id, run_case, triton_for
from ..harness.imports import import_modules
from ..harness.interrupt import Interrupted, interruptible
from ..harness.model_selection import model_selection
from ..harness.mps import MpsDaemon, MpsError
from ..harness.option_values import (
    UsageError,
    case_json,
    check_backends,
    check_name,
    device_or_default,
    one_line,
    output_file,
    writable_folder,
    xfail_list,
)
from ..harness.runner import (
    RunConfig,
    available_backends,
    claim_here,
    oversize_row,
    oversize_words,
    rerun_command,
    run_isolated,
    write_junit,
)
from ..harness.shard_costs import balanced_shard, read_costs
from ..harness.suites import build_model_suite, build_suite, shard
from ..harness.worker_plan import plan_workers
from ..harness.xfail import XfailList
from .arguments import (
    add_backends,
    add_execution_arguments,
    add_model_arguments,
    add_models,
    add_results,
    add_run_id,
    add_schemes,
    add_shard,
    add_suite,
)


def add_arguments(p) -> None:
    add_suite(p)
    add_backends(p)
    add_schemes(p)
    p.add_argument("--check", action="append", default=[], type=check_name,
                   help=f"only these checks (repeatable): {', '.join(CHECKS)}")
    p.add_argument("--case-id", action="append", default=[], metavar="ID",
                   help="only the case with this id (repeatable)")
    p.add_argument("-k", dest="keyword", default=None, metavar="EXPR",
                   help="only cases whose id matches: substrings with and/or/not, as pytest -k")
    add_models(p, "only the model-size cases of this model (the ci and certify suites' "
                  "layers at full size)")
    p.add_argument("--list-cases", action="store_true",
                   help="print the selected case ids and exit without running")
    add_results(p)
    add_model_arguments(p)
    add_execution_arguments(p)
    add_shard(p)
    add_run_id(p)
    p.add_argument("--resume", action="store_true",
                   help="continue the newest unfinished run of this suite (and shard, and "
                        "--run-id) in the results folder")
    p.add_argument("--case", action="append", default=[], metavar="JSON", type=case_json,
                   help="run exactly this case (as printed for a failure)")
    p.add_argument("--xfail", default=None, help="expected-failure list (TOML)")
    p.add_argument("--junit", metavar="FILE", default=None, type=output_file,
                   help="also write the run's rows as JUnit XML (as moecert report --junit)")
    p.add_argument("--in-process", action="store_true",
                   help="no worker processes (faster to debug; a crash ends the run)")


def main(args) -> int:
    import_modules(args.imports)
    device = device_or_default(args.device)
    cases = select_cases(args, device)
    if args.list_cases:
        for case in cases:
            print(case.case_id)
        print(f"{len(cases)} cases", file=sys.stderr)
        return 0
    xfail = xfail_list(args.xfail)
    rerun = rerun_command(device, args.imports, args.xfail, args.check, args.timeout)
    try:
        path, summary = execute(args, device, cases, xfail)
    except RunInterrupted as stopped:
        if args.junit:
            write_junit(args.junit, load(stopped.path), rerun, stopped.verdict)
        print(stopped.verdict.line, flush=True)
        return stopped.exit_code
    print(summary.render(rerun, xfail), flush=True)
    print(f"results: {path}")
    verdict = summary.verdict()
    if args.junit:
        write_junit(args.junit, load(path), rerun, verdict)
        print(f"junit: {args.junit}")
    print(verdict.line + layers_covered(args))
    if xfail.unused(reached_only=True):  # a stale expected failure fails the run
        print("error: stale xfail entries (listed above): exit 1")
        return max(verdict.code, 1)
    return verdict.code


class RunInterrupted(Exception):
    """A run stopped by SIGTERM or Ctrl-C (`execute` has said so on stderr): its journal,
    its verdict (not finished) and the exit code of the signal."""

    def __init__(self, path: Path, verdict: Verdict, exit_code: int):
        super().__init__(verdict.line)
        self.path, self.verdict, self.exit_code = path, verdict, exit_code


def layers_covered(args) -> str:
    """What of a --checkpoint folder the verdict covers, for the verdict line: the layers run
    of the folder's MoE layers ("; layer 0 of 48 MoE layers of DIR ..."); "" without one."""
    folder, chosen = getattr(args, "checkpoint", None), getattr(args, "layer", None) or []
    if folder is None:
        return ""
    from ..harness.model_layers import layer_summaries

    found = list(layer_summaries(folder))
    if "all" in chosen or set(chosen) >= set(found):
        return f"; every MoE layer of {folder} ({len(found)})"
    run = [n for n in chosen if n != "all"] or found[:1]
    return (f"; layer{'s' * (len(run) > 1)} {', '.join(map(str, run))} of {len(found)} MoE "
            f"layers of {folder} (--layer all for every one)")


def workers_for(requested: int | str, device: str, cases=(), mps: bool = False) -> int:
    """`-n`: the number given, or for auto what the host's GPUs, their memory and its cores
    hold for these cases (worker_plan.plan_workers), said on stderr."""
    from ..harness.runner import visible_devices

    if requested != "auto" and not device.startswith("cuda"):
        return requested
    visible = visible_devices() if device.startswith("cuda") else []
    plan = plan_workers(device, cases, visible, mps=mps)
    if requested == "auto":
        print(f"-n auto: {plan.workers} worker(s): {plan.why}", file=sys.stderr)
        return plan.workers
    if requested > plan.workers and "set by GPU memory" in plan.why:
        print(f"warning: -n {requested}: the GPUs' memory holds {plan.workers} worker(s) with "
              f"every worker's context and cache counted ({plan.why}); a case that runs out "
              "of memory is retried alone, but -n auto would not crowd them", file=sys.stderr)
    return requested


def execute(args, device: str, cases: list[Case], xfail: XfailList) -> tuple[Path, Summary]:
    """Run `cases` (or what is left of them, --resume) into the results folder with a
    progress bar: the finished results file and the summary of the whole run. `moecert
    certify` runs its suite through this too. Interrupted (SIGTERM, Ctrl-C), it stops its
    workers, keeps the journal, says how far it got and how to resume on stderr, and raises
    RunInterrupted."""
    check_mps(args, device)
    writable_folder(args.results)
    journal, earlier = _journal(args, _label(args), cases)
    done = {rows[0]["case_id"] for rows in earlier}
    todo = [c for c in cases if c.case_id not in done]
    run = run_id_of(journal.path)
    workers = workers_for(args.workers, device, todo, mps=getattr(args, "mps", False))
    config = RunConfig(device, workers, args.timeout, args.check or None, args.imports,
                       run, xfail, cache=not getattr(args, "no_cache", False),
                       costs=shard_costs(args))  # the measured costs order the run too
    sharing = ", sharing each GPU through MPS" if getattr(args, "mps", False) else ""
    print(f"moecert run {run}: {len(todo)} cases ({len(done)} already done) on {device}, "
          f"{workers} worker(s){sharing}, backend {backend_list(cases)} -> {journal.path}",
          file=sys.stderr)
    summary = Summary()
    for rows in earlier:  # a resumed run is judged whole
        summary.add(rows)
        xfail.seen(rows)
    live = tqdm is not None and sys.stderr.isatty()
    bar = (tqdm if live else PlainProgress)(total=len(todo), unit="case", file=sys.stderr,
                                            dynamic_ncols=True)

    def on_case(case, rows):
        summary.add(rows)
        bar.set_postfix(failed=summary.failed_cases, refresh=False)
        bar.update()

    try:
        with interruptible():
            too_big = memory_note(todo, config)
            try:
                if args.in_process:
                    shared = SharedSteps()
                    for case, need, room in too_big:
                        on_case(case, _record(journal, xfail, [oversize_row(case, config, need,
                                                                            room)]))
                    skipped = {c.case_id for c, _, _ in too_big}
                    with triton_for(device), checkpoint_cache.turned(config.cache):
                        for case in by_problem(c for c in todo if c.case_id not in skipped):
                            on_case(case, _record(journal, xfail, run_case(
                                case, device, config.checks, run, shared=shared)))
                else:
                    with gpus_shared(args, config) as shared_config:
                        run_isolated(todo, shared_config, journal, on_case)
            finally:
                bar.close()
    except Interrupted as signal_:
        journal.close()
        completion = Completion(len(cases), len(summary.case_ids), False)
        failed = f", {summary.failed_cases} failed so far" if summary.failed_cases else ""
        print(f"moecert: interrupted by {signal_.name} after {completion.done} of "
              f"{completion.planned} cases{failed}; every finished case is kept in "
              f"{journal.path}\nresume with: {journal.plan['resume']}", file=sys.stderr,
              flush=True)
        raise RunInterrupted(journal.path, summary.verdict(completion),
                             signal_.exit_code) from None
    path = journal.finish()
    summary.completion = Completion(len(cases), len(summary.case_ids), True)
    return path, summary


def check_mps(args, device: str) -> None:
    """--mps: a usage error where it cannot apply."""
    if not getattr(args, "mps", False):
        return
    if not device.startswith("cuda"):
        raise UsageError(f"--mps shares each GPU between the worker processes: it needs "
                         f"--device cuda (this run is on {device})")
    if getattr(args, "in_process", False):
        raise UsageError("--mps shares each GPU between the worker processes: not with "
                         "--in-process")


@contextmanager
def gpus_shared(args, config: RunConfig):
    """The run's config, under --mps with its private MPS daemon running around the workers
    (harness/mps.py); a daemon that cannot start is a usage error, one line."""
    if not getattr(args, "mps", False):
        yield config
        return
    try:
        daemon = MpsDaemon.start()
    except MpsError as e:
        raise UsageError(str(e)) from None
    try:
        yield replace(config, mps_env=daemon.env)
        if not daemon.server_ran():
            print("warning: --mps: the MPS daemon started no server, so no worker joined it "
                  "(their GPU work was time-sliced as without --mps)", file=sys.stderr)
    finally:
        daemon.stop()


def memory_note(cases: list[Case], config: RunConfig) -> list:
    """The cases too large for this machine's memory (schedule.oversize), said up front in
    one line, the claimed ones (not run: status oversize) apart from those the backend does
    not claim (unsupported, with its reason); the runner records them without running them."""
    from ..harness.runner import visible_devices
    from ..harness.schedule import budgets, oversize

    visible = visible_devices() if config.device.startswith("cuda") else []
    too_big = oversize(cases, config.device, budgets(config.device, visible,
                                                     max(1, config.workers)))
    claimed = [t for t in too_big if claim_here(t[0], config.device)[0] is not False]
    if claimed:
        case, need, room = max(claimed, key=lambda t: t[1])
        print(f"{len(claimed)} claimed case(s) need more memory than this machine has, and "
              f"will not run (status oversize); the largest, {case.case_id}, "
              f"{oversize_words(config.device, need, room).removeprefix('not run: ')}",
              file=sys.stderr)
    if len(too_big) > len(claimed):
        print(f"{len(too_big) - len(claimed)} case(s) the backend does not claim would need "
              "more memory than this machine has: recorded as unsupported with the backend's "
              "reason, their claims check not run", file=sys.stderr)
    return too_big


def _record(journal, xfail, rows):
    rows = xfail.apply(rows)
    journal.append(rows)
    return rows


def select_cases(args, device: str) -> list[Case]:
    """The cases the options name: --case, or the suite for the backends and schemes, then
    narrowed by --case-id, -k and --shard. A selection of nothing by id is a usage error."""
    model = model_selection(getattr(args, "checkpoint", None), getattr(args, "layer", []),
                            getattr(args, "inputs", None))
    if args.case:
        if model is not None:
            raise UsageError("--case runs exactly the case given: no --checkpoint with it")
        check_backends(dict.fromkeys(c.backend for c in args.case))
        cases = list(args.case)
    elif model is not None:
        if args.scheme:
            raise UsageError("--scheme does not apply with --checkpoint: the file fixes the "
                             "scheme")
        backends = check_backends(args.backend) if args.backend else available_backends(device)
        try:
            cases = build_model_suite(args.suite, *model[:2], backends, model[2])
            if not getattr(args, "list_cases", False):
                check_layers(*model[:2])
        except (CheckpointError, ValueError, OSError) as e:
            raise UsageError(f"--checkpoint {args.checkpoint}: {one_line(e)}") from None
    else:
        backends = check_backends(args.backend) if args.backend else available_backends(device)
        cases = build_suite(args.suite, backends, args.scheme or None)
    where = (f"suite {args.suite}" if not args.case else "the --case cases") + (
        f" on {args.checkpoint}" if model is not None else "")
    if args.case_id:
        by_id = {c.case_id: c for c in cases}
        for wanted in args.case_id:
            if wanted not in by_id:
                raise UsageError(f"--case-id {wanted}: no such case in {where} for the chosen "
                                 "backends and schemes (--list-cases lists them)")
        cases = [by_id[i] for i in dict.fromkeys(args.case_id)]
    models = getattr(args, "model", [])
    if models:
        if model is not None:
            raise UsageError("--model selects a suite's model-size cases: not with "
                             "--checkpoint (the folder is the model)")
        cases = [c for c in cases if c.model in models]
        if not cases:
            raise UsageError(f"--model {' --model '.join(models)}: no model-size case in "
                             f"{where} for the chosen backends and schemes (the ci and "
                             "certify suites have them)")
    if args.keyword is not None:
        keep = case_filter(args.keyword)
        cases = [c for c in cases if keep(c.case_id)]
        if not cases:
            raise UsageError(f"-k {args.keyword!r} matches no case in {where} "
                             "(--list-cases lists them)")
    costs = shard_costs(args)  # read here first: a bad file is a usage error before anything
    if args.shard:
        cases = (shard(cases, *args.shard) if costs is None
                 else balanced_shard(cases, *args.shard, costs))
    return cases


def shard_costs(args) -> dict[str, float] | None:
    """The cost per case id of `--shard-costs RESULTS` (harness/shard_costs.py), or None."""
    path = getattr(args, "shard_costs", None)
    if not path:
        return None
    try:
        costs = read_costs(path)
    except (OSError, ValueError, KeyError) as e:
        raise UsageError(f"--shard-costs {path}: {one_line(e)}") from None
    if not costs:
        raise UsageError(f"--shard-costs {path}: no result rows to take case costs from")
    return costs


def check_layers(folder: str, layers: list[int]) -> None:
    """Read each chosen layer once, with every check of its load (dtypes, shapes, the values
    its format rejects), before any case runs: a bad file is one line and exit 2, not an error
    row in every case (each worker then reads the layer it runs again)."""
    from moecert.reference import load_checkpoint

    for layer in layers:
        load_checkpoint(folder, layer=layer)


def backend_list(cases: list[Case]) -> str:
    """The cases' backends, each one that is not built in marked (an installed package's
    entry point, or a run-time registration, joins a default run)."""
    from moecert.kernels.registry import BUILTINS

    names = dict.fromkeys(c.backend for c in cases)
    return ", ".join(n if n in BUILTINS else f"{n} (plugin: not built in)" for n in names) \
        or "none"


def _label(args) -> str:
    """The run's files are `<run id>.<label>.*`: the suite, and the shard if any."""
    return args.suite + (f".shard{args.shard[0]}of{args.shard[1]}" if args.shard else "")


def resume_command(args, run: str) -> str:
    """The command that resumes this run: the command line as given (`args.argv`, set by
    the `moecert` entry point), with --resume and the run's id."""
    argv = list(getattr(args, "argv", None) or ["run"])
    if "--resume" not in argv:
        argv.append("--resume")
    if not any(a == "--run-id" or a.startswith("--run-id=") for a in argv):
        argv += ["--run-id", run]
    return shlex.join(["moecert", *argv])


def _journal(args, label: str, cases: list[Case]) -> tuple[Journal, list[list[dict]]]:
    """The run's journal, its plan recorded (the cases, the command that resumes it), and
    the rows of each case it already holds (resumed), or a new one."""
    folder = Path(args.results)
    ids = [c.case_id for c in cases]

    def ours(path: Path) -> bool:
        return (path.name == f"{run_id_of(path)}.{label}{path.suffix}"
                and args.run_id in (None, run_id_of(path)))

    if args.resume:
        unfinished = [p for p in unfinished_journals(folder) if ours(p)]
        if unfinished:
            run = run_id_of(unfinished[0])
            plan = plan_of(ids, resume_command(args, run))
            recorded = journal_plan(unfinished[0])
            if recorded and recorded["case_ids_sha256"] != plan["case_ids_sha256"]:
                raise UsageError(
                    f"--resume: run {run} ({label}) in {folder} planned {recorded['cases']} "
                    f"other cases than these {len(ids)}; resume it with the options it was "
                    f"started with: {recorded.get('resume') or '(not recorded)'}")
            journal = Journal(folder, unfinished[0].stem, args.suite,  # cuts a torn tail
                              args.imports, plan)
            return journal, journal_cases(journal.path)
        finished = sorted((p for p in folder.glob("*.parquet") if ours(p)),
                          key=lambda p: p.stat().st_mtime, reverse=True)
        if finished:
            raise UsageError(f"nothing to resume in {folder}: run {run_id_of(finished[0])} "
                             f"({label}) finished; run without --resume to start a new run")
        print(f"nothing to resume in {folder} ({label}): starting a new run", file=sys.stderr)
    run = args.run_id or new_run_id()
    name = f"{run}.{label}"
    if any((folder / (name + suffix)).exists() for suffix in (".jsonl", ".parquet")):
        raise UsageError(f"run {run} already has {label} results in {folder}: --resume "
                         "continues an unfinished one; or pass another --run-id")
    return Journal(folder, name, args.suite, args.imports,
                   plan_of(ids, resume_command(args, run))), []


class PlainProgress:
    """Progress as whole lines, for logs (stderr not a terminal, or no tqdm): a line every
    EVERY_S seconds or tenth of the cases, whichever comes first, and at the end: cases
    done, failed so far, rate. A progress bar's carriage returns would make a CI log one
    line of tens of kilobytes."""

    EVERY_S = 30.0

    def __init__(self, total, file, clock=None, **_):
        import time

        self.clock = clock or time.monotonic
        self.total, self.done, self.file, self.failed = total, 0, file, 0
        self.start = self.last = self.clock()

    def set_postfix(self, refresh=False, failed=0, **_):
        self.failed = failed

    def update(self):
        self.done += 1
        now, tenth = self.clock(), max(1, self.total // 10)
        if (self.done == self.total or self.done % tenth == 0
                or now - self.last >= self.EVERY_S):
            self.last = now
            elapsed = now - self.start
            rate = f"{self.done / elapsed:.1f} cases/s" if elapsed > 0 else "-"
            print(f"{self.done}/{self.total} cases, {self.failed} failed, {rate}, "
                  f"{elapsed:.0f} s", file=self.file, flush=True)

    def close(self):
        pass


class Summary:
    """Cases by backend and status, how many each backend claimed, the skipped check rows,
    and the failing rows. An unclaimed case counts as unsupported, whatever its rows say
    (never as a pass). The verdict is reports/verdict.py's, as `moecert report` gives it."""

    def __init__(self):
        self.by_backend: dict[str, Counter] = {}
        self.tallies: dict[str, Tally] = {}
        self.skipped_checks: Counter = Counter()
        self.failures: list[dict] = []
        self.failed_cases = 0
        self.case_ids: set[str] = set()
        self.completion: Completion | None = None  # set when the run ends (execute)

    @property
    def claimed(self) -> Counter:
        return Counter({b: t.claimed for b, t in self.tallies.items()})

    def add(self, rows: list[dict]) -> None:
        """One case's rows."""
        if not rows:
            return
        backend = rows[0]["backend"]
        self.case_ids.add(rows[0]["case_id"])
        claimed = any(r.get("claimed") is True for r in rows)
        status = case_status(r["status"] for r in rows)
        if not claimed and status in ("pass", "skip"):
            status = "unsupported"
        self.by_backend.setdefault(backend, Counter())[status] += 1
        self.skipped_checks[backend] += sum(r["status"] == "skip" for r in rows)
        tally_rows(self.tallies, rows)
        bad = [r for r in rows if r["status"] in FAILING]
        if bad:
            self.failed_cases += 1
            self.failures.extend(bad)

    def verdict(self, completion: Completion | None = None) -> Verdict:
        """The run's verdict (reports/verdict.py): its exit code and its line; `completion`
        (default: as the run ended) says whether it ran every case it planned."""
        return verdict(self.tallies, completion or self.completion)

    def render(self, rerun: str = "moecert run", xfail: XfailList | None = None,
               limit: int = 20) -> str:
        # cases per status, but the last column: the check rows skipped (a claimed case
        # passes with some checks skipped, e.g. token_order at M = 1)
        cases = [s for s in STATUSES if s != "skip"]
        lines = ["", f"{'backend':<24}{'claimed':>14}" + "".join(f"{s:>12}" for s in cases)
                 + f"{'checks_skipped':>16}"]
        for name, counts in sorted(self.by_backend.items()):
            claimed = f"{self.claimed[name]} of {sum(counts.values())}"
            lines.append(f"{name:<24}{claimed:>14}"
                         + "".join(f"{counts.get(s, 0):>12}" for s in cases)
                         + f"{self.skipped_checks[name]:>16}")
        if self.failures:
            # one line per bug, as `moecert report` prints them (reports/groups.py), then
            # each group's first case with its rerun command
            groups = failure_groups(rows_frame(self.failures))
            lines.append(f"\n{self.failed_cases} failing case(s) in {len(groups)} group(s), "
                         "one line per bug (backend, check, how it failed):")
            for g in groups[:limit]:
                r = g["rows"][0]
                first = (r["message"].splitlines() or [""])[0] if isinstance(
                    r["message"], str) else ""
                lines.append(f"  {g['headline']}\n"
                             f"    e.g. {r['status']} {r['check']} {r['case_id']}\n"
                             f"         {first[:300]}\n"
                             f"         rerun: {rerun} --case {shlex.quote(r['case_json'])}")
            if len(groups) > limit:
                lines.append(f"  and {len(groups) - limit} more group(s): moecert report "
                             "lists every failing case")
        for entry in (xfail.unused(reached_only=True) if xfail else []):
            lines.append(f"error: xfail entry matched none of this run's rows it covers "
                         f"(stale, or shadowed by an earlier entry): {entry}")
        elsewhere = len(xfail.unused()) - len(xfail.unused(reached_only=True)) if xfail else 0
        if elsewhere:
            lines.append(f"{elsewhere} xfail entries cover no case of this run "
                         "(tools/xfail_coverage.py checks a list over all its runs)")
        return "\n".join(lines)
