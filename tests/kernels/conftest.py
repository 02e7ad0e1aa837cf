"""Fixtures for backend tests: the Triton backend on a CPU, through the interpreter."""

from __future__ import annotations

import importlib
import os

import pytest
import torch


def load_interpreted_kernels():
    """The Triton kernel modules defined for the interpreter.

    triton.jit reads TRITON_INTERPRET when a kernel is defined, so it is set while the kernel
    modules are imported (reloaded if an earlier import defined them compiled) and put back
    right after: other test modules in the same process keep the environment they started
    with, and the backend keeps rejecting a plain CPU for them.
    """
    before = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    try:
        from moecert.kernels.triton_moe import fused_moe, quant

        if not fused_moe.INTERPRET:
            quant = importlib.reload(quant)
            fused_moe = importlib.reload(fused_moe)
    finally:
        if before is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = before
    return fused_moe, quant


@pytest.fixture
def triton_runs_here(monkeypatch):
    """Make the triton backend runnable in this test: the GPU when there is one, else the
    interpreter (backend.available() and claims() read the variable at call time)."""
    if not torch.cuda.is_available():
        load_interpreted_kernels()
        monkeypatch.setenv("TRITON_INTERPRET", "1")
