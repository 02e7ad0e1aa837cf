"""`moecert list`: the scheme table, the backends and the oracle's selection table."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from moecert.conformance.cli.app import main
from moecert.kernels.registry import unregister_backend

HELPERS = Path(__file__).parents[1] / "helpers"


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


def _claims(out: str) -> dict[str, tuple[int, int, str]]:
    """variant -> (claimed, total, reasons) from `moecert list --backend`'s lines."""
    rows = re.findall(r"^  (\S.*?) +(\d+) of (\d+)(?: +not: (.*))?$", out, re.M)
    return {label: (int(n), int(total), why) for label, n, total, why in rows}


def test_list_backend_shows_its_claims_per_variant_with_reasons(capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(HELPERS))
    try:
        assert main(["list", "--backend", "vendor-subset", "--import", "vendor_backends"]) == 0
    finally:
        for name in ("vendor-gptq-all", "vendor-subset"):
            unregister_backend(name)
        sys.modules.pop("vendor_backends", None)
    out = capsys.readouterr().out
    claims = _claims(out)
    head = re.search(r"^vendor-subset on \S+ \(available here\): claims (\d+) of (\d+) smoke "
                     r"cases$", out, re.M)
    assert head and int(head[1]) == sum(c[0] for c in claims.values())
    assert int(head[2]) == sum(c[1] for c in claims.values())
    n, total, why = claims["bf16"]
    assert 0 < n < total and why == f"bias not supported ({total - n})"
    n, total, why = claims["gptq-int4 gptq g128 sym act-order"]
    assert n == total > 0 and not why
    n, total, why = claims["awq-int4 awq g128 asym"]
    assert n == 0 and why == (f"awq-int4 not claimed by vendor-subset (it claims bf16, "
                              f"gptq-int4) ({total})")
    assert len(claims) > 20  # every scheme variant of the suite


def test_list_backend_for_a_builtin(capsys):
    assert main(["list", "--backend", "xpu", "--suite", "ci"]) == 0
    claims = _claims(capsys.readouterr().out)
    n, total, why = claims["gptq-int4 gptq g128 asym"]
    assert n == 0 and why == f"zero points not supported (symmetric int4 only) ({total})"
    n, total, why = claims["ct-int4 ct-0.17 g128 sym"]
    assert 0 < n < total and "batched activation format not supported" in why


def test_list_backend_usage_errors(capsys):
    assert main(["list", "--backend", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("moecert list: error: unknown backend 'nope'; known: ") and \
        err.count("\n") == 1
    assert main(["list", "--backend", "torch", "--import", "no_such_module_here"]) == 2
    assert "--import no_such_module_here" in capsys.readouterr().err


def test_a_checkout_without_an_install_still_names_its_version(monkeypatch):
    """On a GPU machine the checkout runs through PYTHONPATH, with no installed distribution:
    certificates and rows then carry pyproject.toml's version, not "unknown"."""
    import tomllib
    from pathlib import Path

    from moecert.conformance.harness import provenance

    monkeypatch.setattr(provenance, "_version", lambda dist: "")
    provenance.moecert_version.cache_clear()
    try:
        declared = tomllib.loads((Path(provenance.__file__).resolve().parents[2]
                                  / "pyproject.toml").read_text())["project"]["version"]
        assert provenance.moecert_version() == f"{declared} (checkout)"
        assert provenance.versions()["moecert"] == f"{declared} (checkout)"
    finally:
        provenance.moecert_version.cache_clear()


def test_list_and_run_agree_on_what_is_available_here(capsys):
    """On a CPU the triton backend runs through the interpreter, for `list` as for `run`."""
    import torch

    if torch.cuda.is_available():
        return  # the question is the CPU's
    assert main(["list"]) == 0
    assert re.search(r"^  triton +available here$", capsys.readouterr().out, re.M)
    assert main(["list", "--backend", "triton"]) == 0
    claims = re.match(r"triton on cpu \(available here\): claims (\d+) of (\d+) smoke cases",
                      capsys.readouterr().out)
    assert claims and claims[1] == claims[2]
    assert main(["run", "--backend", "triton", "--list-cases"]) == 0
    assert capsys.readouterr().err.strip() == f"{claims[2]} cases"


def test_list_mutants_names_each_with_its_bug(capsys):
    from moecert.conformance.mutants import LEGIT, MUTANTS

    assert main(["list", "--mutants"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{len(MUTANTS)} mutants ")
    for m in MUTANTS.values():  # each name on a line with its bug, then where it lives
        assert re.search(rf"^  {re.escape(m.name)} +{re.escape(m.bug)}\n +schemes "
                         rf"{re.escape(', '.join(m.targets))}; copy of {m.base}", out, re.M)
    for name in LEGIT:
        assert re.search(rf"^  {re.escape(name)} +\S", out, re.M)


def test_list_imports_its_modules_without_backend(capsys):
    """`moecert list --import M` imports M (it may register backends) even without --backend:
    a module's backends then appear among the backends."""
    from moecert.kernels import backend_names

    before = set(backend_names())
    sys.path.insert(0, str(HELPERS))
    try:
        assert main(["list", "--no-backends", "--import", "no_such_module_here"]) == 2
        assert "--import no_such_module_here" in capsys.readouterr().err
        assert main(["list", "--import", "vendor_backends"]) == 0
        assert re.search(r"^  vendor-subset +available here$", capsys.readouterr().out, re.M)
    finally:
        sys.path.remove(str(HELPERS))
        for name in set(backend_names()) - before:
            unregister_backend(name)
        sys.modules.pop("vendor_backends", None)
