"""Fixtures for backend tests: the Triton backend on a CPU, through the interpreter."""

from __future__ import annotations

import pytest
import torch
from moecert.kernels.triton_moe.interpret import load_interpreted_kernels


@pytest.fixture
def triton_runs_here(monkeypatch):
    """Make the triton backend runnable in this test: the GPU when there is one, else the
    interpreter (backend.available() and claims() read the variable at call time)."""
    if not torch.cuda.is_available():
        load_interpreted_kernels()
        monkeypatch.setenv("TRITON_INTERPRET", "1")
