"""What a newcomer reads (issue 33 item 8): `moecert --help` speaks to users, a failed
threshold prints enough digits to read true, the package says what it is."""

from __future__ import annotations

import pytest
from moecert import conformance
from moecert.conformance.cli.app import main
from moecert.conformance.harness.tolerances import _judge_metric


def test_help_is_for_users(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps its lines
    assert "SPEC" not in out and "SUBCOMMANDS" not in out and "module" not in out
    assert "conformance harness" in out and "moecert run --suite smoke" in out
    assert "--mutants" in out  # list's line names what it can show


@pytest.mark.parametrize("value, threshold, says", [
    (0.01637, 0.0156, "rel_fro 1.64e-02 > 1.56e-02"),  # read "1.6e-02 > 1.6e-02"
    (9.1e-3, 4e-3, "rel_fro 9.1e-03 > 4.0e-03"),  # two digits where they suffice
    (0.0156001, 0.0156, "rel_fro 1.56001e-02 > 1.56000e-02"),
])
def test_a_failed_threshold_reads_true(value, threshold, says):
    used, failure = _judge_metric("rel_fro", value, threshold)
    assert failure == says and used > 1


def test_the_package_says_what_it_is():
    assert "later issues" not in conformance.__doc__
    assert "harness/" in conformance.__doc__ and "mutants/" in conformance.__doc__
