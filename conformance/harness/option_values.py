"""What a user types, checked: one-line errors for names and values of the harness's options.

Every function raises `UsageError` with the message the user reads (a front end prints it on
one line and exits 2). The single-value ones are argparse `type=` functions (argparse prints
their message as "argument --scheme: unknown scheme 'nope'; ..."); the pytest plugin calls the
same functions and turns `UsageError` into `pytest.UsageError`. The known names come from
where they are declared: checks from conformance.checks, schemes from the reference, suites
from conformance.suites, backends from the registry (after any `--import`).

The other jobs of the options live beside it: the `-k` grammar (case_filter.py), a model
folder's selection, which reads the folder and prints (model_selection.py), and `--import`
(imports.py).
"""

from __future__ import annotations

import argparse
import difflib
import json
import math
import os
import re
import tempfile
from collections.abc import Iterable
from pathlib import Path


class UsageError(argparse.ArgumentTypeError, ValueError):
    """Something the user typed is wrong; the message says what, on one line."""


def _unknown(kind: str, name: str, known: Iterable[str]) -> UsageError:
    known = list(known)
    close = difflib.get_close_matches(name, known, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return UsageError(f"unknown {kind} {name!r}{hint}; known: {', '.join(known)}")


def _known(kind: str, name: str, known) -> str:
    """`name` if it is one of `known`, else the UsageError naming the closest."""
    if name not in known:
        raise _unknown(kind, name, known)
    return name


def check_name(name: str) -> str:
    from .checks import CHECKS

    return _known("check", name, CHECKS)


def scheme_name(name: str) -> str:
    from moecert.reference import SCHEME_NAMES

    return _known("scheme", name, SCHEME_NAMES)


def suite_name(name: str) -> str:
    from .suites import SUITES

    return _known("suite", name, SUITES)


def model_name(name: str) -> str:
    from moecert.reference.models import MODELS

    return _known("model", name, MODELS)


def layer_spec(text: str) -> tuple[str, tuple[int, int, int, int]]:
    """"NAME=E,K,N,TOPK": a layer shape of its own name (`moecert bench --layer`)."""
    from moecert.reference.models import MODELS, ModelShape

    match = re.fullmatch(r"\s*([A-Za-z0-9][A-Za-z0-9_.-]*)\s*=\s*(\d+)\s*,\s*(\d+)\s*,"
                         r"\s*(\d+)\s*,\s*(\d+)\s*", text)
    if not match:
        raise UsageError(f"layer {text!r}: expected NAME=E,K,N,TOPK, e.g. tiny=8,256,128,2")
    name, (E, K, N, topk) = match[1], map(int, match.groups()[1:])
    if name in MODELS:
        raise UsageError(f"layer {text!r}: {name} is a model already (use --model {name})")
    if min(E, K, N, topk) < 1 or topk > E:
        raise UsageError(f"layer {text!r}: E, K, N, TOPK must be at least 1, TOPK at most E")
    return name, ModelShape(E, K, N, topk)


def m_list(text: str) -> tuple[int, ...]:
    """"1,16,64": token counts, each at least 1, no repeats."""
    parts = [p.strip() for p in text.split(",")]
    if not all(p.isdigit() and int(p) >= 1 for p in parts):
        raise UsageError(f"M list {text!r}: expected whole numbers of at least 1 separated "
                         "by commas, e.g. 1,16,64")
    values = tuple(int(p) for p in parts)
    if len(set(values)) != len(values):
        raise UsageError(f"M list {text!r}: a value twice")
    return values


VARIANT_EXAMPLE = "weight_strategy=channel,activation=dynamic-token"


def variant_spec(text: str) -> dict:
    """"KEY=VALUE[,KEY=VALUE...]": checkpoint attributes of a scheme variant (`moecert bench
    --variant`), keys and value types the `Variant`'s fields (None, the scheme's default, is
    what leaving a key out gives); whether a scheme has the variant: `check_variant`."""
    from dataclasses import fields

    from moecert.reference.schemes import Variant

    types = {f.name: f.type.removesuffix(" | None") for f in fields(Variant)
             if f.name != "scheme"}
    attrs: dict = {}
    for item in text.split(","):
        key, eq, value = (part.strip() for part in item.partition("="))
        if not (key and eq and value):
            raise UsageError(f"variant {text!r}: expected KEY=VALUE[,KEY=VALUE...], e.g. "
                             f"{VARIANT_EXAMPLE}")
        if key not in types:
            raise _unknown("variant key", key, types)
        if key in attrs:
            raise UsageError(f"variant {text!r}: {key} twice")
        attrs[key] = _typed_value(text, key, value, types[key])
    return attrs


def _typed_value(text: str, key: str, value: str, annotation: str):
    if annotation == "int":
        try:
            return int(value)
        except ValueError:
            raise UsageError(f"variant {text!r}: {key} takes a whole number, not "
                             f"{value!r}") from None
    if annotation == "bool":
        if value.lower() not in ("true", "false"):
            raise UsageError(f"variant {text!r}: {key} takes true or false, not {value!r}")
        return value.lower() == "true"
    return value


def check_variant(scheme: str, attrs: dict, flag: str = "--variant") -> None:
    """UsageError unless `scheme` has the variant `attrs`: the variant's own attribute checks
    (which values each scheme takes), as a checkpoint names them."""
    from moecert.reference import CheckpointError, checked_variant

    try:
        variant = checked_variant(scheme, **attrs)
        if "group_size" in attrs and not variant.info.group_sizes and variant.group_size != -1:
            # a variant keeps a group size where the scheme has none, and nothing reads it
            raise CheckpointError("checkpoint.group_size", f"-1 for {scheme} (no groups)",
                                  str(variant.group_size))
    except CheckpointError as e:
        text = ",".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}"
                        for k, v in attrs.items())
        raise UsageError(f"{flag} {text}: not a variant of {scheme}: {e}") from None


