"""Only a claimed case can be oversize (issue 40): a case the backend does not claim that
would not fit the machine either is unsupported, with the backend's reason, in `moecert run`
and in a certify bundle; a certify run of claimed cases the machine cannot hold says the
backend claims them."""

from __future__ import annotations

import re

from moecert.conformance.cli import app as cli
from moecert.conformance.harness import memory
from moecert.reports import load

XPU_DEEPSEEK = ["--suite", "certify", "--model", "deepseek-v3", "--backend", "xpu", "-k",
                "M1. and (awq-int4/ or fp8-w8a8/)", "--device", "cpu"]


def test_unclaimed_cases_too_large_to_run_are_unsupported(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(memory.HOST_MEMORY_VARIABLE, "4G")
    code = cli.main(["run", *XPU_DEEPSEEK, "--results", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == 1
    assert out.strip().splitlines()[-1] == ("not green: no claimed case ran a check (backend "
                                            "xpu 0 of 2 claimed)")
    assert "oversize" not in out.strip().splitlines()[-1]
    assert "need more memory than this machine has, and will not run" not in err
    assert "2 case(s) the backend does not claim would need more memory" in err
    rows = load(tmp_path)
    assert rows["status"].tolist() == ["unsupported", "unsupported"]
    assert rows["claimed"].tolist() == [False, False]
    assert all(m.startswith("not claimed: scheme ") and "claims check not run" in m
               for m in rows["message"])


def test_certify_of_claimed_oversize_cases_says_they_are_claimed(tmp_path, monkeypatch,
                                                                 capsys):
    monkeypatch.setenv(memory.HOST_MEMORY_VARIABLE, "4G")
    code = cli.main(["certify", "--backend", "torch", "--model", "deepseek-v3", "--device",
                     "cpu", "--out", str(tmp_path / "b")])
    out = capsys.readouterr().out
    assert code == 1
    run, certificate = out.strip().splitlines()[-2:]
    # every claimed case of the model is oversize on 4 GiB, and said to be claimed
    counts = re.search(r"torch (\d+) of (\d+) claimed, (\d+) oversize", run)
    assert run.startswith("run: not green: ") and counts, run
    n = counts.group(1)
    assert int(n) > 0 and counts.groups() == (n, n, n)
    assert certificate.startswith("NOT CERTIFIED: ")
    assert "claims none" not in certificate and f"{n} oversize" in certificate
