"""Mutants of the reference (mutants.toml) applied to a copy of the package, and a pytest run
on that copy.

The copy is a folder `site/moecert/` holding `reference/` copied with the one edit made, and
links to the real `kernels/`, `conformance/` and `reports/`; with `site` first on PYTHONPATH
the subprocess imports `moecert.reference` from the copy (`moecert` is a namespace package,
and the path finder answers before the editable install's finder). The working tree is never
edited.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "reference"
RECORDS = Path(__file__).with_name("mutants.toml")
LINKED = ("kernels", "conformance", "reports")
FIELDS = ("name", "file", "original", "replacement", "breaks", "caught_by")


@dataclass(frozen=True)
class Mutant:
    name: str
    file: str  # relative to reference/
    original: str
    replacement: str
    breaks: str
    caught_by: tuple[str, ...]

    @property
    def path(self) -> Path:
        return REFERENCE / self.file


def load_mutants(path: Path = RECORDS) -> list[Mutant]:
    records = tomllib.loads(path.read_text())["mutant"]
    out = []
    for i, r in enumerate(records):
        if sorted(r) != sorted(FIELDS):
            raise ValueError(f"{path.name}: mutant #{i + 1} ({r.get('name', '?')}): expected "
                             f"the fields {', '.join(FIELDS)}, found {', '.join(sorted(r))}")
        out.append(Mutant(**{**r, "caught_by": tuple(r["caught_by"])}))
    return out


def make_site(dest: Path, mutant: Mutant | None = None) -> Path:
    """`dest/site` holding moecert with reference/ copied (and `mutant` applied)."""
    pkg = dest / "site" / "moecert"
    pkg.mkdir(parents=True)
    shutil.copytree(REFERENCE, pkg / "reference",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in LINKED:
        (pkg / name).symlink_to(ROOT / name, target_is_directory=True)
    if mutant is not None:
        target = pkg / "reference" / mutant.file
        text = target.read_text()
        if text.count(mutant.original) != 1:
            raise ValueError(f"mutant {mutant.name}: its original text occurs "
                             f"{text.count(mutant.original)} times in reference/{mutant.file}, "
                             "not once")
        target.write_text(text.replace(mutant.original, mutant.replacement))
    return dest / "site"


def subprocess_env(site: Path) -> dict[str, str]:
    """The environment of a run on the copy: the copy first on the path, the session plugin
    importable, one thread (two such runs share CI's two cores), no xdist worker's variables."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_XDIST", "PYTEST_CURRENT_TEST"))}
    env["PYTHONPATH"] = os.pathsep.join(
        [str(site), str(Path(__file__).parent), *filter(None, [env.get("PYTHONPATH")])])
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def run_tests(site: Path, node_ids: list[str], timeout: float = 300
              ) -> subprocess.CompletedProcess:
    """pytest on `node_ids` with the copy imported; tests/conftest.py (the kernels' Triton
    interpreter and the harness, which reference tests do not need) is replaced by the
    `mutant_session` plugin. Every test runs (no -x): each node id's verdict is read."""
    cmd = [sys.executable, "-m", "pytest", *node_ids, "-q", "-rf", "--noconftest",
           "-p", "mutant_session", "-p", "no:cacheprovider", "-p", "no:moecert",
           "-W", "ignore::pytest.PytestAssertRewriteWarning"]
    return subprocess.run(cmd, cwd=ROOT, env=subprocess_env(site), capture_output=True,
                          text=True, timeout=timeout)


def failed_node_ids(output: str) -> list[str]:
    """The node ids pytest's short summary (-rf) lists as FAILED."""
    return [line.split(" ", 1)[1].split(" - ", 1)[0]
            for line in output.splitlines() if line.startswith("FAILED ")]


def uncaught(mutant: Mutant, failed: list[str]) -> list[str]:
    """The entries of `caught_by` with no failing test among `failed`."""
    return [entry for entry in mutant.caught_by
            if not any(f == entry or f.startswith(entry + "::") or f.startswith(entry + "[")
                       for f in failed)]
