"""The package list, derived: pyproject.toml maps each top-level folder onto its `moecert.*`
package (`[tool.setuptools] package-dir`, the one place that says so), and every folder below
one of them that holds an `__init__.py` is a subpackage. setuptools' own discovery
(`packages.find`) cannot put a prefix on what it finds, hence this file; a list written by
hand left `moecert.conformance.harness.checks` out of the wheel (issue 40)."""

import tomllib
from pathlib import Path

from setuptools import find_packages, setup

ROOT = Path(__file__).resolve().parent


def packages() -> list[str]:
    """Every package of the four folders, named as it is imported."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    mapping = config["tool"]["setuptools"]["package-dir"]
    return [f"{name}.{sub}" if sub else name
            for name, folder in mapping.items()
            for sub in ["", *find_packages(str(ROOT / folder))]]


setup(packages=packages())
