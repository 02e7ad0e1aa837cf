"""Loading the triton backend for the interpreter (kernels/triton_moe/interpret.py) in a process
that imported triton.language compiled first: a clear error, not the interpreter's "Cannot
call @triton.jit'd outside of the scope of a kernel" from the first kernel that calls tl.zeros.
In a fresh process: the test session itself loads the kernels interpreted up front."""

from __future__ import annotations

import os
import subprocess
import sys

PROBE = """
import triton.language
from moecert.kernels.triton_moe.interpret import CompiledLanguageError, load_interpreted_kernels
try:
    load_interpreted_kernels()
except CompiledLanguageError as e:
    print("REFUSED:", e)
else:
    print("LOADED")
"""


def _probe(interpret: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    if interpret is not None:
        env["TRITON_INTERPRET"] = interpret
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                          env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_compiled_triton_language_is_refused_by_name():
    out = _probe(None)
    assert out.startswith("REFUSED: triton.language was imported compiled"), out
    assert "load_interpreted_kernels()" in out and "TRITON_INTERPRET=1" in out


def test_a_process_that_interprets_throughout_loads_them():
    assert _probe("1").startswith("LOADED")
