"""The vLLM findings' write-ups stay complete (issue 40): every finding of
tools/vllm_repro/UPSTREAM.md's table (the one record of upstream status) has its write-up,
which links there instead of restating a search status, names the script that reproduces it,
and that script has its standalone file (make_standalone.py); a finding whose script forces
vLLM's AMX check says so; every reproduction the strict list cites is such a finding."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
REPRO = ROOT / "tools" / "vllm_repro"
# reproductions of the adapter's own limits and harness-only findings, one moecert case each
NOT_FINDINGS = {"moecert_case", "UPSTREAM"}


def _table_findings() -> dict[str, str]:
    """write-up stem -> its table row, from UPSTREAM.md's first table."""
    rows = [line for line in (REPRO / "UPSTREAM.md").read_text().splitlines()
            if line.startswith("| ") and not line.startswith("| finding")]
    out = {}
    for row in rows:
        first = row.split("|")[1]
        for stem in re.findall(r"`(\w+)\.md`", first):
            out[stem] = row
    return out


FINDINGS = _table_findings()


def _scripts(text: str) -> list[str]:
    return re.findall(r"python (?:standalone/)?(\w+)\.py", text)


def test_the_table_lists_the_findings():
    assert len(FINDINGS) >= 10, FINDINGS  # a parser that found none would pass the rest


@pytest.mark.parametrize("stem", sorted(FINDINGS))
def test_each_finding_has_a_writeup_linking_upstream_and_a_standalone_script(stem):
    from importlib.util import module_from_spec, spec_from_file_location

    writeup = REPRO / f"{stem}.md"
    assert writeup.is_file(), f"UPSTREAM.md lists {stem}.md, which does not exist"
    text = writeup.read_text()
    assert "UPSTREAM.md" in text or "no defect" in FINDINGS[stem], \
        f"{stem}.md does not link UPSTREAM.md for its upstream status"
    for stale in ("not searched", "checked 2026", "Status upstream"):
        assert stale not in text, f"{stem}.md restates its search status ({stale!r})"
    scripts = _scripts(text)
    assert scripts, f"{stem}.md names no script (python <name>.py)"
    spec = spec_from_file_location("make_standalone", REPRO / "make_standalone.py")
    make = module_from_spec(spec)
    spec.loader.exec_module(make)
    for script in scripts:
        source = REPRO / f"{script}.py"
        assert source.is_file(), f"{stem}.md names {script}.py, which does not exist"
        if "no defect" in FINDINGS[stem]:
            continue
        assert script in make.SCRIPTS and (REPRO / "standalone" / f"{script}.py").is_file(), \
            f"{script}.py has no standalone file (make_standalone.py SCRIPTS)"
        forced = any(isinstance(n, ast.ImportFrom) and n.module == "_layer"
                     for n in ast.parse(source.read_text()).body)
        if forced:  # _layer.py answers vLLM's AMX check True
            assert "AMX" in text, f"{stem}.md: {script}.py forces the AMX check; say so"


@pytest.mark.parametrize("listed", ["xfail-vllm.toml", "xfail-vllm-cuda.toml"])
def test_every_reproduction_the_vllm_list_cites_is_a_listed_finding(listed):
    data = tomllib.loads((ROOT / "conformance" / "harness" / listed).read_text())
    named = set(FINDINGS)
    for stem in FINDINGS:
        named |= set(_scripts((REPRO / f"{stem}.md").read_text()))
    cited = {m for e in data["xfail"]
             for m in re.findall(r"tools/vllm_repro/(\w+)\.(?:py|md)", e["reason"])}
    assert cited, "no entry cites a reproduction"
    assert cited - NOT_FINDINGS <= named, sorted(cited - NOT_FINDINGS - named)
