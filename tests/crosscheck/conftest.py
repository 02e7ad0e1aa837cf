"""Shared pieces of the crosscheck tests (compressed-tensors, torchao, AutoAWQ).

Imports no third-party quantization library: each test module skips itself with
pytest.importorskip when its library is missing, so the default test run (which does not
install them) skips the whole folder cleanly.

The folder is put on sys.path here, so that the modules import what they share (`_common`,
`_torchao`: helper modules, no tests) by name, after their importorskip.

`xc_counts` records agreement and disagreement counts; they are printed at the end of the run
("crosscheck counts") and attached to the test's junit properties, so a report shows how many
codes differed and where, not only pass or fail.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

_COUNTS: dict[str, dict[str, object]] = {}


@pytest.fixture
def xc_counts(request, record_property):
    """xc_counts(name=value, ...): record counts for this test."""

    def record(**counts):
        for name, value in counts.items():
            value = value.item() if hasattr(value, "item") else value
            _COUNTS.setdefault(request.node.nodeid, {})[name] = value
            record_property(name, value)

    return record


def pytest_terminal_summary(terminalreporter):
    if not _COUNTS:
        return
    terminalreporter.section("crosscheck counts")
    for nodeid, counts in _COUNTS.items():
        line = " ".join(f"{name}={value}" for name, value in counts.items())
        terminalreporter.write_line(f"{nodeid.rsplit('/', 1)[-1]}  {line}")

