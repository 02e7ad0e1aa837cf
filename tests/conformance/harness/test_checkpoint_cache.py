"""The cache of synthesized checkpoints: what it gives back is bit for bit what synthesis
makes, it is keyed by everything synthesis depends on, a damaged entry is made afresh, and
`--no-cache` leaves it alone while a cached run's verdicts equal an uncached one's."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from dataclasses import replace

import pytest
import torch
from moecert.conformance.harness import checkpoint_cache
from moecert.conformance.harness.suites import build_suite
from moecert.reports import load


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(checkpoint_cache.CACHE_VARIABLE, str(tmp_path / "cache"))
    checkpoint_cache.configure(True)
    yield tmp_path / "cache"
    checkpoint_cache.configure(False)


def _one_per_scheme():
    """The smallest synthesized problem of each scheme in the smoke suite."""
    seen = {}
    for case in build_suite("smoke", ["torch"]):
        P = case.problem
        if case.source is None and (case.scheme not in seen or P.E * P.K * P.N < (
                seen[case.scheme].problem.E * seen[case.scheme].problem.K
                * seen[case.scheme].problem.N)):
            seen[case.scheme] = case
    return list(seen.values())


def _same(a, b) -> bool:
    fields = [f.name for f in dataclasses.fields(a) if f.name != "tensors"]
    return (all(getattr(a, f) == getattr(b, f) for f in fields)
            and a.tensors.keys() == b.tensors.keys()
            and all(a.tensors[n].dtype == b.tensors[n].dtype
                    and a.tensors[n].shape == b.tensors[n].shape
                    and a.tensors[n].stride() == b.tensors[n].stride()  # layouts too
                    and torch.equal(_bytes(a.tensors[n]), _bytes(b.tensors[n]))
                    for n in a.tensors))


def _bytes(t):
    return t.contiguous().view(-1).view(torch.uint8)  # NaN payloads compare too


def _never():
    raise AssertionError("synthesized again: the cache was not read")


def test_a_cached_checkpoint_is_the_synthesized_one_bit_for_bit(cache):
    cases = _one_per_scheme()
    assert len(cases) >= 10
    for case in cases:
        made = checkpoint_cache.synthesized(case, case.checkpoint)
        read = checkpoint_cache.synthesized(case, _never)
        assert _same(made, read), case.case_id
    assert len(list(cache.rglob("*.pt"))) == len(cases)


def test_the_key_is_the_problem_not_the_backend():
    case = _one_per_scheme()[0]
    key = checkpoint_cache.key(case)
    assert checkpoint_cache.key(replace(case, backend="triton", depth="light")) == key
    assert checkpoint_cache.key(replace(case, seed=case.seed + 1)) != key
    assert checkpoint_cache.key(replace(case, problem=replace(case.problem, E=8))) != key


def test_the_key_follows_the_synthesis_source(monkeypatch):
    case = _one_per_scheme()[0]
    key = checkpoint_cache.key(case)
    monkeypatch.setattr(checkpoint_cache, "synthesis_source_sha256", lambda: "0" * 64)
    assert checkpoint_cache.key(case) != key


def test_a_damaged_entry_is_made_afresh(cache):
    case = _one_per_scheme()[0]
    made = checkpoint_cache.synthesized(case, case.checkpoint)
    (entry,) = cache.rglob("*.pt")
    entry.write_bytes(entry.read_bytes()[:100])
    again = checkpoint_cache.synthesized(case, case.checkpoint)
    assert _same(made, again)
    assert _same(made, checkpoint_cache.synthesized(case, _never))  # rewritten


def test_off_it_neither_reads_nor_writes(cache):
    checkpoint_cache.configure(False)
    case = _one_per_scheme()[0]
    calls = []
    checkpoint_cache.synthesized(case, lambda: calls.append(1) or case.checkpoint())
    checkpoint_cache.synthesized(case, lambda: calls.append(1) or case.checkpoint())
    assert calls == [1, 1] and not cache.exists()


def _run(tmp_path, cache, *extra):
    env = dict(os.environ, **{checkpoint_cache.CACHE_VARIABLE: str(cache)})
    return subprocess.run([sys.executable, "-m", "moecert.conformance.cli", "run", "--suite",
                           "smoke", "--backend", "torch", "--scheme", "gptq-int4", "--scheme",
                           "nvfp4", "-k", "M9 and s0 and not relu2 and not swiglu", "-n", "2",
                           "--results", str(tmp_path / "out"), *extra],
                          capture_output=True, text=True, env=env, timeout=600)


def test_a_cached_run_judges_as_an_uncached_one_and_no_cache_writes_nothing(tmp_path):
    cache = tmp_path / "cache"
    runs = []
    for extra in (["--no-cache"], [], []):  # without the cache, filling it, reading it
        proc = _run(tmp_path, cache, "--run-id", f"r{len(runs)}", *extra)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        runs.append(load(tmp_path / "out", run=f"r{len(runs)}"))
        if not runs[1:]:
            assert not cache.exists()  # --no-cache
    filled = len(list(cache.rglob("*.pt")))  # a problem's draw, and the reload check's
    assert runs[0]["problem_id"].nunique() <= filled <= 2 * runs[0]["problem_id"].nunique()
    columns = ["case_id", "check", "status", "rel_fro", "max_abs", "cosine", "message"]
    frames = [r[columns].astype(str).sort_values(["case_id", "check"]).reset_index(drop=True)
              for r in runs]
    assert frames[0].equals(frames[1]) and frames[0].equals(frames[2])
