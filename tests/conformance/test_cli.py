"""`moecert list`: the scheme table, the backends and the oracle's selection table."""

from __future__ import annotations

import re

from moecert.conformance.cli import main


def test_list_prints_backends_and_selection(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^  torch +available here$", out, re.M)
    blocks = dict(re.findall(r"^(\S[^\n]*)\n((?:  [^\n]*\n)+)", out, re.M))
    assert {"cuda sm75", "cuda sm90", "rocm gfx942", "xpu", "cpu"} <= set(blocks)
    xpu = blocks["xpu"]
    assert re.search(r"gptq-int4 gptq g128 sym +-> xpu", xpu)
    assert re.search(r"gptq-int4 gptq g128 asym +-> torch +\(xpu: zero points not supported "
                     r"\(symmetric int4 only\)\)", xpu)
    assert re.search(r"fp8-w8a16 tensor +-> torch +\(triton: fp8 e4m3 weights need compute "
                     r"capability >= 8.9 \(sm80\)\)", blocks["cuda sm80"])
    assert "-> NONE" not in out


def test_list_without_backends(capsys):
    assert main(["list", "--no-backends"]) == 0
    assert "selection" not in capsys.readouterr().out
