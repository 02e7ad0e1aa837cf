"""Mutation self-test of the reference: each planted bug of mutants.toml, applied to a copy of
the package, must make each of its declared tests of tests/reference fail. The list is the
reference's mutation score; a rule of the reference whose bug no test catches is a rule the
conformance verdicts cannot trust (issue 40: 27 planted bugs, 6 missed, among them the gpt-oss
constant the kernels read too, with which every backend agrees with a wrong reference).

Cost: one pytest subprocess per mutant on its declared tests only (about 5-10 s each)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from mutation import (
    ROOT,
    failed_node_ids,
    load_mutants,
    make_site,
    run_tests,
    subprocess_env,
    uncaught,
)

MUTANTS = load_mutants()
BY_NAME = {m.name: m for m in MUTANTS}


def _tail(text: str, lines: int = 25) -> str:
    return "\n".join(text.splitlines()[-lines:])


def test_records_are_well_formed():
    assert len(BY_NAME) == len(MUTANTS), "two mutants share a name"
    for m in MUTANTS:
        assert m.path.is_file(), f"mutant {m.name}: no file reference/{m.file}"
        assert m.original != m.replacement, f"mutant {m.name}: the replacement changes nothing"
        assert m.caught_by, f"mutant {m.name}: caught_by names no test"
        for entry in m.caught_by:
            file = entry.split("::", 1)[0]
            assert file.startswith("tests/reference/") and (ROOT / file).is_file(), \
                f"mutant {m.name}: caught_by entry {entry!r} is no file of tests/reference"


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_each_original_occurs_once(name):
    m = BY_NAME[name]
    count = m.path.read_text().count(m.original)
    assert count == 1, (f"mutant {name} (tests/reference_mutants/mutants.toml): its original "
                        f"text occurs {count} times in reference/{m.file}, not once; the code "
                        "moved or changed: update the record with it")


def test_the_copy_is_what_the_runs_import_and_its_tests_pass(tmp_path):
    """The control: on the unmutated copy the subprocess imports moecert.reference from the
    copy and every declared test passes (so a failure on a mutant is the mutant's)."""
    site = make_site(tmp_path)
    where = subprocess.run([sys.executable, "-c",
                            "import moecert.reference as r; print(r.__file__)"],
                           env=subprocess_env(site), capture_output=True, text=True, cwd=ROOT)
    assert Path(where.stdout.strip()).is_relative_to(site), where.stdout + where.stderr
    node_ids = sorted({e for m in MUTANTS for e in m.caught_by})
    run = run_tests(site, node_ids)
    assert run.returncode == 0, _tail(run.stdout + run.stderr)


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_the_declared_tests_catch_the_mutant(name, tmp_path):
    m = BY_NAME[name]
    run = run_tests(make_site(tmp_path, m), list(m.caught_by))
    output = run.stdout + run.stderr
    missed = uncaught(m, failed_node_ids(output))
    assert run.returncode == 1 and not missed, (
        f"mutant {name} (reference/{m.file}: {m.breaks}) is not caught by "
        f"{', '.join(missed) or 'a failing test (pytest exit ' + str(run.returncode) + ')'}"
        f"\n{_tail(output)}")
