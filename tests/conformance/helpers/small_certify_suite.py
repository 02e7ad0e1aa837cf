"""Imported with `--import small_certify_suite`: every suite is a few torch cases of the smoke
suite (one full, eight light, two schemes), so `moecert certify` runs in seconds on a CPU in
its own process, as a shard on a CI host would run it (tests/conformance/certification/
test_shards.py)."""

from __future__ import annotations

from moecert.conformance.cli import run_command
from moecert.conformance.harness import suites

_build = suites.build_suite


def small_suite() -> list:
    out = []
    for scheme in ("fp16", "bf16"):
        cases = _build("smoke", ["torch"], [scheme])
        light = [c for c in cases if c.depth == "light"]
        out += ([cases[0]] if scheme == "fp16" else []) + light[:4]
    return out


def build(name, backends=None, schemes=None):
    return [c for c in small_suite() if backends is None or c.backend in backends]


suites.build_suite = build
run_command.build_suite = build
