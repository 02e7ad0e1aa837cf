"""The pytest plugin (entry point `pytest11: moecert`): the conformance suite as pytest items, a
front end beside the command line (conformance/cli/), both driving the harness.

    pytest --pyargs moecert.conformance --moecert-suite smoke --moecert-backend vendor-x -n auto

One test per case (its checks are the rows); failing rows fail the test with their messages,
expected failures come from the xfail list (strict), and a case the backend does not claim is
a skip with the backend's reason. A session that is not green (reports/verdict.py: no claimed
case ran, a case was too large for the machine, it stopped before every collected case ran)
fails: one failed test more,
`moecert::verdict`, in pytest's counts, short summary and --junitxml. Cases
run in a worker process (one per pytest or xdist worker, conformance/harness/runner.py), so a
backend that hangs past `--moecert-timeout` or kills its process costs that case, not the session;
`--moecert-in-process` runs them in pytest's own process for debugging. With pytest-xdist on
several GPUs each worker takes one of the caller's visible devices, chosen from its worker id
before anything initializes CUDA. `--moecert-results DIR` writes the rows as `moecert run`
does; `--moecert-junit FILE` (with it) writes them as JUnit XML, one testcase per (case,
check), the same file `moecert run --junit` writes. A mistyped name (backend, scheme, check,
suite, shard) is one usage error (exit 4).

The plugin does nothing unless a moecert option is given or a test asks for the
`moecert_case` fixture, so loading it in every pytest session costs nothing.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections import Counter
from dataclasses import dataclass

import pytest

from .harness.imports import import_modules
from .harness.option_values import (
    UsageError,
    check_backends,
    check_name,
    device_or_default,
    output_file,
    positive_seconds,
    scheme_name,
    shard_spec,
    suite_name,
    writable_folder,
    xfail_list,
)

# Recorded on every case's test report (xdist forwards them to the controller, JUnit shows
# them as properties): the controller counts claimed cases from these.
CLAIMED_PROPERTY = "moecert_claimed"
BACKEND_PROPERTY = "moecert_backend"
OVERSIZE_PROPERTY = "moecert_oversize"  # not run: more memory than the machine has
FAILED_PROPERTY = "moecert_failed"  # the failing case's worst status (crash, timeout, ...)
PLANNED_PROPERTY = "moecert_planned"  # the session's moecert cases, as collected

_settings_key = pytest.StashKey["Settings"]()


# (flag, pytest addoption keywords): the defaults tell a session that uses moecert from one
# that merely has the plugin loaded.
OPTIONS = (
    ("--moecert-suite", dict(default="smoke", help="smoke, ci or certify")),
    ("--moecert-backend", dict(action="append", default=[],
                               help="backend name (repeatable; default: every available one)")),
    ("--moecert-scheme", dict(action="append", default=[], help="repeatable")),
    ("--moecert-check", dict(action="append", default=[], help="only these checks")),
    ("--moecert-device", dict(default=None, help="cpu or cuda (default: cuda if any)")),
    ("--moecert-results", dict(default=None, help="write result rows to this folder")),
    ("--moecert-xfail", dict(default=None, help="expected-failure list (TOML)")),
    ("--moecert-junit", dict(default=None, metavar="FILE",
                             help="write the rows as JUnit XML, one testcase per (case, check) "
                                  "(needs --moecert-results)")),
    ("--moecert-shard", dict(default=None, metavar="I/N",
                             help="run shard I of N of the cases (0-based), split by case id")),
    ("--moecert-timeout", dict(type=float, default=None, metavar="SECONDS",
                               help="seconds per case before its worker is killed (default: "
                                    "as moecert run)")),
    ("--moecert-isolate", dict(dest="moecert_isolate", action="store_true", default=True,
                               help="run cases in a worker process (default)")),
    ("--moecert-in-process", dict(dest="moecert_isolate", action="store_false", default=True,
                                  help="run cases in pytest's process (to debug; a crash ends "
                                       "the session)")),
    ("--moecert-import", dict(action="append", default=[], metavar="MODULE",
                              help="import MODULE first, here and in the worker process (it "
                                   "may register backends; as moecert run --import)")),
)


def pytest_addoption(parser):
    group = parser.getgroup("moecert", "moecert conformance suite")
    for flag, kwargs in OPTIONS:
        group.addoption(flag, **kwargs)


@dataclass(frozen=True)
class Settings:
    """The session's options, checked."""

    suite: str
    backends: tuple[str, ...]  # empty: every backend available on the device
    schemes: list[str] | None
    checks: list[str] | None
    shard: tuple[int, int] | None
    device: str
    timeout_s: float
    isolate: bool
    imports: tuple[str, ...]
    xfail_path: str | None
    xfail: object  # the parsed XfailList


