"""Shared by the prefill dispatch's tests (test_fp4_prefill.py and test_int4_prefill.py under
the interpreter, their _cuda files compiled): one layer's output at several values of
MOECERT_TRITON_DEQUANT_ROWS, each against the float64 reference. No kernel module is imported
here: each test module binds its own (interpreted or compiled)."""

from __future__ import annotations

import torch

DEQUANT_ROWS_ENV = "MOECERT_TRITON_DEQUANT_ROWS"  # (configs.DEQUANT_ROWS_ENV, checked below)


def outputs_by_threshold(backend, layer, inputs, ref: torch.Tensor, monkeypatch,
                         thresholds: dict, bound: float, launches=None) -> dict:
    """{threshold: the layer's output in float64} for each MOECERT_TRITON_DEQUANT_ROWS value
    in `thresholds` (its value: the weight kind every launch must take, read by `launches`,
    a spy_launches("WEIGHT"), where given), each within relative Frobenius error `bound` of
    `ref` (on the output's device)."""
    from moecert.kernels.triton_moe import configs

    assert configs.DEQUANT_ROWS_ENV == DEQUANT_ROWS_ENV
    outs = {}
    for rows, kind in thresholds.items():
        monkeypatch.setenv(DEQUANT_ROWS_ENV, str(rows))
        if launches is not None:
            launches.seen.clear()
        outs[rows] = backend.apply(layer, *inputs).double()
        if launches is not None:
            assert {k for (k,) in launches.seen} == {kind}, rows
        err = ((outs[rows] - ref).norm() / ref.norm()).item()
        assert err <= bound, f"{rows or 'default'}: relative error {err:.3e}"
    return outs
