"""The backend registry: built-ins, run-time registration and entry-point discovery."""

from __future__ import annotations

import sys
import textwrap

import pytest
from moecert.kernels import backend_names, get_backend, register_backend
from moecert.kernels.registry import BUILTINS, load_errors, reload_registry, unregister_backend


class _Stub:
    """The smallest object with the protocol's attributes."""

    def __init__(self, name):
        self.name = name

    def available(self):
        return None

    def supports(self, scheme, problem):
        return None

    def create_layer(self, checkpoint, problem): ...
    def load_weights(self, layer, checkpoint): ...
    def process_weights_after_loading(self, layer): ...
    def apply(self, layer, hidden_states, topk_weights, topk_ids, *, out=None, **opts): ...


def test_builtins_load():
    assert not load_errors(), load_errors()
    assert set(BUILTINS) <= set(backend_names())
    for name in BUILTINS:
        assert get_backend(name).name == name


def test_unknown_name_lists_the_known_ones():
    with pytest.raises(KeyError, match="unknown backend 'nope'; known: .*torch"):
        get_backend("nope")


def test_register_at_run_time():
    stub = _Stub("stub-runtime")
    try:
        assert register_backend(stub) is stub
        assert get_backend("stub-runtime") is stub
        assert backend_names()[-1] == "stub-runtime"
        register_backend(stub)  # the same object again is harmless
        with pytest.raises(ValueError, match="registered already"):
            register_backend(_Stub("stub-runtime"))
    finally:
        unregister_backend("stub-runtime")


def test_register_rejects_non_backends():
    with pytest.raises(TypeError, match="missing .*apply"):
        register_backend(type("Half", (), {"name": "half", "available": lambda s: None})())


def _install_vendor_package(tmp_path, body: str, value: str) -> None:
    """A vendor distribution on sys.path with a `moecert.backends` entry point."""
    (tmp_path / "vendor_moe.py").write_text(textwrap.dedent(body))
    info = tmp_path / "vendor_moe-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: vendor-moe\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[moecert.backends]\nvendor = {value}\n")


VENDOR = '''
class VendorBackend:
    name = "vendor"

    def available(self):
        return None

    def supports(self, scheme, problem):
        return "vendor claims nothing"

    def create_layer(self, checkpoint, problem): ...
    def load_weights(self, layer, checkpoint): ...
    def process_weights_after_loading(self, layer): ...
    def apply(self, layer, hidden_states, topk_weights, topk_ids, *, out=None, **opts): ...
'''


@pytest.mark.parametrize("value", ["vendor_moe:VendorBackend", "vendor_moe:INSTANCE"])
def test_entry_point_discovery(tmp_path, monkeypatch, value):
    _install_vendor_package(tmp_path, VENDOR + "\nINSTANCE = VendorBackend()\n", value)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        reload_registry()
        assert "vendor" in backend_names()
        assert get_backend("vendor").name == "vendor"
        assert backend_names()[:len(BUILTINS)] == tuple(BUILTINS)
    finally:
        sys.modules.pop("vendor_moe", None)
        monkeypatch.undo()
        reload_registry()
    assert "vendor" not in backend_names()


def test_broken_entry_point_costs_only_itself(tmp_path, monkeypatch):
    _install_vendor_package(tmp_path, "raise ImportError('vendor library missing')\n",
                            "vendor_moe:VendorBackend")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        with pytest.warns(RuntimeWarning, match="vendor library missing"):
            reload_registry()
        assert "vendor library missing" in load_errors()["vendor"]
        assert set(BUILTINS) <= set(backend_names())
    finally:
        sys.modules.pop("vendor_moe", None)
        monkeypatch.undo()
        reload_registry()
