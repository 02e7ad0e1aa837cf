"""The wheel holds every package of the four folders and every data file beside their code
(issue 40: a package list written by hand left `moecert.conformance.harness.checks` out, and
`moecert list` from a wheel failed with ModuleNotFoundError; the editable installs the tests
use never saw it). One `pip wheel --no-deps` of a copy of the sources in a temporary folder
(an in-tree build would leave build/ and *.egg-info in the checkout); tools/wheel_check.sh
then installs such a wheel and runs it."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# package name -> folder, as pyproject.toml declares them
PACKAGE_DIR = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
    "package-dir"]
BUILD_FILES = [name for name in ("pyproject.toml", "setup.py", "README.md")
               if (ROOT / name).exists()]


def _shipped_files(suffix_is_py: bool) -> set[str]:
    """The files of the four folders as the wheel names them (moecert/<...>), .py files or
    the others; caches and dotfiles (configs/.gitkeep) left out."""
    out = set()
    for package, folder in PACKAGE_DIR.items():
        base = ROOT / folder
        for path in base.rglob("*"):
            rel = path.relative_to(base)
            if (not path.is_file() or "__pycache__" in rel.parts
                    or any(p.startswith(".") for p in rel.parts)):
                continue
            if (path.suffix == ".py") == suffix_is_py:
                out.add("/".join([*package.split("."), *rel.parts]))
    return out


@pytest.fixture(scope="module")
def wheel_files(tmp_path_factory) -> set[str]:
    work = tmp_path_factory.mktemp("wheel")
    src = work / "src"
    src.mkdir()
    for name in BUILD_FILES:
        shutil.copy(ROOT / name, src / name)
    for folder in PACKAGE_DIR.values():
        shutil.copytree(ROOT / folder, src / folder,
                        ignore=shutil.ignore_patterns("__pycache__"))
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w",
                           str(work / "dist"), str(src)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (wheel,) = (work / "dist").glob("moecert-*.whl")
    with zipfile.ZipFile(wheel) as z:
        return set(z.namelist())


def test_every_package_of_the_four_folders_is_in_the_wheel(wheel_files):
    packages = {name for name in _shipped_files(True) if name.endswith("/__init__.py")}
    assert "moecert/conformance/harness/checks/__init__.py" in packages  # the one left out
    missing = sorted(packages - wheel_files)
    assert not missing, f"packages missing from the wheel: {missing}"


def test_every_module_and_data_file_is_in_the_wheel(wheel_files):
    """Every module, and every other file the code reads beside it (tolerances.toml, the
    expected-failure lists, the Triton tile configs)."""
    files = _shipped_files(True) | _shipped_files(False)
    assert "moecert/conformance/harness/tolerances.toml" in files
    missing = sorted(files - wheel_files)
    assert not missing, f"files missing from the wheel: {missing[:20]}"