def check_backends(names: Iterable[str], option: str = "--import") -> list[str]:
    """`names` if every one is registered (call after importing the modules that register);
    a planted-bug backend not registered says which module registers it (`option` MODULE)."""
    from moecert.kernels import backend_names

    from .imports import registering_module

    names = list(names)
    for name in names:
        if name not in backend_names():
            module = registering_module(name)
            if module:
                raise UsageError(f"unknown backend {name!r}: a planted-bug backend of "
                                 f"moecert's, registered by {option} {module}")
            raise _unknown("backend", name, backend_names())
    return names


def shard_spec(text: str) -> tuple[int, int]:
    """"I/N" (0-based shard I of N) as (I, N)."""
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if not match:
        raise UsageError(f"shard {text!r}: expected I/N, e.g. 0/4 (shard I of N, 0-based)")
    index, count = int(match[1]), int(match[2])
    if not 0 <= index < count:
        raise UsageError(f"shard {text!r}: I must be in 0..N-1" if count else
                         f"shard {text!r}: N must be at least 1")
    return index, count


def worker_count(text: str) -> int | str:
    """`-n`: a whole number of workers, or "auto" (conformance/harness/worker_plan.py
    `plan_workers`)."""
    return "auto" if text == "auto" else positive_int(text)


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise UsageError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise UsageError(f"expected at least 1, got {value}")
    return value


def positive_float(text: str, what: str = "number") -> float:
    """A finite number above 0 (`what` names it in the message: "number of seconds")."""
    try:
        value = float(text)
    except ValueError:
        raise UsageError(f"expected a {what}, got {text!r}") from None
    if not (value > 0 and math.isfinite(value)):
        raise UsageError(f"expected a positive {what}, got {text!r}")
    return value


def positive_seconds(text: str) -> float:
    return positive_float(text, "number of seconds")


def device_name(text: str) -> str:
    """A device torch can name and this machine has ("cuda" needs a visible GPU)."""
    import torch

    try:
        device = torch.device(text)
    except (RuntimeError, ValueError):
        raise UsageError(f"{text!r} is not a device (cpu, cuda, cuda:1, ...)") from None
    if device.type == "cpu":
        return text
    module = getattr(torch, device.type, None)  # torch.cuda, torch.xpu, ...
    if module is None or not getattr(module, "is_available", lambda: True)():
        raise UsageError(f"{text}: no {device.type.upper()} device here")
    count = getattr(module, "device_count", lambda: None)()
    if device.index is not None and count is not None and device.index >= count:
        raise UsageError(f"{text}: only {count} {device.type} device(s) here")
    return text


def device_or_default(name: str | None) -> str:
    """The named device (`device_name`), or every front end's default: cuda where torch sees
    a GPU, else cpu."""
    import torch

    if name:
        return device_name(name)
    return "cuda" if torch.cuda.is_available() else "cpu"


def case_json(text: str):
    """A case as `moecert run` prints it for a failure (its backend is checked later, after
    --import has registered any run-time backends)."""
    from moecert.reference.schemes import VariantError

    from .cases import Case

    try:
        case = Case.from_json(text)
    except VariantError as e:  # the JSON read, its scheme or attributes no variant
        scheme_name(json.loads(text)["scheme"])  # a scheme name, with the closest names
        raise UsageError(f"not a case: attrs.{e}; pass the JSON a failure's rerun line "
                         "prints") from None
    except Exception as e:  # bad JSON, missing keys, a problem the reference rejects
        detail = f"missing key {e}" if isinstance(e, KeyError) else f"{type(e).__name__}: {e}"
        raise UsageError(f"not a case ({detail}); pass the JSON a failure's rerun line "
                         "prints") from None
    scheme_name(case.scheme)
    if case.model is not None:
        model_name(case.model)
    _check_case_variant(case)
    return case


