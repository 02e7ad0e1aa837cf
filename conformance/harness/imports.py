"""`--import MODULE`: modules a front end imports before it looks names up (a module may
register backends, `kernels.register_backend`); a missing one is one `UsageError` line, and
one that registers no backend is said in one warning line (most likely the wrong module:
`--import moecert.conformance.mutants`, whose backends `...mutants.all` registers)."""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Callable, Iterable

from .option_values import UsageError


def _on_stderr(text: str) -> None:
    print(f"warning: {text}", file=sys.stderr)


def import_modules(modules: Iterable[str], flag: str = "--import",
                   warn: Callable[[str], None] = _on_stderr,
                   option: str = "--import") -> tuple[str, ...]:
    """Import each module (it may register backends); a missing one is a usage error
    (`flag` starts its message), one that registers no backend is `warn`ed about (`option`:
    the flag as the user typed it). A module imported already (a second call) is not
    judged again: importing it again registers nothing."""
    from moecert.kernels import backend_names

    modules = tuple(modules)
    for module in modules:
        if not re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*", module):
            raise UsageError(f"{flag} {module}: expected a module name (pkg.module, importable "
                             "from sys.path), not a file path")
        fresh = module not in sys.modules
        before = set(backend_names()) if fresh else set()
        try:
            imported = importlib.import_module(module)
        except ImportError as e:
            raise UsageError(f"{flag} {module}: {type(e).__name__}: {e}") from None
        if fresh and set(backend_names()) <= before:
            other = getattr(imported, "REGISTER_MODULE", None)
            hint = f" (its backends: {option} {other})" if other else ""
            warn(f"{option} {module}: imported, but it registered no backend{hint}")
    return modules


def registering_module(backend: str) -> str | None:
    """The module whose import registers `backend` when it is one of moecert's planted-bug
    backends or their twins (conformance/mutants), else None."""
    from ..mutants import LEGIT, MUTANTS, REGISTER_MODULE

    return REGISTER_MODULE if backend in MUTANTS or backend in LEGIT else None


__all__ = ["import_modules", "registering_module"]
