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
    # loader (kernels/vllm_folder.py); transformers: the second engine's adapter
    # (kernels/transformers_engine/)
    "kernels": ({"torch", "triton", "vllm_xpu_kernels", "vllm", "transformers", "safetensors"},
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


def _module_name(path: Path) -> str:
    parts = ["moecert", *path.relative_to(ROOT).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle of `graph` (module -> modules it imports), or [] if there is none."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node, path):
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt):], nxt]
            if nxt not in state and (found := visit(nxt, [*path, nxt])):
                return found
        state[node] = 2
        return []

    return next((c for n in sorted(graph) if n not in state and (c := visit(n, [n]))), [])


def test_the_format_facts_import_one_another_without_a_cycle():
    """Each module of `reference/schemes/` imports the modules it reads (the scheme table is
    `table.py`), never its own package: a cycle through the package's `__init__` holds only
    while an import stays at the file's end (issue 45)."""
    files = sorted((ROOT / "reference" / "schemes").glob("*.py"))
    names = {_module_name(f) for f in files}
    graph = {_module_name(f): set(_imports(f, "")) & names - {_module_name(f)} for f in files}
    assert len(graph) == len(files) >= 7
    assert not _cycle(graph), f"import cycle in the format facts: {' -> '.join(_cycle(graph))}"
    assert _cycle({"a": {"b"}, "b": {"a"}}) == ["a", "b", "a"]  # the finder finds one


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
    plugin = ROOT / "conformance" / "plugin.py"
    mods = list(_imports(plugin, "moecert.conformance"))
    assert mods and not [m for m in mods if m.startswith("moecert.conformance.cli")], mods
    private = [f"{node.module}.{a.name}" for node in ast.walk(ast.parse(plugin.read_text()))
               if isinstance(node, ast.ImportFrom) for a in node.names if a.name.startswith("_")]
    assert not private


@pytest.mark.parametrize("product", ["harness", "performance", "certification", "mutants",
                                     "calibration"])
def test_a_product_folder_of_conformance_imports_no_command_line_code(product):
    """The command line (conformance/cli) declares the options and drives the products; a
    product never reaches back into it, so each runs without the command line."""
    bad = [f"{path.relative_to(ROOT)}: {mod}"
           for path in sorted((ROOT / "conformance" / product).rglob("*.py"))
           for mod in _imports(path, f"moecert.conformance.{product}")
           if mod.startswith("moecert.conformance.cli")]
    assert not bad, "\n".join(bad)


# --- adapters read the records: no comparison tests a scheme, family or layout name ----------

def _name_vocabulary() -> dict[str, str]:
    """Every scheme name, family label, tensor layout and checkpoint-format name, with what it
    names. A string that also names an element ("int8", "bf16") is left out: comparing an
    element (`activation_element == "int8"`, a dtype) reads a record's field."""
    from moecert.reference.schemes import LAYOUTS, SCHEMES
    from moecert.reference.schemes.elements import ELEMENTS

    names: dict[str, list[str]] = {}

    def add(name, what):
        if what not in names.setdefault(name, []):
            names[name].append(what)
    for s in SCHEMES.values():
        add(s.name, "scheme")
        add(s.family, "family")
        for f in s.formats:
            add(f.layout, "layout")
            if f.name is not None:
                add(f.name, "checkpoint format")
    for layout in LAYOUTS:
        add(layout, "layout")
    return {n: " / ".join(what) for n, what in names.items() if n not in ELEMENTS}


def _strings(node: ast.AST) -> list[str]:
    """The string literals of a comparison's operand: a constant, or a literal tuple / list /
    set of them (`x in ("gptq", "awq")`)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [s for e in node.elts for s in _strings(e)]
    return []


def name_literal_tests(source: str, vocabulary: dict[str, str]) -> list[tuple[int, str]]:
    """(line, what) of each comparison (==, !=, in, not in, ...) or match case in `source`
    that tests a name of `vocabulary` written as a literal. A declared data table (a dict or
    tuple that maps names to facts, looked up by a variable) is no comparison and passes."""
    found = []
    for node in ast.walk(ast.parse(source)):
        operands = []
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
        elif isinstance(node, ast.MatchValue):
            operands = [node.value]
        for s in (s for o in operands for s in _strings(o)):
            if s in vocabulary:
                found.append((node.lineno, f"{vocabulary[s]} {s!r}: {ast.unparse(node)}"))
                break
    return found


def test_no_comparison_in_kernels_or_conformance_tests_a_scheme_family_or_layout_name():
    """Adapters, the harness and the mutants read the format facts' fields (a record's
    interleave, zero domain, global-scale convention; a tensor's declared shape), never
    `layout == "gptq"` or `scheme in ("mxfp4", "nvfp4")`: a new scheme or layout then needs
    new data, not a hunt for the places that branch on a name (issue 35)."""
    vocabulary = _name_vocabulary()
    bad = [f"{path.relative_to(ROOT)}:{line}: {what}"
           for folder in ("kernels", "conformance")
           for path in sorted((ROOT / folder).rglob("*.py"))
           for line, what in name_literal_tests(path.read_text(), vocabulary)]
    assert not bad, "comparisons with name literals (read the records):\n" + "\n".join(bad)


def test_the_name_literal_check_catches_a_planted_comparison():
    vocabulary = _name_vocabulary()
    assert {"gptq-int4", "gptq", "ct-int", "modelopt", "w4afp8"} <= set(vocabulary)
    planted = ('if q.layout == "gptq":\n    pass\n'
               'ok = scheme not in ("mxfp4", "nvfp4")\n'
               'match q.checkpoint_format:\n    case "modelopt":\n        pass\n'
               'fine = element == "int8" or TABLE[q.layout] or q.record.global_scale == "divide"\n')
    found = name_literal_tests(planted, vocabulary)
    assert [line for line, _ in found] == [1, 3, 5], found
    assert "layout" in found[0][1] and "'gptq'" in found[0][1], found
    assert found[1][1].startswith("scheme / family 'mxfp4'"), found


HARNESS_MAX_LINES = 400  # issue 35: the harness's files stay readable one at a time


def _long_files(folder: Path, limit: int) -> list[tuple[str, int]]:
    return [(p.name, n) for p in sorted(folder.rglob("*.py"))
            if (n := len(p.read_text().splitlines())) > limit]


def test_no_file_of_the_harness_is_over_its_length(tmp_path):
    assert not _long_files(ROOT / "conformance" / "harness", HARNESS_MAX_LINES)
    (tmp_path / "big.py").write_text("x = 1\n" * (HARNESS_MAX_LINES + 1))  # it can fail
    assert _long_files(tmp_path, HARNESS_MAX_LINES) == [("big.py", HARNESS_MAX_LINES + 1)]
