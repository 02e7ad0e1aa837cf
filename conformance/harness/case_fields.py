"""The fields an expected failure (harness/expectations.py) selects rows by, read off the row's
case (its `case_json`) rather than its id: the backend, the scheme, the variant's resolved
attributes (`variant.<field>`, reference/schemes/variant.py), the problem's (`problem.<field>`,
reference/problem.py `MoEProblem`), and the case's routing, seed, strides, suite model and
model folder. An entry names the fields it covers; a case that differs in any named field is
not covered, whatever its id looks like.

    scheme = ["gptq-int4", "awq-int4"]           # a value, or a list of values (any of them)
    variant = { checkpoint_format = "gptq_v2" }  # the variant's resolved attributes
    problem = { apply_router_weight_on_input = true, M = { min = 1 } }  # bounds: min / max
    folder = true                                # a model folder's layer (false: synthesized;
                                                 # a name or list of names: those folders)
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, fields

from moecert.reference.problem import MoEProblem
from moecert.reference.schemes import SCHEMES, VARIANT_FIELDS

PROBLEM_FIELDS = tuple(f.name for f in fields(MoEProblem))
CASE_FIELDS = ("backend", "scheme", "routing", "seed", "strided", "model", "folder")
TABLES = {"variant": VARIANT_FIELDS, "problem": PROBLEM_FIELDS}  # nested field tables


@dataclass(frozen=True)
class Bounds:
    lo: float = float("-inf")
    hi: float = float("inf")

    def __str__(self) -> str:
        return f"[{self.lo:g}, {self.hi:g}]"


def case_fields(row: dict) -> dict | None:
    """The row's case as {field: value} ("variant.sym", "problem.M", ...); None for a row
    without its case (an expectation naming fields does not match it)."""
    text = row.get("case_json")
    return {**_fields(text), "backend": str(row["backend"])} if text else None


@functools.lru_cache(maxsize=8192)
def _fields(case_json: str) -> dict:
    from .cases import Case

    case = Case.from_json(case_json)
    v = case.variant
    out = {"scheme": case.scheme, "routing": case.routing, "seed": case.seed,
           "strided": case.strided, "model": case.model or "",
           "folder": case.source.model if case.source is not None else ""}
    out.update({f"variant.{f}": getattr(v, f) for f in VARIANT_FIELDS})
    out.update({f"problem.{f}": getattr(case.problem, f) for f in PROBLEM_FIELDS})
    return out


def field_matches(name: str, wanted, value) -> bool:
    if isinstance(wanted, Bounds):
        return isinstance(value, int | float) and wanted.lo <= value <= wanted.hi
    if name == "folder" and isinstance(wanted, bool):
        return bool(value) == wanted
    return value in wanted


def parse_fields(raw: dict, entry: str) -> tuple[tuple[str, object], ...]:
    """The field selectors of an entry's TOML table, checked: (name, wanted) with wanted a
    tuple of values, `Bounds`, or (folder only) a bool. A ValueError names the entry and the
    field."""
    out = []
    for key in CASE_FIELDS:
        if key in raw and not (key == "backend" and isinstance(raw[key], str)):
            out.append((key, _wanted(key, raw[key], entry)))
    for table, known in TABLES.items():
        given = raw.get(table, {})
        if not isinstance(given, dict):
            raise ValueError(f"{entry}: {table} must be a table of fields, e.g. {table} = "
                             f"{{ {known[0]} = ... }}")
        for key, value in given.items():
            if key not in known:
                raise ValueError(f"{entry}: unknown {table} field {key!r}; fields: "
                                 f"{', '.join(known)}")
            out.append((f"{table}.{key}", _wanted(f"{table}.{key}", value, entry)))
    for name, wanted in out:
        if name == "scheme":
            unknown = [s for s in wanted if s not in SCHEMES]
            if unknown:
                raise ValueError(f"{entry}: unknown scheme {unknown[0]!r}; schemes: "
                                 f"{', '.join(SCHEMES)}")
    return tuple(out)


def _wanted(name: str, value, entry: str):
    if name == "folder" and isinstance(value, bool):
        return value
    if isinstance(value, dict):
        if not value or set(value) - {"min", "max"} or not all(
                isinstance(b, int | float) and not isinstance(b, bool) for b in value.values()):
            raise ValueError(f"{entry}: {name} bounds must be {{ min = ..., max = ... }} "
                             f"(numbers)")
        return Bounds(value.get("min", float("-inf")), value.get("max", float("inf")))
    values = tuple(value) if isinstance(value, list) else (value,)
    if not values:
        raise ValueError(f"{entry}: {name} is an empty list")
    return values


def describe(selectors) -> str:
    """`scheme gptq-int4|awq-int4, variant.sym False` for messages."""
    parts = []
    for name, wanted in selectors:
        text = (str(wanted) if isinstance(wanted, Bounds | bool)
                else "|".join(map(str, wanted)))
        parts.append(f"{name} {text}")
    return ", ".join(parts)
