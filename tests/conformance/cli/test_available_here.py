"""One notion of "available here": `moecert inspect`, `moecert list` and `moecert run` agree
about the triton backend on a CPU (it runs through the Triton interpreter; issue 33:
inspect said "not by triton: ... cpu needs TRITON_INTERPRET=1" where run claimed it)."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest
import torch
from moecert.conformance.cli.app import main

sys.path.insert(0, str(Path(__file__).parents[2] / "reference"))
import test_loader as loader_tests

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="a CPU-only machine's view")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return loader_tests.producer_folder(tmp_path_factory.mktemp("models"),
                                        "gptq-v1-act-order")[2]


def test_inspect_claims_what_run_runs_on_a_cpu(folder, capsys, monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert main(["inspect", str(folder)]) == 0
    out = capsys.readouterr().out
    claimed = out.split("claimed by: ")[1].splitlines()[0].split(", ")
    assert "triton" in claimed, out
    assert "not by triton" not in out and "TRITON_INTERPRET" not in out
    assert "TRITON_INTERPRET" not in os.environ  # set only while the claims are asked
    # the backends `moecert run --checkpoint` runs by default there: triton among them
    assert main(["run", "--checkpoint", str(folder), "--list-cases"]) == 0
    run = {i.split("/")[0] for i in capsys.readouterr().out.split()}
    assert "triton" in run and set(claimed) <= run | {c for c in claimed if "(" in c}
    # and `moecert list` calls it available here
    assert main(["list"]) == 0
    assert re.search(r"^  triton +available here$", capsys.readouterr().out, re.M)
