"""The backend registry: built-ins plus backends found through the entry-point group
`moecert.backends` (value `module:attr`, an instance, a class or a factory) or added with
`register_backend`. Backends are looked up by name."""

from __future__ import annotations

import importlib
import warnings
from importlib.metadata import entry_points

from .protocol import Backend

ENTRY_POINT_GROUP = "moecert.backends"

# Imported on first use: a backend's module may import its kernels (and triton) at load time.
BUILTINS = {
    "triton": "moecert.kernels.triton_moe.backend:TritonBackend",
    "torch": "moecert.kernels.native:TorchBackend",
    "xpu": "moecert.kernels.xpu:XpuBackend",
    "grouped": "moecert.kernels.grouped:GroupedBackend",
}

# Backend groups an expected-failure entry may name where which backends show one behaviour
# depends on the host: the group's function answers for this machine.
GROUPS = {
    "vllm-amx": "moecert.kernels.vllm_backend:amx_gate_backends",
}

_registry: dict[str, Backend] = {}
_load_errors: dict[str, str] = {}
_loaded = False


def _instantiate(obj):
    """An entry point's target: a Backend instance, or a class / factory returning one."""
    if isinstance(obj, Backend) and not isinstance(obj, type):
        return obj
    if callable(obj):
        return obj()
    return obj


def _resolve(target: str):
    module, _, attr = target.partition(":")
    obj = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return _instantiate(obj)


def _load() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    for name, target in BUILTINS.items():
        try:
            _add(_resolve(target))
        except Exception as e:  # a broken built-in costs that backend, never the registry
            _load_errors[name] = f"{type(e).__name__}: {e}"
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            _add(_instantiate(ep.load()))
        except Exception as e:
            _load_errors[ep.name] = f"{type(e).__name__}: {e}"
            warnings.warn(f"moecert backend entry point {ep.name!r} ({ep.value}) failed to "
                          f"load: {e}", RuntimeWarning, stacklevel=2)


def _add(backend) -> Backend:
    missing = [m for m in ("name", "available", "supports", "create_layer", "load_weights",
                           "process_weights_after_loading", "apply")
               if not hasattr(backend, m)]
    if missing:
        raise TypeError(f"{backend!r} is not a moecert Backend: missing {', '.join(missing)}")
    name = backend.name
    if not isinstance(name, str) or not name:
        raise TypeError(f"{backend!r}: Backend.name must be a non-empty string")
    other = _registry.get(name)
    if other is not None and other is not backend:
        raise ValueError(f"a backend named {name!r} is registered already ({other!r})")
    _registry[name] = backend
    _load_errors.pop(name, None)
    return backend


def register_backend(backend) -> Backend:
    """Add a Backend instance at run time, exactly as an entry point would."""
    _load()
    return _add(backend)


def unregister_backend(name: str) -> None:
    _load()
    _registry.pop(name, None)


def backend_names() -> tuple[str, ...]:
    """Registered backends: built-ins first, then entry points and run-time registrations."""
    _load()
    return tuple(_registry)


def get_backend(name: str) -> Backend:
    _load()
    try:
        return _registry[name]
    except KeyError:
        broken = f"; failed to load: {', '.join(_load_errors)}" if _load_errors else ""
        raise KeyError(f"unknown backend {name!r}; known: {', '.join(_registry)}{broken}"
                       ) from None


def load_errors() -> dict[str, str]:
    """Backends (built-in or entry point) that failed to load, with the error."""
    _load()
    return dict(_load_errors)


def reload_registry() -> None:
    """Forget every backend and load built-ins and entry points again (after installing a
    vendor package at run time). Backends added with `register_backend` are dropped."""
    global _loaded
    _registry.clear()
    _load_errors.clear()
    _loaded = False
    _load()


def backend_group(name: str) -> tuple[str, ...] | None:
    """The backends the group `name` stands for on this machine (GROUPS), None for a name
    that is no group."""
    target = GROUPS.get(name)
    return None if target is None else tuple(_resolve(target))  # _resolve calls it
