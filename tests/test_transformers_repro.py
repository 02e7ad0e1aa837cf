"""tools/transformers_repro/: the reproductions share one model-folder module (`_folder.py`)
instead of each repeating it, and make_standalone.py writes each script that imports it as one
file for transformers' maintainers (issue 45 item 7)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REPRO = ROOT / "tools" / "transformers_repro"


def _functions(path: Path) -> dict[str, str]:
    """Top-level functions of a file: name -> source text."""
    text = path.read_text()
    return {n.name: ast.get_source_segment(text, n) for n in ast.parse(text).body
            if isinstance(n, ast.FunctionDef)}


def test_no_two_reproductions_repeat_a_function():
    files = sorted(REPRO.glob("*.py"))
    assert len(files) >= 10
    seen: dict[str, str] = {}
    repeated = []
    for f in files:
        for name, text in _functions(f).items():
            if text in seen:
                repeated.append(f"{f.name}: {name} (as in {seen[text]})")
            seen.setdefault(text, f.name)
    assert not repeated, "functions repeated across reproductions:\n" + "\n".join(repeated)


def test_the_standalone_files_are_what_make_standalone_writes():
    result = subprocess.run([sys.executable, str(REPRO / "make_standalone.py"), "--check"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_a_standalone_file_imports_only_torch_transformers_and_the_standard_library():
    files = sorted((REPRO / "standalone").glob("*.py"))
    assert files
    allowed = set(sys.stdlib_module_names) | {"torch", "transformers"}
    for f in files:
        tree = ast.parse(f.read_text())
        mods = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import)
                for a in n.names}
        mods |= {n.module.split(".")[0] for n in ast.walk(tree)
                 if isinstance(n, ast.ImportFrom) and n.module}
        assert mods <= allowed, f"{f.name} imports {sorted(mods - allowed)}"
        assert {"folder", "main"} <= set(_functions(f)), f"{f.name} lacks the shared folder"
