"""The selection oracle: for a scheme, a problem and a platform (real or simulated), the first
backend in the platform's priority list that claims support, and why each other candidate was
passed over (the pattern of vLLM's MoE oracles: an ordered list, first supported wins).

Backends registered beyond the built-ins (entry points, `register_backend`) are candidates
after the built-ins on every platform, in registration order; their own claims decide.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field

from moecert.reference.schemes import checkpoint_shape_issue, scheme_variants

from .errors import BackendError, NoBackendError
from .platform import Platform
from .protocol import Backend
from .quant_config import Variant
from .registry import BUILTINS, backend_names, get_backend

# Built-in priority per platform kind. Triton first where it runs (fused kernels); the XPU
# vendor path first on XPU for what it claims; torch is the fallback everywhere.
PRIORITY: dict[str, tuple[str, ...]] = {
    "cuda": ("triton", "torch"),
    "rocm": ("triton", "torch"),
    "xpu": ("xpu", "torch"),
    "cpu": ("torch",),
}


def priority(platform: Platform, variant: Variant) -> tuple[str, ...]:
    """Candidate backend names for `variant` on `platform`, best first."""
    builtin = PRIORITY[platform.kind]
    extra = tuple(n for n in backend_names() if n not in BUILTINS)
    return builtin + extra


@dataclass(frozen=True)
class Selection:
    backend: Backend
    platform: Platform
    quant: Variant
    reasons: dict[str, str] = field(default_factory=dict)  # passed-over name -> why

    @property
    def name(self) -> str:
        return self.backend.name


def backend_reason(backend: Backend, variant: Variant, problem, platform: Platform
                   ) -> str | None:
    """Why `backend` cannot run `variant` x `problem` on `platform`, or None."""
    if not platform.simulated:
        why = backend.available()
        if why:
            return f"unavailable: {why}"
    return supports_reason(backend, variant, problem, platform)


def supports_reason(backend: Backend, variant: Variant, problem, platform: Platform | None
                    ) -> str | None:
    """`backend.supports(variant, problem)`, with `platform=` where its signature has that
    keyword (Backend.supports); a BackendError it raises is its reason."""
    try:
        if platform is not None and "platform" in inspect.signature(
                backend.supports).parameters:
            return backend.supports(variant, problem, platform=platform)
        return backend.supports(variant, problem)
    except BackendError as e:
        return str(e)


def select_backend(scheme, problem, platform: Platform | None = None) -> Selection:
    """The backend the oracle picks; NoBackendError listing every candidate's reason if none.
    A problem no checkpoint of the scheme can hold is refused before any backend is asked."""
    platform = platform or Platform.current()
    quant = Variant.of(scheme)
    issue = checkpoint_shape_issue(quant, problem)
    if issue:
        raise NoBackendError(quant.describe(), platform, {}, no_checkpoint=str(issue))
    reasons: dict[str, str] = {}
    for name in priority(platform, quant):
        try:
            backend = get_backend(name)
        except KeyError as e:
            reasons[name] = f"not loaded: {e.args[0]}"
            continue
        why = backend_reason(backend, quant, problem, platform)
        if why is None:
            return Selection(backend, platform, quant, reasons)
        reasons[name] = why
    raise NoBackendError(quant.describe(), platform, reasons)


def selection_rows(platforms, schemes, problems) -> list[dict]:
    """One row per (platform, scheme variant, problem): the selected backend or the error,
    and the reasons of the candidates passed over."""
    rows = []
    for platform in platforms:
        for scheme in schemes:
            for quant in scheme_variants(scheme):
                for label, problem in problems:
                    try:
                        sel = select_backend(quant, problem, platform)
                        chosen, reasons = sel.name, sel.reasons
                    except NoBackendError as e:
                        chosen = None
                        reasons = ({"no checkpoint": e.no_checkpoint} if e.no_checkpoint
                                   else e.reasons)
                    rows.append({"platform": str(platform), "config": quant.describe(),
                                 "problem": label, "backend": chosen, "reasons": reasons})
    return rows
