"""Inputs in the file's own regime (issue 30 item 4, conformance/harness/inputs.py): a model
layer with static input scales gets hidden states at 0.9x GEMM1's calibrated amax; the
saturation check drives them 4x beyond and judges saturation; the rows say which regime ran.
A planted bug that only shows beyond the calibrated range (NVFP4 elements not saturated at
6) passes the accuracy check and fails the saturation check."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from moecert.conformance.harness.execute import run_case
from moecert.conformance.harness.inputs import (
    REGIME_SHARE,
    case_inputs,
    input_regime,
    layer_calibrated_amax,
)
from moecert.conformance.harness.suites import build_model_suite
from moecert.kernels import register_backend
from moecert.kernels.activations import quantize_nvfp4
from moecert.kernels.native import TorchBackend
from moecert.kernels.registry import unregister_backend
from moecert.reference.schemes import ACT_NVFP4

FIXTURES = Path(__file__).parents[2] / "fixtures" / "checkpoints"
# calibrated on MoE inputs 1/20 of the usual: unit-variance hidden states would saturate it
LOWCAL = FIXTURES / "modelopt-nvfp4-qwen3moe-lowcal"
W4A16 = FIXTURES / "ct-w4a16-sym-qwen3moe"


def _case(folder: Path, backend: str = "torch", M: int = 17):
    cases = build_model_suite("smoke", str(folder), [sorted(_layers(folder))[0]], [backend])
    return next(c for c in cases if c.problem.M == M and not c.strided)


def _layers(folder: Path):
    from moecert.reference import load_checkpoint

    return [s.layer for s in load_checkpoint(folder)]


@pytest.mark.parametrize("regime", sorted(REGIME_SHARE))
def test_hidden_states_sit_at_the_regimes_share_of_the_calibrated_amax(regime):
    case = _case(LOWCAL)
    assert input_regime(case) == "calibrated"
    x = case_inputs(case, regime).x
    top = layer_calibrated_amax(case)
    assert top < 0.5  # the file's range, not unit-variance hidden states'
    assert float(x.float().abs().max()) == pytest.approx(REGIME_SHARE[regime] * top, rel=4e-3)


def test_rows_record_the_regime_and_saturation_is_judged():
    rows = {r["check"]: r for r in run_case(_case(LOWCAL), checks=("accuracy", "saturation"))}
    acc, sat = rows["accuracy"], rows["saturation"]
    assert (acc["regime"], acc["status"]) == ("calibrated", "pass")
    assert "GEMM1 input amax 0.90x its calibrated" in acc["message"]
    assert (sat["regime"], sat["status"]) == ("saturated", "pass")
    assert "GEMM1 input amax 4.00x" in sat["message"] and "saturation judged" in sat["message"]
    assert sat["tolerance"].endswith("@saturated")


def test_a_layer_without_static_scales_has_no_regime():
    rows = {r["check"]: r for r in run_case(_case(W4A16), checks=("accuracy", "saturation"))}
    assert rows["accuracy"]["regime"] == "" and rows["accuracy"]["status"] == "pass"
    assert rows["saturation"]["status"] == "skip"
    assert "no static input scales" in rows["saturation"]["message"]


class Nvfp4ElementsNotSaturated(TorchBackend):
    """NVFP4 activations whose e2m1 rounding does not stop at 6: a value past the largest
    code is rounded on the grid above it (8, 10, ...), as a kernel that clamps the block
    scale at 448 but not the element does. Invisible while inputs stay in range."""

    name = "test-nvfp4-elements-not-saturated"

    def quantize(self, layer, t, which, static):
        if layer.quant.activation != ACT_NVFP4:
            return super().quantize(layer, t, which, static)
        g = layer.get("a13_global" if which == "w13" else "a2_global")
        q, bs = quantize_nvfp4(t, g)
        blocks = t.unflatten(-1, (-1, 16))
        factor = torch.where(bs > 0, 1.0 / (bs * (1.0 / g)), torch.zeros_like(bs))
        r = blocks * factor
        q = torch.where(r.abs() > 6, torch.round(r / 2) * 2, q)
        return (q * bs * static).flatten(-2)


def test_saturation_check_catches_a_bug_the_calibrated_inputs_do_not_show():
    backend = register_backend(Nvfp4ElementsNotSaturated())
    try:
        case = _case(LOWCAL, backend.name)
        rows = {r["check"]: r for r in run_case(case, checks=("accuracy", "saturation"))}
    finally:
        unregister_backend(backend.name)
    assert rows["accuracy"]["status"] == "pass"
    assert rows["saturation"]["status"] == "fail"
    assert "saturation judged" in rows["saturation"]["message"]
