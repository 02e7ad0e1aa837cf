"""`moecert run`: a suite over the chosen backends and schemes, with a progress bar, rows to
the results folder as they finish, a summary, and an exit code (1 when any case failed)."""

from __future__ import annotations

import importlib
import sys
from collections import Counter

import torch

try:
    from tqdm import tqdm
except ImportError:  # a checkout run without installing (a GPU box's PYTHONPATH)
    tqdm = None

from moecert.kernels import backend_names, get_backend
from moecert.reports.schema import FAILING, STATUSES, case_status
from moecert.reports.store import Journal, read_journal, unfinished_journals

from .cases import Case
from .execute import new_run_id, run_case, triton_for
from .runner import DEFAULT_TIMEOUT_S, RunConfig, run_isolated
from .suites import SUITES, build_suite, shard
from .xfail import XfailList


def add_arguments(p) -> None:
    p.add_argument("--suite", default="smoke", choices=SUITES)
    p.add_argument("--backend", action="append", default=[],
                   help="a registered backend (repeatable; default: every available one)")
    p.add_argument("--scheme", action="append", default=[], help="repeatable; default: all")
    p.add_argument("--check", action="append", default=[], help="only these checks")
    p.add_argument("--results", default="moecert-results", help="results folder")
    p.add_argument("-n", "--workers", type=int, default=1, help="worker processes")
    p.add_argument("--device", default=None, help="cpu, cuda (default: cuda if present)")
    p.add_argument("--shard", default=None, metavar="I/N",
                   help="run shard I of N (0-based), split by case id")
    p.add_argument("--resume", action="store_true",
                   help="continue the newest unfinished run in the results folder")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S,
                   help="seconds per case before its worker is killed")
    p.add_argument("--case", action="append", default=[], metavar="JSON",
                   help="run exactly this case (as printed for a failure)")
    p.add_argument("--import", dest="imports", action="append", default=[],
                   metavar="MODULE", help="import MODULE first (it may register backends)")
    p.add_argument("--xfail", default=None, help="expected-failure list (TOML)")
    p.add_argument("--in-process", action="store_true",
                   help="no worker processes (faster to debug; a crash ends the run)")


def main(args) -> int:
    for module in args.imports:
        importlib.import_module(module)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    cases = _cases(args, device)
    if args.shard:
        index, count = (int(v) for v in args.shard.split("/"))
        cases = shard(cases, index, count)
    journal, done = _journal(args, args.suite + (f".shard{args.shard.replace('/', 'of')}"
                                                 if args.shard else ""))
    todo = [c for c in cases if c.case_id not in done]
    run_id = journal.path.stem.split(".")[0]
    xfail = XfailList.load(args.xfail)
    config = RunConfig(device, args.workers, args.timeout, args.check or None, args.imports,
                       run_id, xfail)
    print(f"moecert run {run_id}: {len(todo)} cases ({len(done)} already done) on {device}, "
          f"{args.workers} worker(s) -> {journal.path}", file=sys.stderr)
    summary = Summary()
    bar = (tqdm if tqdm else _PlainProgress)(total=len(todo), unit="case", file=sys.stderr,
                                              dynamic_ncols=True)

    def on_case(case, rows):
        summary.add(case, rows)
        bar.set_postfix(failed=summary.failed_cases, refresh=False)
        bar.update()

    try:
        if args.in_process:
            with triton_for(device):
                for case in todo:
                    on_case(case, _record(journal, xfail, run_case(case, device, config.checks,
                                                                   run_id)))
        else:
            run_isolated(todo, config, journal, on_case)
    finally:
        bar.close()
    path = journal.finish()
    print(summary.render(device, xfail), flush=True)
    print(f"results: {path}")
    return 1 if summary.failed_cases else 0


def _record(journal, xfail, rows):
    rows = xfail.apply(rows)
    journal.append(rows)
    return rows


def _cases(args, device: str) -> list[Case]:
    if args.case:
        return [Case.from_json(text) for text in args.case]
    backends = args.backend or available_backends(device)
    unknown = [b for b in backends if b not in backend_names()]
    if unknown:
        raise SystemExit(f"unknown backend(s) {unknown}; registered: {backend_names()}")
    return build_suite(args.suite, backends, args.scheme or None)


def available_backends(device: str) -> list[str]:
    """Backends that can run on `device` (triton on a CPU through the interpreter)."""
    with triton_for(device):
        return [n for n in backend_names() if get_backend(n).available() is None]


def _journal(args, label: str) -> tuple[Journal, set[str]]:
    if args.resume:
        for path in unfinished_journals(args.results):
            if path.stem.endswith(label):
                done = set(read_journal(path)["case_id"])
                return Journal(args.results, path.stem), done
    return Journal(args.results, f"{new_run_id()}.{label}"), set()


class _PlainProgress:
    """A line every 10% when tqdm is not installed."""

    def __init__(self, total, file, **_):
        self.total, self.done, self.file, self.postfix = total, 0, file, {}

    def set_postfix(self, refresh=False, **kw):
        self.postfix = kw

    def update(self):
        self.done += 1
        if self.done * 10 // max(self.total, 1) != (self.done - 1) * 10 // max(self.total, 1):
            print(f"{self.done}/{self.total} cases {self.postfix}", file=self.file, flush=True)

    def close(self):
        pass


class Summary:
    def __init__(self):
        self.by_backend: dict[str, Counter] = {}
        self.failures: list[dict] = []
        self.failed_cases = 0

    def add(self, case, rows) -> None:
        status = case_status(r["status"] for r in rows)
        self.by_backend.setdefault(case.backend, Counter())[status] += 1
        bad = [r for r in rows if r["status"] in FAILING]
        if bad:
            self.failed_cases += 1
            self.failures.extend(bad)

    def render(self, device: str, xfail: XfailList | None = None, limit: int = 20) -> str:
        lines = ["", f"{'backend':<24}" + "".join(f"{s:>12}" for s in STATUSES)]
        for name, counts in sorted(self.by_backend.items()):
            lines.append(f"{name:<24}" + "".join(f"{counts.get(s, 0):>12}" for s in STATUSES))
        if self.failures:
            lines.append(f"\n{self.failed_cases} case(s) failed; first rows:")
            for r in self.failures[:limit]:
                first = r["message"].splitlines()[0] if r["message"] else ""
                lines.append(f"  {r['status']:<8} {r['check']:<14} {r['case_id']}\n"
                             f"           {first[:300]}\n"
                             f"           rerun: moecert run --device {device} --case "
                             f"'{r['case_json']}'")
        for entry in (xfail.unused() if xfail else []):
            lines.append(f"warning: xfail entry matched nothing: {entry}")
        return "\n".join(lines)
