"""The pytest plugin (entry point `pytest11: moecert`): the conformance suite as pytest items.

    pytest --pyargs moecert.conformance --moecert-suite smoke --moecert-backend vendor-x -n auto

One test per case (its checks are the rows); failing rows fail the test with their messages,
expected failures come from the xfail list (strict). With pytest-xdist on several GPUs each
worker takes one of the caller's visible devices, chosen from its worker id before anything
initializes CUDA. `--moecert-results DIR` writes the rows as `moecert run` does.

The plugin does nothing unless a test asks for the `moecert_case` fixture, so loading it in
every pytest session costs nothing.
"""

from __future__ import annotations

import os
import re

import pytest


def pytest_addoption(parser):
    group = parser.getgroup("moecert", "moecert conformance suite")
    group.addoption("--moecert-suite", default="smoke", help="smoke, ci or certify")
    group.addoption("--moecert-backend", action="append", default=[],
                    help="backend name (repeatable; default: every available one)")
    group.addoption("--moecert-scheme", action="append", default=[], help="repeatable")
    group.addoption("--moecert-check", action="append", default=[], help="only these checks")
    group.addoption("--moecert-device", default=None, help="cpu or cuda (default: cuda if any)")
    group.addoption("--moecert-results", default=None, help="write result rows to this folder")
    group.addoption("--moecert-xfail", default=None, help="expected-failure list (TOML)")
    group.addoption("--moecert-shard", default=None, metavar="I/N",
                    help="run shard I of N of the cases (0-based), split by case id")


def pytest_configure(config):
    worker = os.environ.get("PYTEST_XDIST_WORKER")  # "gw3"
    device = config.getoption("--moecert-device", None) or ""
    if worker and not device.startswith("cpu"):
        _pin_worker_gpu(int(re.sub(r"\D", "", worker) or 0))


def _pin_worker_gpu(index: int) -> None:
    """One GPU per xdist worker, indexing into the caller's CUDA_VISIBLE_DEVICES. Runs before
    CUDA is initialized (torch reads the variable at first use)."""
    from .runner import _visible_devices

    visible = _visible_devices()
    if len(visible) > 1:
        os.environ["CUDA_VISIBLE_DEVICES"] = visible[index % len(visible)]


def _device(config) -> str:
    import torch

    return config.getoption("--moecert-device") or (
        "cuda" if torch.cuda.is_available() else "cpu")


def pytest_generate_tests(metafunc):
    if "moecert_case" not in metafunc.fixturenames:
        return
    from .run_command import available_backends
    from .suites import build_suite, shard

    config = metafunc.config
    device = _device(config)
    backends = config.getoption("--moecert-backend") or available_backends(device)
    cases = build_suite(config.getoption("--moecert-suite"), backends,
                        config.getoption("--moecert-scheme") or None)
    if config.getoption("--moecert-shard"):
        index, count = (int(v) for v in config.getoption("--moecert-shard").split("/"))
        cases = shard(cases, index, count)
    metafunc.parametrize("moecert_case", cases, ids=[c.case_id for c in cases])


@pytest.fixture(scope="session")
def moecert_session(request):
    """Device, xfail list and results journal of this pytest process."""
    from moecert.reports.store import Journal

    from .execute import new_run_id, triton_for
    from .xfail import XfailList

    config = request.config
    device = _device(config)
    state = {"device": device, "xfail": XfailList.load(config.getoption("--moecert-xfail")),
             "checks": config.getoption("--moecert-check") or None, "journal": None,
             "run_id": new_run_id()}
    results = config.getoption("--moecert-results")
    if results:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        state["journal"] = Journal(results, f"{state['run_id']}.pytest-{worker}")
    with triton_for(device):
        yield state
    if state["journal"]:
        state["journal"].finish()
    for entry in state["xfail"].unused():
        import warnings
        warnings.warn(f"moecert xfail entry matched nothing: {entry}", stacklevel=1)


def run_and_assert(case, session) -> list[dict]:
    """Run `case`, record its rows, and fail with every failing row's message."""
    from moecert.reports.schema import FAILING

    from .execute import run_case

    rows = session["xfail"].apply(run_case(case, session["device"], session["checks"],
                                           session["run_id"]))
    if session["journal"]:
        session["journal"].append(rows)
    bad = [r for r in rows if r["status"] in FAILING]
    if bad:
        detail = "\n".join(f"{r['status']} {r['check']}: {r['message']}" for r in bad)
        pytest.fail(f"{case.case_id}\n{detail}\nrerun: moecert run --device "
                    f"{session['device']} --case '{case.to_json()}'", pytrace=False)
    statuses = {r["status"] for r in rows}
    if "xfail" in statuses and "pass" not in statuses:
        pytest.xfail("; ".join(r["message"] for r in rows if r["status"] == "xfail"))
    return rows
