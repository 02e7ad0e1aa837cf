"""Running the triton backend on a CPU through the Triton interpreter, inside a process that
may also hold compiled kernels (a test session, the harness's CPU smoke suite).

triton.jit reads TRITON_INTERPRET when a kernel is *defined*, so the kernel modules are
imported (or reloaded, if an earlier import defined them compiled) with the variable set, and
the environment is put back afterwards: the rest of the process keeps what it started with.
The backend reads the variable at call time, so callers set it while they run the backend.
"""

from __future__ import annotations

import importlib
import os
import sys

# in import order (a module after those it binds names from): the kernels' jit functions and
# the modules that read INTERPRET when they are defined (kinds, and heuristics and fused_moe,
# which bind it from kinds)
_MODULES = ("align", "quant", "kinds", "gemm_kernel", "layout", "heuristics", "fused_moe",
            "dequant")


def _is_interpreted(module) -> bool:
    if getattr(module, "INTERPRET", True) is not True:
        return False
    return all(type(getattr(module, name)).__name__ == "InterpretedFunction"
               for name in dir(module) if type(getattr(module, name)).__name__ in
               ("JITFunction", "InterpretedFunction"))


class CompiledLanguageError(RuntimeError):
    """triton.language's own jit helpers were defined compiled in this process."""


def _check_language_interpretable() -> None:
    """Triton 3.9 defines some of triton.language's helpers (tl.zeros, tl.sum, ...) with
    @triton.jit, when triton.language is first imported: if that import ran compiled, the
    interpreter cannot call them ("Cannot call @triton.jit'd outside of the scope of a
    kernel") and no reload of moecert's modules helps."""
    import triton
    import triton.language as tl

    if type(getattr(tl, "zeros", None)).__name__ == "JITFunction":
        raise CompiledLanguageError(
            "triton.language was imported compiled (TRITON_INTERPRET unset) before the triton "
            f"backend was loaded for the interpreter: triton {triton.__version__} cannot "
            "interpret kernels that call its compiled helpers (tl.zeros). Load the kernels "
            "with load_interpreted_kernels() before anything imports triton.language, or set "
            "TRITON_INTERPRET=1 for the whole process.")


def load_interpreted_kernels() -> None:
    """Define every kernel module of the triton backend for the interpreter; raises
    CompiledLanguageError when triton.language itself was defined compiled first."""
    before = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    try:
        _check_language_interpretable()
        for name in _MODULES:
            full = f"{__package__}.{name}"
            module = sys.modules.get(full)
            if module is None:
                importlib.import_module(full)
            elif not _is_interpreted(module):
                importlib.reload(module)
    finally:
        if before is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = before
