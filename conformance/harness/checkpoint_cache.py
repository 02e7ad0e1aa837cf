"""Synthesized checkpoints kept on disk across runs, content-addressed.

Synthesis (reference.synthesize: float weights drawn and quantized with the tools' rules, on
the CPU) is the same bits every time for the same problem, seed, scheme options, synthesis
code and torch (its random streams). A run keeps each checkpoint it synthesizes in the cache
folder under the sha256 of all of those, and a later run (or another worker of this one)
reads it back instead of synthesizing it again:

    <cache>/<sha256[:2]>/<sha256>.pt     torch.save of {"tensors": {...}, "fields": {...}}

<cache> is $MOECERT_CACHE_DIR, else $XDG_CACHE_HOME/moecert/checkpoints, else
~/.cache/moecert/checkpoints. `moecert run --no-cache` (and `certify --no-cache`) neither
reads nor writes it; removing the folder empties it. The key hashes the source of every module
of moecert.reference, so a change to synthesis (or anything it calls) misses the old entries
instead of reading them; a file that cannot be read is synthesized afresh and rewritten.
Written to a temporary name and renamed, so concurrent workers never read half a file.
Read with `torch.load(weights_only=True)`: tensors and plain values only, no code.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import os
from dataclasses import replace
from pathlib import Path

import torch
from moecert.reference import Checkpoint

from .cases import Case

CACHE_VARIABLE = "MOECERT_CACHE_DIR"
FORMAT = "moecert-checkpoint-cache/1"
_enabled = False


def configure(enabled: bool) -> None:
    """Turn the cache on (the CLI's runs, unless --no-cache) or off (the default for library
    callers and tests)."""
    global _enabled
    _enabled = enabled


def enabled() -> bool:
    return _enabled


@contextlib.contextmanager
def turned(on: bool):
    """The cache on or off inside the block, as it was after (an in-process run)."""
    before = _enabled
    configure(on)
    try:
        yield
    finally:
        configure(before)


def folder() -> Path:
    named = named_folder()
    if named is not None:
        return named
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "moecert" / "checkpoints"


def named_folder(environ=os.environ) -> Path | None:
    """The folder $MOECERT_CACHE_DIR names, None when it is unset or empty. ValueError naming
    the variable when it names a file or a place this process cannot write: a cache that
    cannot be written is otherwise silently no cache (the case never pays for it), so a
    mistyped variable is caught before anything runs (harness/environment.py). Nothing is
    created here: the first checkpoint written makes the folder."""
    named = environ.get(CACHE_VARIABLE, "")
    if not named.strip():
        return None
    path = Path(named).absolute()
    where = f"{CACHE_VARIABLE}={named!r}"
    # the folder, or the nearest part of its path that exists (a folder to create it in)
    existing = next(p for p in (path, *path.parents) if p.exists())
    part = "" if existing == path else f" {existing}"  # the part of its path at fault
    if not existing.is_dir():
        raise ValueError(f"{where}:{part} is a file; expected a folder for the cache of "
                         "synthesized checkpoints")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"{where}:{part} is not writable; expected a folder this process "
                         "can write the cache of synthesized checkpoints into")
    return path


@functools.cache
def synthesis_source_sha256() -> str:
    """sha256 over the source of every module of moecert.reference (path and text)."""
    import moecert.reference as reference

    root = Path(reference.__file__).parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def key(case: Case) -> str:
    """The content address of `case`'s synthesized checkpoint (any backend, any depth)."""
    text = "\n".join([FORMAT, torch.__version__, synthesis_source_sha256(),
                      replace(case, backend="", depth="full").to_json()])
    return hashlib.sha256(text.encode()).hexdigest()


def synthesized(case: Case, make) -> Checkpoint:
    """`make()` (the case's checkpoint, synthesized), through the cache when it is on."""
    if not _enabled or case.source is not None:
        return make()
    name = key(case)
    path = folder() / name[:2] / f"{name}.pt"
    try:
        stored = torch.load(path, weights_only=True)
        return Checkpoint(tensors=stored["tensors"], **stored["fields"])
    except FileNotFoundError:
        pass
    except Exception:  # damaged or from another layout: made afresh and rewritten below
        pass
    ckpt = make()
    # plain values only (weights_only reads no classes): the variant's attributes by name
    fields = {**dataclasses.asdict(ckpt.variant), "first_expert": ckpt.first_expert,
              "origin": ckpt.origin}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.partial")
        torch.save({"tensors": ckpt.tensors, "fields": fields}, partial)
        os.replace(partial, path)
    except OSError:  # a read-only or full disk costs the cache, never the case
        pass
    return ckpt


__all__ = ["CACHE_VARIABLE", "configure", "enabled", "folder", "key", "named_folder", "synthesized",
           "turned"]
