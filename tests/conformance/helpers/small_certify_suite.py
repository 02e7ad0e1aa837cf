"""Imported with `--import small_certify_suite`: every suite becomes `small_suite.build`, so
`moecert certify` runs in seconds on a CPU in its own process, as a shard on a CI host would run
it (tests/conformance/certification/test_shards.py). The patch is for good: never import this
module into the pytest process itself (a test there monkeypatches `small_suite.build` in)."""

from __future__ import annotations

from moecert.conformance.cli import run_command
from moecert.conformance.harness import suites
from small_suite import build

suites.build_suite = build
run_command.build_suite = build