def pytest_configure(config):
    worker = os.environ.get("PYTEST_XDIST_WORKER")  # "gw3"
    device = config.getoption("--moecert-device", None) or ""
    if worker and not device.startswith("cpu"):
        _pin_worker_gpu(int(re.sub(r"\D", "", worker) or 0))
    config.pluginmanager.register(_Tally(), "moecert-tally")
    if _any_moecert_option(config):
        _settings(config)  # a mistyped name stops the session here, once


def _any_moecert_option(config) -> bool:
    return any(config.getoption(kwargs.get("dest", flag)) != kwargs["default"]
               for flag, kwargs in OPTIONS)


def _settings(config) -> Settings:
    """The options, checked once per process; a mistake raises pytest.UsageError (exit 4)."""
    if _settings_key in config.stash:
        return config.stash[_settings_key]
    from .harness.environment import check_environment
    from .harness.runner import DEFAULT_TIMEOUT_S

    try:  # a mistyped MOECERT_* variable, as the command line says it
        check_environment()
    except UsageError as e:
        raise pytest.UsageError(str(e)) from None
    imports = _checked(config, "--moecert-import", lambda modules: import_modules(
        modules, "cannot import", option="--moecert-import",
        warn=lambda text: config.issue_config_time_warning(pytest.PytestConfigWarning(text),
                                                           stacklevel=2)))
    device = _checked(config, "--moecert-device", device_or_default)
    backends = tuple(_checked(config, "--moecert-backend",
                              lambda names: check_backends(names, "--moecert-import")))
    timeout = _checked(config, "--moecert-timeout",
                       lambda t: DEFAULT_TIMEOUT_S if t is None else positive_seconds(t))
    xfail_path = config.getoption("--moecert-xfail")
    xfail = _checked(config, "--moecert-xfail", lambda p: xfail_list(p, "file"))
    if config.getoption("--moecert-junit") and not config.getoption("--moecert-results"):
        raise pytest.UsageError("--moecert-junit: needs --moecert-results DIR (the rows it "
                                "renders)")
    _checked(config, "--moecert-junit", lambda path: path and output_file(path))
    _checked(config, "--moecert-results", lambda path: path and writable_folder(path))
    settings = Settings(_checked(config, "--moecert-suite", suite_name), backends,
                        _checked(config, "--moecert-scheme",
                                 lambda names: [scheme_name(n) for n in names] or None),
                        _checked(config, "--moecert-check",
                                 lambda names: [check_name(n) for n in names] or None),
                        _checked(config, "--moecert-shard",
                                 lambda text: text and shard_spec(text)), device, timeout,
                        config.getoption("moecert_isolate"), imports, xfail_path, xfail)
    config.stash[_settings_key] = settings
    return settings


def _checked(config, flag: str, check):
    """`check` of the option's value; its UsageError as pytest's, one line naming the flag."""
    try:
        return check(config.getoption(flag))
    except UsageError as e:
        raise pytest.UsageError(f"{flag}: {e}") from None


def _pin_worker_gpu(index: int) -> None:
    """One GPU per xdist worker, indexing into the caller's CUDA_VISIBLE_DEVICES. Runs before
    CUDA is initialized (torch reads the variable at first use)."""
    from .harness.runner import visible_devices

    visible = visible_devices()
    if len(visible) > 1:
        os.environ["CUDA_VISIBLE_DEVICES"] = visible[index % len(visible)]


def pytest_generate_tests(metafunc):
    if "moecert_case" not in metafunc.fixturenames:
        return
    from .harness.suites import build_suite, shard

    s = _settings(metafunc.config)
    from .harness.runner import available_backends

    cases = build_suite(s.suite, list(s.backends) or available_backends(s.device), s.schemes)
    if s.shard:
        cases = shard(cases, *s.shard)
    metafunc.parametrize("moecert_case", cases, ids=[c.case_id for c in cases])


