"""The GPU memory model (conformance/harness/device_memory.py) against what model-size cases
held on a GPU: every case of the measured run at or below its budget, a problem at its worst
case's, and the parts of the model that follow from the code."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from moecert.conformance.harness.cases import Case
from moecert.conformance.harness.device_memory import (
    CASE_BASE_BYTES,
    case_device_need,
    checkpoint_bytes,
    declined_everywhere,
)
from moecert.conformance.harness.schedule import GpuBudget, WorkPool, device_need, problem_need
from moecert.reference import MoEProblem, random_checkpoint

# certify on two H200s, 2026-11-30 00:10, tree 1d30ecf (tools/model_size_peaks.py --write;
# the run before, 2026-11-29 on 665c1e5, peaked higher): each model-size case's largest
# device_peak_bytes over its checks and both M (the expert map of the DeepSeek-V3 E=32 rows,
# 1 local expert in 8, is left out: the bound does not read it)
PEAKS = Path(__file__).parent / "data" / "model_size_peaks.csv"
DEEPSEEK = MoEProblem(M=16, K=7168, N=2048, E=256, topk=8)
GIB = 1 << 30


def _measured():
    with PEAKS.open() as f:
        for row in csv.DictReader(f):
            problem = MoEProblem(M=1, K=int(row["K"]), N=int(row["N"]), E=int(row["E"]),
                                 topk=int(row["topk"]), bias=row["bias"] == "1",
                                 activation=row["activation"])
            # certify runs its model-size cases at the light depth
            yield (Case(row["backend"], row["scheme"], problem, depth="light"),
                   int(row["peak_bytes"]), row)


MEASURED = list(_measured())


def test_the_measured_run_is_all_there():
    """Four backends on each model layer's problems: a truncated file would pass below."""
    assert len(MEASURED) == 244
    assert {r["backend"] for _, _, r in MEASURED} == {"grouped", "torch", "triton", "xpu"}
    assert {r["model"] for _, _, r in MEASURED} == {"deepseek-v3", "qwen3-30b-a3b",
                                                    "mixtral-8x7b", "gpt-oss-120b"}


@pytest.mark.parametrize(("case", "peak"), [pytest.param(c, p, id=c.case_id)
                                            for c, p, _ in MEASURED])
def test_every_measured_case_is_within_its_budget(case, peak):
    need = device_need(case)
    assert peak <= need, (f"{case.case_id}: measured {peak / GIB:.2f} GiB on an H200, "
                          f"budgeted {need / GIB:.2f} GiB")


def test_the_checkpoint_bytes_are_the_drawn_checkpoints():
    """What the model counts as a checkpoint is what the harness draws, per format (W4AFP8's
    int4 codes a byte each, scales and zero points too): at most, and within a few percent
    (the widest declared dtype of a scale)."""
    P = MoEProblem(M=1, K=256, N=128, E=4, topk=2)
    for scheme in ("gptq-int4", "w4a8-fp8", "mxfp6-e2m3", "nvfp4", "fp8-w8a16", "bf16"):
        drawn = random_checkpoint(scheme, P)
        size = sum(t.numel() * t.element_size() for t in drawn.tensors.values())
        counted = checkpoint_bytes(Case("torch", scheme, P))
        assert size <= counted <= 1.05 * size, scheme


def test_a_case_its_backend_declines_holds_its_checkpoint_only():
    declined = Case("xpu", "fp8-w8a16", DEEPSEEK)  # xpu: symmetric int4 only
    claimed = Case("torch", "fp8-w8a16", DEEPSEEK)
    assert declined_everywhere(declined) and not declined_everywhere(claimed)
    # refused before the layer loads a copy: no layer, no reference, no temporaries of them
    assert device_need(declined) == checkpoint_bytes(declined) + CASE_BASE_BYTES
    # the claimed one holds the layer's copy of it too (fp8 codes are kept as loaded)
    assert device_need(claimed) - device_need(declined) > checkpoint_bytes(claimed)


def test_grouped_is_budgeted_its_16_bit_operand():
    torch_need, grouped_need = (device_need(Case(b, "gptq-int4", DEEPSEEK, depth="light"))
                                for b in ("torch", "grouped"))
    assert grouped_need - torch_need == 2 * DEEPSEEK.E * DEEPSEEK.K * DEEPSEEK.N * 3


def test_fp6_is_budgeted_its_widened_codes():
    """The kernel format holds fp6 codes widened to one e4m3 byte each: more than a 6-bit
    copy of the weights (what the model before this one counted)."""
    fp6 = Case("torch", "mxfp6-e2m3", DEEPSEEK)
    weights = DEEPSEEK.E * DEEPSEEK.K * DEEPSEEK.N * 3
    assert device_need(fp6) - 2 * checkpoint_bytes(fp6) >= weights


def test_a_problem_is_budgeted_at_its_worst_case():
    """Its cases run one after another on one worker: the pool holds the largest of their
    budgets while the problem runs, whichever backend comes first."""
    group = [Case(b, "gptq-int4", DEEPSEEK) for b in ("torch", "grouped", "xpu")]
    worst = max(map(device_need, group))
    assert problem_need(group) == worst == device_need(group[1])
    pool = WorkPool(group, [GpuBudget(int(2 * worst / 0.97), 1)])
    taken, need = pool.take(0)
    assert need == worst and len(taken) == 3


def test_a_small_case_needs_no_budget():
    assert case_device_need(Case("torch", "bf16", DEEPSEEK)) > 0
    assert device_need(Case("torch", "bf16", MoEProblem(M=1, K=64, N=64, E=4, topk=2))) == 0


def test_a_full_depth_case_is_budgeted_its_reload_layers():
    """The reload check holds a second checkpoint and three more layers (and two state
    clones) beside the case's: a full-depth model-size case needs more than a light one."""
    light = Case("grouped", "gptq-int4", DEEPSEEK, depth="light")
    full = Case("grouped", "gptq-int4", DEEPSEEK, depth="full")
    assert device_need(full) - device_need(light) > 4 * 2 * DEEPSEEK.E * DEEPSEEK.K * DEEPSEEK.N * 3
