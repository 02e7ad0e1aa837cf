"""The README's numbers that move with the code, recomputed (issue 40: it said the ci suite
had 1468 cases and certify 6760, where they had 1724 and 7556): the suites' sizes on the
built-in backends, and the size of one backend's certify suite in the example bundle line.
And one unit of memory: GiB, as the harness prints it (memory.gb), never GB."""

from __future__ import annotations

import re
from pathlib import Path

from moecert.conformance.harness.suites import SUITES, build_suite
from moecert.kernels.registry import BUILTINS

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def test_the_suite_sizes_are_todays():
    line = re.search(r"<!-- suite-sizes[^>]*-->(.*?)cases", README, re.S)
    assert line, "the README's suite-sizes sentence is gone"
    stated = {name: int(n) for name, n in re.findall(r"(\w+) (\d+)", line[1])}
    counted = {name: len(build_suite(name, list(BUILTINS))) for name in SUITES}
    assert stated == counted


def test_the_example_bundle_line_counts_one_backends_certify_suite():
    stated = re.search(r"of the (\d+) cases of the suite missing \(backend (\w+)", README)
    assert stated, "the README's NOT CERTIFIED example is gone"
    assert int(stated[1]) == len(build_suite("certify", [stated[2]]))


def test_memory_is_in_gib():
    """"80GB" inside a product name (NVIDIA H100 80GB HBM3) is the product's name."""
    assert not re.findall(r"\d(?:\.\d+)? GB\b", README)
