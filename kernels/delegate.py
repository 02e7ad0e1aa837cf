"""`claim_subset`: a backend of one's own name that runs an existing backend's code for part of
what that backend claims, e.g. a vendor certifying only the schemes its product ships:

    from moecert.kernels import claim_subset, register_backend

    register_backend(claim_subset("torch", "vendor-x", schemes=("gptq-int4", "awq-int4")))

`DelegatingBackend` is the class behind it; override `narrow` for rules beyond scheme names.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
from moecert.reference.schemes import SCHEME_NAMES

from .errors import UnsupportedError
from .oracle import supports_reason
from .platform import Platform, platform_of_device
from .protocol import Backend, Checkpoint, Problem
from .quant_config import Variant
from .registry import get_backend

# Members a Backend may have (protocol.py): forwarded to the delegate when it has them.
_OPTIONAL = ("canonical_weights", "describe", "numerics", "version")

Where = Callable[[Variant, Problem, Platform], str | None]


class DelegatingBackend:
    """A backend called `name` that runs `delegate` (a Backend or a registered backend's name,
    looked up on first use) and claims what the delegate claims, less what `narrow` refuses.

    The delegate's layers are this backend's layers: load, process and apply go to it
    unchanged, and so do `canonical_weights`, `describe` and `version` where the delegate
    has them.
    """

    def __init__(self, delegate: Backend | str, name: str, *,
                 schemes: Iterable[str] | None = None, where: Where | None = None):
        if not isinstance(name, str) or not name:
            raise ValueError("name: expected a non-empty backend name, found "
                             f"{name!r}")
        self.name = name
        self._delegate = delegate
        self.schemes = None if schemes is None else _scheme_set(schemes)
        self.where = where

    @property
    def delegate(self) -> Backend:
        if isinstance(self._delegate, str):
            self._delegate = get_backend(self._delegate)
        return self._delegate

    def narrow(self, variant: Variant, problem: Problem, platform: Platform) -> str | None:
        """None to keep the delegate's claim on (variant, problem, platform), else why this
        backend refuses it. The default applies `schemes` and `where`."""
        if self.schemes is not None and variant.scheme not in self.schemes:
            return (f"{variant.scheme} not claimed by {self.name} (it claims "
                    f"{', '.join(sorted(self.schemes))})")
        return self.where(variant, problem, platform) if self.where else None

    # --- the protocol ------------------------------------------------------------------------
    def available(self) -> str | None:
        return self.delegate.available()

    def supports(self, variant: Variant, problem: Problem, *,
                 platform: Platform | None = None) -> str | None:
        variant = Variant.of(variant)
        platform = platform or Platform.current()
        return (self.narrow(variant, problem, platform)
                or supports_reason(self.delegate, variant, problem, platform))

    def create_layer(self, checkpoint: Checkpoint, problem: Problem) -> torch.nn.Module:
        why = self.narrow(Variant.of(checkpoint), problem, _platform_of(checkpoint))
        if why:  # forced on a case it does not claim: refuse, as the claims check expects
            raise UnsupportedError(self.name, why)
        return self.delegate.create_layer(checkpoint, problem)

    def load_weights(self, layer: torch.nn.Module, checkpoint: Checkpoint) -> None:
        self.delegate.load_weights(layer, checkpoint)

    def process_weights_after_loading(self, layer: torch.nn.Module) -> None:
        self.delegate.process_weights_after_loading(layer)

    def apply(self, layer: torch.nn.Module, hidden_states: torch.Tensor,
              topk_weights: torch.Tensor, topk_ids: torch.Tensor, *,
              out: torch.Tensor | None = None, **opts) -> torch.Tensor:
        return self.delegate.apply(layer, hidden_states, topk_weights, topk_ids, out=out,
                                   **opts)

    def __getattr__(self, attr: str):
        if attr in _OPTIONAL:  # only reached when not set on this object itself
            return getattr(self.delegate, attr)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {attr!r}")

    def __repr__(self) -> str:
        delegate = self._delegate if isinstance(self._delegate, str) else self._delegate.name
        return f"{type(self).__name__}({self.name!r}, delegate={delegate!r})"


def claim_subset(delegate: Backend | str, name: str, *, schemes: Iterable[str] | None = None,
                 where: Where | None = None) -> DelegatingBackend:
    """A backend called `name` that runs `delegate`'s code and claims what it claims of
    `schemes` (scheme names; default all), where `where(quant, problem, platform)` returns
    None (else that reason). Register it with `register_backend` or an entry point."""
    return DelegatingBackend(delegate, name, schemes=schemes, where=where)


def _scheme_set(schemes: Iterable[str]) -> frozenset[str]:
    if isinstance(schemes, str):  # "gptq-int4" would otherwise read as its characters
        schemes = (schemes,)
    names = frozenset(schemes)
    unknown = sorted(names - set(SCHEME_NAMES))
    if unknown or not names:
        raise ValueError(f"schemes: expected scheme names out of {', '.join(SCHEME_NAMES)}, "
                         f"found {', '.join(map(repr, unknown)) or 'none'}")
    return names


def _platform_of(checkpoint) -> Platform:
    tensors = getattr(checkpoint, "tensors", None) or {}
    for t in tensors.values():
        if isinstance(t, torch.Tensor):
            return platform_of_device(t.device)
    return Platform.current()


__all__ = ["DelegatingBackend", "claim_subset"]
