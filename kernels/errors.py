"""Errors raised by backends and the oracle: each names the argument, what was expected and
what was found, so a bad call is diagnosed from the message alone."""

from __future__ import annotations

import os
import traceback


class BackendError(ValueError):
    """Bad input to `create_layer`, `load_weights` or `apply` (checked before any kernel runs)."""

    def __init__(self, what: str, expected: str, found: str):
        self.what, self.expected, self.found = what, expected, found
        super().__init__(f"{what}: expected {expected}, found {found}")


class UnsupportedError(BackendError):
    """A scheme or option the backend does not claim, forced on it anyway."""

    def __init__(self, backend: str, reason: str):
        self.backend, self.reason = backend, reason
        super().__init__(f"backend {backend!r}", "a scheme and problem it claims", reason)


class NoBackendError(RuntimeError):
    """No candidate backend claims the scheme on the platform; `reasons` says why for each.
    `no_checkpoint`: why no checkpoint of the scheme can hold the problem (no candidate was
    asked then)."""

    def __init__(self, scheme: str, platform, reasons: dict[str, str],
                 no_checkpoint: str | None = None):
        self.scheme, self.platform, self.reasons = scheme, platform, reasons
        self.no_checkpoint = no_checkpoint
        if no_checkpoint:
            super().__init__(f"no backend for {scheme} on {platform}: no checkpoint of it can "
                             f"hold this problem ({no_checkpoint})")
            return
        lines = "\n".join(f"  {name}: {why}" for name, why in reasons.items()) or "  (none)"
        super().__init__(f"no backend for {scheme} on {platform}; candidates:\n{lines}")


def check_layer(layer, cls: type, backend: str) -> None:
    """`layer` is a `cls` that `backend`'s create_layer made, else a BackendError naming it."""
    if not isinstance(layer, cls):
        raise BackendError("layer", f"a {cls.__name__} made by create_layer",
                           type(layer).__name__)
    if layer.backend != backend:
        raise BackendError("layer", f"a layer of backend {backend!r}",
                           f"a layer of backend {layer.backend!r}")


def exception_text(e: BaseException) -> str:
    """"Type: message" of an exception, for a result row or a refusal; a bare `assert` (no
    message: vLLM 0.25.1's MXFP6 layer on an H200 read "AssertionError: " and nothing else)
    says where it fired and what it asserts, from the innermost frame of its traceback."""
    text = str(e).strip()
    frames = traceback.extract_tb(e.__traceback__)
    if not text and frames:
        tb = frames[-1]
        text = f"at {os.path.basename(tb.filename)}:{tb.lineno} ({(tb.line or '').strip()})"
    return f"{type(e).__name__}: {text}"
