"""What the user typed, checked before anything runs: each function returns the value to use or
raises `UsageError` with one line naming the option, what was given and what is known. The
known names come from the registries (backends, schemes, checks, suites), never a copy."""

from __future__ import annotations


class UsageError(ValueError):
    """A mistake in the options: reported as one line, never as one error per case."""


def check_backends(names, device: str) -> list[str]:
    """The backends to run: `names` if all are registered, else every backend available on
    `device` when none is named."""
    from moecert.kernels import backend_names

    if not names:
        from .run_command import available_backends
        return available_backends(device)
    known = backend_names()
    _known_or_raise("backend", names, known)
    return list(names)


def check_schemes(names) -> list[str] | None:
    """The schemes to run, or None for all of them."""
    from moecert.reference import SCHEME_NAMES

    _known_or_raise("scheme", names, SCHEME_NAMES)
    return list(names) or None


def check_checks(names) -> list[str] | None:
    """The checks to run, or None for each case's own list."""
    from .checks import CHECKS

    _known_or_raise("check", names, tuple(CHECKS))
    return list(names) or None


def check_suite(name: str) -> str:
    from .suites import SUITES

    _known_or_raise("suite", [name], SUITES)
    return name


def parse_shard(text: str | None) -> tuple[int, int] | None:
    """"I/N" (0-based shard I of N) as (I, N); None for no sharding."""
    if text is None:
        return None
    index, sep, count = text.partition("/")
    try:
        i, n = int(index), int(count)
    except ValueError:
        i = n = -1
    if not sep or n < 1 or not 0 <= i < n:
        raise UsageError(f"shard {text!r}: expected I/N with 0 <= I < N, e.g. 0/4")
    return i, n


def check_timeout(seconds: float) -> float:
    if not seconds > 0:  # also NaN
        raise UsageError(f"timeout {seconds}: expected a positive number of seconds")
    return seconds


def _known_or_raise(what: str, names, known) -> None:
    unknown = [n for n in names if n not in known]
    if unknown:
        raise UsageError(f"unknown {what}{'s' if len(unknown) > 1 else ''} "
                         f"{', '.join(map(repr, unknown))}; known: {', '.join(known)}")