@pytest.fixture(scope="session")
def moecert_session(request):
    """Device, xfail list, results journal and worker process of this pytest process."""
    from moecert.reports.store import Journal, plan_of

    from .harness.execute import new_run_id, triton_for
    from .harness.runner import CaseRunner, RunConfig

    config = request.config
    s = _settings(config)
    ids = planned_case_ids(request.session)
    state = {"device": s.device, "xfail": s.xfail, "planned": len(ids),
             "checks": s.checks, "journal": None, "runner": None,
             # xdist workers of one session share its testrun uid: one run id in every
             # worker's results file, so `load` reads the session as one run
             "run_id": (f"pytest-{os.environ['PYTEST_XDIST_TESTRUNUID'][:12]}"
                        if os.environ.get("PYTEST_XDIST_TESTRUNUID") else new_run_id()),
             "rerun": rerun_prefix(s), "budgets": _budgets(s.device)}
    results = config.getoption("--moecert-results")
    if results:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        # the session's plan (every worker collects every case): `moecert report` reads a
        # session cut short (-x, Ctrl-C) as not finished; a session is not resumed
        state["journal"] = Journal(results, f"{state['run_id']}.pytest-{worker}", s.suite,
                                   s.imports, plan_of(ids, resume=None))
    if s.isolate:
        # the xdist workers share the cores: each case worker gets its share of threads
        shares = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
        state["runner"] = CaseRunner(RunConfig(s.device, shares, s.timeout_s, s.checks,
                                               list(s.imports), state["run_id"]))
    with contextlib.nullcontext() if s.isolate else triton_for(s.device):
        yield state
    if state["runner"]:
        state["runner"].close()
    if state["journal"]:
        state["journal"].finish()
    stale = state["xfail"].unused(reached_only=True)
    if stale:  # rows it covers ran, and none failed as it expects: an error, not a warning
        pytest.fail("moecert xfail entries matched none of the rows they cover: "
                    + "; ".join(map(str, stale)), pytrace=False)
    for entry in state["xfail"].unused():
        import warnings
        warnings.warn(f"moecert xfail entry covers no case of this session: {entry}",
                      stacklevel=1)


def planned_case_ids(session) -> list[str]:
    """The case ids of the session's moecert tests, as collected (after -k and the like)."""
    return [item.callspec.params["moecert_case"].case_id for item in session.items
            if "moecert_case" in getattr(getattr(item, "callspec", None), "params", {})]


def _budgets(device: str) -> list:
    """This process's memory budget (schedule.budgets): a case above it is not run."""
    from .harness.runner import visible_devices
    from .harness.schedule import budgets

    return budgets(device, visible_devices()[:1] if device.startswith("cuda") else [], 1)


def rerun_prefix(s: Settings) -> str:
    """`moecert run` with the session's options that change a verdict; a case's JSON follows."""
    from .harness.runner import rerun_command

    return rerun_command(s.device, s.imports, s.xfail_path, s.checks, s.timeout_s)


def write_junit(config, verdict: tuple[bool, str] | None = None) -> None:
    """The session's rows (its run: the newest in the results folder) as JUnit XML, with a
    failing testcase for the session's verdict when it is not green."""
    from moecert.reports import load
    from moecert.reports.verdict import GREEN, NOT_GREEN, Verdict

    from .harness.runner import write_junit

    judged = None if verdict is None else Verdict(GREEN if verdict[0] else NOT_GREEN,
                                                  verdict[1])
    write_junit(config.getoption("--moecert-junit"), load(config.getoption("--moecert-results")),
                rerun_prefix(_settings(config)), judged)


def run_and_assert(case, session, properties: list | None = None) -> list[dict]:
    """Run `case`, record its rows, and fail with every failing row's message; an unclaimed
    case is a skip with the backend's reason. `properties` (the test item's user_properties)
    get the backend and whether it claimed the case, for the session's verdict."""
    from moecert.reports.schema import FAILING, case_status

    from .harness.execute import run_case
    from .harness.runner import RunConfig, oversize_row
    from .harness.schedule import oversize

    too_big = oversize([case], session["device"], session.get("budgets") or [])
    if too_big:
        (_, need, room), = too_big
        rows = [oversize_row(case, RunConfig(session["device"], run_id=session["run_id"]),
                             need, room)]
    elif session["runner"]:
        rows = session["runner"].run(case)
    else:
        rows = run_case(case, session["device"], session["checks"], session["run_id"])
    rows = session["xfail"].apply(rows)
    too_big = bool(too_big) and rows[0]["status"] == "oversize"  # only a claimed case is
    if session["journal"]:
        session["journal"].append(rows)
    if properties is not None:
        worst = case_status(r["status"] for r in rows)
        properties += [(BACKEND_PROPERTY, case.backend), (CLAIMED_PROPERTY, claimed(rows)),
                       (OVERSIZE_PROPERTY, bool(too_big)),
                       (FAILED_PROPERTY, worst if worst in FAILING else ""),
                       (PLANNED_PROPERTY, session.get("planned"))]
    if too_big:  # neither a pass nor a failure of the backend; the session is not green
        pytest.skip(f"oversize: {rows[0]['message']}")
    bad = [r for r in rows if r["status"] in FAILING]
    if bad:
        detail = "\n".join(f"{r['status']} {r['check']}: {r['message']}" for r in bad)
        pytest.fail(f"{case.case_id}\n{detail}\nrerun: {session['rerun']} --case "
                    f"'{case.to_json()}'", pytrace=False)
    status = case_status(r["status"] for r in rows)
    if status == "xfail":
        pytest.xfail("; ".join(r["message"] for r in rows if r["status"] == "xfail"))
    if status == "unsupported":
        pytest.skip(unclaimed_reason(rows))
    return rows


