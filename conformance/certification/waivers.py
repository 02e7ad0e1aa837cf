"""Waivers for `moecert certify`: failures a submitter declares, each with its reason, listed in
the bundle. A waived case still failed; the certificate lists it, and the bundle certifies.

    [[waiver]]
    case_id = "xpu/gptq-int4/M0.K128.N128.E4.k2/bf16.silu/s0"   # an id, or an fnmatch pattern
    check = "accuracy"                                          # "*" if absent
    reason = "M = 0 not dispatched by the vendor kernel: tracked in vendor-x#12"

A case is waived when every failing row of it (crash, timeout, error, fail, xfail) matches an
entry; a case with one failing row no entry matches is a failure.
"""

from __future__ import annotations

import fnmatch
import tomllib
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Waiver:
    case_id: str
    check: str
    reason: str

    def matches(self, row: dict) -> bool:
        return (fnmatch.fnmatchcase(str(row["case_id"]), self.case_id)
                and self.check in ("*", str(row["check"])))


def parse_waivers(text: str, where: str) -> list[Waiver]:
    """The entries of a waiver file's text; a ValueError names `where` and the bad entry."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{where}: not TOML: {e}") from None
    unknown = sorted(set(data) - {"waiver"})
    if unknown:
        raise ValueError(f"{where}: unknown tables {unknown}; expected [[waiver]] entries")
    entries = []
    for i, raw in enumerate(data.get("waiver", [])):
        missing = [k for k in ("case_id", "reason") if not str(raw.get(k, "")).strip()]
        extra = sorted(set(raw) - {"case_id", "check", "reason"})
        if missing or extra:
            what = (f"needs {', '.join(missing)}" if missing else
                    f"has unknown keys {extra} (case_id, check, reason)")
            raise ValueError(f"{where}: waiver entry {i} {what}")
        entries.append(Waiver(str(raw["case_id"]), str(raw.get("check", "*")),
                              str(raw["reason"])))
    return entries


def load_waivers(path: str | Path) -> list[Waiver]:
    path = Path(path)
    return parse_waivers(path.read_text(encoding="utf-8"), str(path))


def waiver_for(row: dict, waivers: list[Waiver]) -> Waiver | None:
    return next((w for w in waivers if w.matches(row)), None)
