"""A few torch cases of the smoke suite (one full, eight light, two schemes) as a stand-in for
every suite. Importing this module changes nothing; `small_certify_suite` installs it."""

from __future__ import annotations

from moecert.conformance.harness import suites

_build = suites.build_suite  # the real one, taken before anything patches it


def small_suite() -> list:
    out = []
    for scheme in ("fp16", "bf16"):
        cases = _build("smoke", ["torch"], [scheme])
        light = [c for c in cases if c.depth == "light"]
        out += ([cases[0]] if scheme == "fp16" else []) + light[:4]
    return out


def build(name, backends=None, schemes=None):
    return [c for c in small_suite() if backends is None or c.backend in backends]