def claimed(rows: list[dict]) -> bool | None:
    """Whether the backend claimed the case; None when no row knows (setup failed, or the
    worker died or hung before the first check finished)."""
    known = [r["claimed"] for r in rows if r["claimed"] is not None]
    return any(known) if known else None


def unclaimed_reason(rows: list[dict]) -> str:
    """The skip reason of an unclaimed case: its claims row's message ("not claimed: <the
    backend's reason>; ..."), or the backend's reason where the claims check did not run."""
    claims = [r["message"] for r in rows if r["check"] == "claims"]
    first = claims[0] if claims else next(
        r["message"] for r in rows if r["status"] == "unsupported")
    if not first.startswith("not claimed: "):
        first = "not claimed: " + first
    return first.splitlines()[0]


class _Tally:
    """Counts the session's cases by (backend, claimed, failed) from their test reports and
    turns a session that is not green (reports/verdict.py, as `moecert run` judges a run)
    red. Registered in every process; on xdist only the controller's count (every worker's
    reports, forwarded) decides."""

    def __init__(self):
        self.counts: Counter = Counter()
        self.verdict: tuple[bool, str] | None = None
        self.planned: int | None = None

    def pytest_runtest_logreport(self, report):
        props = dict(report.user_properties)
        if report.when == "call" and CLAIMED_PROPERTY in props:
            failed = (props.get(FAILED_PROPERTY) or True) if report.failed else False
            self.counts[props[BACKEND_PROPERTY], props[CLAIMED_PROPERTY], failed,
                        bool(props.get(OVERSIZE_PROPERTY))] += 1
            if props.get(PLANNED_PROPERTY) is not None:
                self.planned = max(self.planned or 0, int(props[PLANNED_PROPERTY]))

    @pytest.hookimpl(tryfirst=True)  # before pytest's --junitxml writes its file
    def pytest_sessionfinish(self, session):
        if hasattr(session.config, "workerinput"):  # an xdist worker: its controller decides
            return
        self.verdict = session_verdict(self.counts, self.planned)
        if session.config.getoption("--moecert-junit", None):
            write_junit(session.config, self.verdict)
        if self.verdict and not self.verdict[0]:
            # one failed test more, the verdict: pytest's short summary, its counts and
            # --junitxml show it, not only the exit code
            report = verdict_report(self.verdict[1])
            terminal = session.config.pluginmanager.get_plugin("terminalreporter")
            if terminal is not None:  # counted and listed, without a progress letter
                terminal.stats.setdefault("failed", []).append(report)
            session.config.pluginmanager.subset_hook_caller(
                "pytest_runtest_logreport", remove_plugins=[terminal] if terminal else []
            )(report=report)
            if session.exitstatus == 0:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter):
        if self.verdict:
            green, line = self.verdict
            terminalreporter.write_line(line, red=not green)


VERDICT_NODEID = "moecert::verdict"


def verdict_report(line: str) -> pytest.TestReport:
    """A failed test report for a session that is not green: `FAILED moecert::verdict -
    moecert: not green: ...` in pytest's short test summary."""
    return pytest.TestReport(VERDICT_NODEID, ("moecert", None, "verdict"), {}, "failed", line,
                             "call", user_properties=[])


def session_verdict(tally: Counter, planned: int | None = None) -> tuple[bool, str] | None:
    """Whether the session is green, and its moecert line (the words `moecert run` ends
    with), from (backend, claimed, failed, oversize) -> test count (claimed None: the case
    was lost before its claim was known; failed: the test failed, its worst status where
    known; oversize: not run, too large for the machine's memory) and the session's planned
    cases (fewer run: the session stopped early, -x or Ctrl-C, and is not finished); None
    for a session that ran no case."""
    from moecert.reports.verdict import Completion, Tally, verdict

    if not tally:
        return None
    tallies: dict[str, Tally] = {}
    for (backend, claimed_, failed, too_big), n in sorted(tally.items(), key=str):
        for _ in range(n):
            tallies.setdefault(backend, Tally()).add(claimed_, True, failed, too_big)
    done = sum(tally.values())
    v = verdict(tallies, None if planned is None else Completion(planned, done, True))
    return v.green, f"moecert: {v.line}"
