"""The one hard rule of the layout (SPEC section 1): what each folder may import."""

from __future__ import annotations

import ast
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
    "reports": ({"pandas", "pyarrow", "matplotlib", "numpy"}, {"moecert.reports"}),
    # safetensors: `moecert run --inputs FILE`, hidden states (conformance/harness/model_layers.py)
    "conformance": ({"torch", "triton", "pandas", "pyarrow", "pytest", "hypothesis", "tqdm",
                     "safetensors"}, {"moecert"}),
}


def _imports(path: Path, package: str):
    """Absolute module names imported by a file (relative imports resolved)."""
    tree = ast.parse(path.read_text())
    parts = [package, *path.relative_to(ROOT / package.split(".")[-1]).with_suffix("").parts]
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
        for mod in _imports(path, f"moecert.{folder}"):
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


def test_the_pytest_plugin_imports_no_command_line_code_nor_a_private_name():
    """The plugin holds hooks; what it shares with `moecert run` lives in the harness as
    public functions (harness/option_values.py, harness/runner.py), not in conformance/cli."""
    plugin = ROOT / "conformance" / "harness" / "plugin.py"
    mods = list(_imports(plugin, "moecert.conformance"))
    assert mods and not [m for m in mods if m.startswith("moecert.conformance.cli")], mods
    private = [f"{node.module}.{a.name}" for node in ast.walk(ast.parse(plugin.read_text()))
               if isinstance(node, ast.ImportFrom) for a in node.names if a.name.startswith("_")]
    assert not private
