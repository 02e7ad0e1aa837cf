"""The one hard rule of the layout (SPEC section 1): what each folder may import, in the
source and at run time.

The format facts (`reference/schemes/`: scheme, element and format records, tensor names,
the canonical type) are the one part of the reference both sides read: they import nothing
of the reference's math, and kernels import nothing else of the reference. Importing
`moecert.kernels` and every backend module loads none of the reference's math modules.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STDLIB = set(sys.stdlib_module_names) | {"__future__"}

ALLOWED = {  # folder -> third-party top-level modules and moecert modules it may import
    # safetensors: reading model folders lazily (reference/loader)
    "reference": ({"torch", "safetensors"}, {"moecert.reference"}),
    # adapters may import their vendor's library (optional, guarded by ImportError);
    # safetensors: an engine adapter reading a model folder's files for its engine's own
    # loader (kernels/vllm_folder.py)
    "kernels": ({"torch", "triton", "vllm_xpu_kernels", "vllm", "safetensors"},
                {"moecert.kernels", "moecert.reference.schemes"}),
    # the format facts: data, no math; what kernels may read
    "reference/schemes": ({"torch"}, {"moecert.reference.schemes"}),
    "reports": ({"pandas", "pyarrow", "matplotlib", "numpy"}, {"moecert.reports"}),
    # safetensors: `moecert run --inputs FILE`, hidden states (conformance/harness/model_layers.py)
    "conformance": ({"torch", "triton", "pandas", "pyarrow", "pytest", "hypothesis", "tqdm",
                     "safetensors"}, {"moecert"}),
}


def _imports(path: Path, package: str):
    """Absolute module names imported by a file (relative imports resolved)."""
    tree = ast.parse(path.read_text())
    parts = ["moecert", *path.relative_to(ROOT).with_suffix("").parts]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = parts[:-node.level]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module
            yield mod
            if node.module is None or node.level:
                yield from (f"{mod}.{a.name}" for a in node.names)


@pytest.mark.parametrize("folder", sorted(ALLOWED))
def test_folder_imports_only_what_it_may(folder):
    third_party, internal = ALLOWED[folder]
    bad = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        for mod in _imports(path, "moecert." + folder.replace("/", ".")):
            top = mod.split(".")[0]
            if top in STDLIB or top in third_party:
                continue
            if top == "moecert" and any(mod == p or mod.startswith(p + ".") for p in internal):
                continue
            if top == "moecert" and folder == "kernels" and mod == "moecert.reference":
                bad.append(f"{path.relative_to(ROOT)}: {mod} (kernels may read "
                           "moecert.reference.schemes only)")
                continue
            bad.append(f"{path.relative_to(ROOT)}: {mod}")
    assert not bad, "imports outside the layout's rules:\n" + "\n".join(bad)


FACTS = "moecert.reference.schemes"


def _math_modules() -> list[str]:
    """Every module of the reference outside the format facts (the reference's math: codecs,
    layouts, quantizers, the MoE, synthesis, the loader)."""
    out = []
    for path in sorted((ROOT / "reference").rglob("*.py")):
        rel = path.relative_to(ROOT / "reference").with_suffix("").parts
        if rel[0] == "schemes" or rel == ("__init__",):
            continue
        out.append(".".join(("moecert.reference", *(p for p in rel if p != "__init__"))))
    return out


_LOADED = """
import importlib, json, pkgutil, sys
import moecert.kernels as k
names = [m.name for m in pkgutil.walk_packages(k.__path__, "moecert.kernels.")]
for name in names:
    importlib.import_module(name)
print(json.dumps({"imported": names, "loaded": sorted(sys.modules)}))
"""


def test_importing_every_kernel_module_loads_none_of_the_reference_math():
    result = subprocess.run([sys.executable, "-c", _LOADED], capture_output=True, text=True,
                            check=True)
    seen = json.loads(result.stdout)
    assert "moecert.kernels.triton_moe.backend" in seen["imported"]  # backends included
    math = set(_math_modules())
    assert {"moecert.reference.moe", "moecert.reference.elements",
            "moecert.reference.layouts.dense", "moecert.reference.quantize"} <= math
    loaded = set(seen["loaded"])
    assert not math & loaded, f"kernels loaded reference math: {sorted(math & loaded)}"
    outside = {m for m in loaded if m.startswith("moecert.reference.")
               and not m.startswith(FACTS)}
    assert not outside, f"kernels loaded reference modules beyond the facts: {sorted(outside)}"


def test_the_reference_package_still_offers_its_public_names():
    """The lazy package (PEP 562) gives the functions, also after their submodules (which
    share their names: moe, dequantize, synthesize) are imported."""
    code = ("import moecert.reference.moe, moecert.reference.synthesize; "
            "import moecert.reference as r; "
            "print(callable(r.moe), callable(r.synthesize), callable(r.dequantize), "
            "r.Checkpoint.__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["True", "True", "True", "Checkpoint"]


def test_the_pytest_plugin_imports_no_command_line_code_nor_a_private_name():
    """The plugin holds hooks; what it shares with `moecert run` lives in the harness as
    public functions (harness/option_values.py, harness/runner.py), not in conformance/cli."""
    plugin = ROOT / "conformance" / "harness" / "plugin.py"
    mods = list(_imports(plugin, "moecert.conformance"))
    assert mods and not [m for m in mods if m.startswith("moecert.conformance.cli")], mods
    private = [f"{node.module}.{a.name}" for node in ast.walk(ast.parse(plugin.read_text()))
               if isinstance(node, ast.ImportFrom) for a in node.names if a.name.startswith("_")]
    assert not private


@pytest.mark.parametrize("product", ["harness", "performance", "certification", "mutants"])
def test_a_product_folder_of_conformance_imports_no_command_line_code(product):
    """The command line (conformance/cli) declares the options and drives the products; a
    product never reaches back into it, so each runs without the command line."""
    bad = [f"{path.relative_to(ROOT)}: {mod}"
           for path in sorted((ROOT / "conformance" / product).rglob("*.py"))
           for mod in _imports(path, f"moecert.conformance.{product}")
           if mod.startswith("moecert.conformance.cli")]
    assert not bad, "\n".join(bad)
