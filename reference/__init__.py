"""moecert.reference: the slow, float64 reference every backend is judged against.

    from moecert.reference import Checkpoint, MoEProblem, synthesize, dequantize, moe

The names below are imported on first use (PEP 562), so that importing the format facts
(`moecert.reference.schemes`, which kernels read) runs none of the reference's math: the
import wall between the reference and the kernels holds at run time, not only in the source
(tests/test_architecture.py checks both).
"""

from __future__ import annotations

import importlib
import sys
import types

# public name -> the submodule that defines it
_EXPORTS = {
    "CanonicalLinear": "schemes.canonical",
    "Checkpoint": "checkpoint",
    "checked_variant": "checkpoint",
    "canonicalize": "dequantize",
    "dequantize": "dequantize",
    "CheckpointError": "errors",
    "make_batched_inputs": "inputs",
    "make_inputs": "inputs",
    "LayerSummary": "loader",
    "ModelLayer": "loader",
    "Router": "loader",
    "load_checkpoint": "loader",
    "moe": "moe",
    "MoEProblem": "problem",
    "random_checkpoint": "random_checkpoint",
    "RECORDS": "schemes.records",
    "FormatRecord": "schemes.records",
    "grouped_topk": "routing",
    "sigmoid_topk": "routing",
    "softmax_topk": "routing",
    "SCHEME_NAMES": "schemes",
    "SCHEMES": "schemes",
    "synthesize": "synthesize",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__():
    return sorted({*globals(), *_EXPORTS})


class _Package(types.ModuleType):
    """The package module. A public function that shares its submodule's name (`moe`,
    `dequantize`, `synthesize`, `random_checkpoint`) stays the function when the import
    system binds the submodule on the package, as the eager `from .moe import moe` had it."""

    def __setattr__(self, name, value):
        if isinstance(value, types.ModuleType) and _EXPORTS.get(name) == name:
            value = getattr(value, name)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