def _check_case_variant(case) -> None:
    """UsageError when a synthesized checkpoint of the case's variant cannot hold its problem
    (a group size that does not divide K; a value the scheme does not take is refused as the
    case is read, `case_json`): the suites never make such a case, so a --case that has one
    was edited, and would only be an error row."""
    from moecert.reference.schemes import checkpoint_shape_issue

    issue = None if case.source is not None else checkpoint_shape_issue(case.variant,
                                                                        case.problem)
    if issue is not None:
        raise UsageError(f"not a case: {issue}; pass the JSON a failure's rerun line "
                         "prints")


RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
# A run id names the run's files, `<run id>.<suite>[.shard<I>of<N>].<suffix>`, and file names
# stop at 255 bytes on the usual file systems: 100 leaves the rest room (a timestamp id: 22).
RUN_ID_MAX_CHARS = 100


def run_id(text: str) -> str:
    """A run id (it names files: `<run id>.<suite>[.shard]`): letters, digits, - and _, at
    most RUN_ID_MAX_CHARS of them."""
    if not RUN_ID.fullmatch(text) or text == "all":
        raise UsageError(f"run id {text[:40]!r}: use letters, digits, '-' and '_' (and not "
                         "'all')")
    if len(text) > RUN_ID_MAX_CHARS:
        raise UsageError(f"run id {text[:20]}... of {len(text)} characters: at most "
                         f"{RUN_ID_MAX_CHARS} (it names the run's files)")
    return text


def xfail_list(path: str | None, flag: str = "--xfail"):
    """The expected-failure list at `path` (None: an empty list), parsed now, so a missing or
    malformed file is one usage error before any case runs. A bare name NAME that is no file
    is the list shipped in the package as conformance/harness/xfail-NAME.toml (`--xfail vllm`:
    vLLM's defects, for a pip-installed moecert)."""
    from .xfail import DEFAULT_PATH, XfailList

    if path and not Path(path).exists():
        # a path with a folder part (./x.toml) is never a shipped list's name
        named = Path(path).name == path and path not in (".", "..")
        shipped = DEFAULT_PATH.with_name(f"xfail-{path}.toml") if named else None
        if shipped is None or not shipped.is_file():
            known = sorted(p.stem.removeprefix("xfail-")
                           for p in DEFAULT_PATH.parent.glob("xfail-*.toml"))
            raise UsageError(f"{flag} {path}: no such file (nor a shipped list: "
                             f"{', '.join(known)})")
        path = str(shipped)
    if path and Path(path).is_dir():
        raise UsageError(f"{flag} {path}: is a folder, not a TOML file")
    try:
        return XfailList.load(path)
    except ValueError as e:  # a TOML syntax error or an entry without its keys
        raise UsageError(f"{flag} {path}: {e}") from None
    except OSError as e:  # unreadable
        raise UsageError(f"{flag} {path}: {e.strerror or e}") from None


def writable_folder(path: str | os.PathLike) -> Path:
    """`path` as a folder this process can write into (created if missing)."""
    folder = Path(path)
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"results folder {str(folder)!r} is a file, not a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as e:
        raise UsageError(f"results folder {str(folder)!r} is not writable: "
                         f"{e.strerror or e}") from None
    return folder


def output_file(text: str) -> str:
    """A file to write at the end (`--junit`, `--md`, `--html`, `--out`): checked before
    anything runs, so that a run of an hour does not end in a traceback: not a folder, in a
    folder that exists and this process can write into."""
    path = Path(text)
    if path.is_dir():
        raise UsageError(f"{text}: is a folder; give a file name")
    folder = path.parent
    if not folder.is_dir():
        raise UsageError(f"{text}: no such folder {str(folder)!r}")
    if not os.access(folder, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise UsageError(f"{text}: not writable")
    return text


def one_line(e: Exception) -> str:
    text = str(e).strip() or type(e).__name__
    return " ".join(text.split())


__all__ = [
    "UsageError",
    "case_json",
    "check_backends",
    "check_name",
    "check_variant",
    "device_name",
    "device_or_default",
    "layer_spec",
    "m_list",
    "model_name",
    "one_line",
    "positive_float",
    "positive_int",
    "positive_seconds",
    "run_id",
    "scheme_name",
    "shard_spec",
    "suite_name",
    "variant_spec",
    "writable_folder",
    "xfail_list",
]
