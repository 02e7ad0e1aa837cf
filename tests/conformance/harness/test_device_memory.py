"""The GPU memory model (conformance/harness/device_memory.py) against what model-size cases
held on a GPU: every case of the measured run at or below its budget, a problem at its worst
case's, and the parts of the model that follow from the code."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from moecert.conformance.harness import device_memory
from moecert.conformance.harness.cases import Case
from moecert.conformance.harness.device_memory import (
    CASE_BASE_BYTES,
    case_device_need,
    checkpoint_bytes,
    declined_everywhere,
)
from moecert.conformance.harness.schedule import (
    USABLE_FRACTION,
    GpuBudget,
    WorkPool,
    device_need,
    oversize,
    problem_need,
)
from moecert.reference import MoEProblem, random_checkpoint

# certify on two H200s, 2026-11-30 00:10, tree 1d30ecf (tools/model_size_peaks.py --write;
# the run before, 2026-11-29 on 665c1e5, peaked higher): each model-size case's largest
# device_peak_bytes over its checks and both M (the expert map of the DeepSeek-V3 E=32 rows,
# 1 local expert in 8, is left out: the bound does not read it)
PEAKS = Path(__file__).parent / "data" / "model_size_peaks.csv"
# vLLM 0.25.1's ci suite on two H200s, 24 workers, run 20261129-233037-c1bed1 (tree about
# 3edc0fc; tools/model_size_peaks.py --write): each vllm model-size case's largest
# device_peak_bytes over its checks; `oom` 1 where a check ran out of memory (a lower bound)
ENGINE_PEAKS = Path(__file__).parent / "data" / "vllm_model_size_peaks.csv"
DEEPSEEK = MoEProblem(M=16, K=7168, N=2048, E=256, topk=8)
GIB = 1 << 30
H200 = int(139.8 * GIB)


def _measured(path=PEAKS):
    with path.open() as f:
        for row in csv.DictReader(f):
            problem = MoEProblem(M=1, K=int(row["K"]), N=int(row["N"]), E=int(row["E"]),
                                 topk=int(row["topk"]), bias=row["bias"] == "1",
                                 activation=row["activation"])
            # certify runs its model-size cases at the light depth
            yield (Case(row["backend"], row["scheme"], problem, depth="light"),
                   int(row["peak_bytes"]), row)


MEASURED = list(_measured())
ENGINE_MEASURED = list(_measured(ENGINE_PEAKS))


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


POST_FIX_RUN = "20261130-032637-9fc75c"  # fp8-w8a16 and w4a8-int8 after both (tree fa88056)
FULL_RUN = "20261130-060800-695d00"  # every scheme after both fixes (tree 4de5dcb, 2x H200)


def test_the_measured_vllm_runs_are_all_there():
    """vLLM on every scheme of the ci suite's model layers after the chunked reading and the
    layers' deregistration (61 cases, none out of memory), and the two schemes first measured
    after them (6 cases). The run before the fixes (61 cases, three out of memory) is no
    longer the model's data: its residue was the leaked layers."""
    runs = {}
    for _, _, r in ENGINE_MEASURED:
        runs.setdefault(r["run"], []).append(r)
    assert {k: len(v) for k, v in runs.items()} == {FULL_RUN: 61, POST_FIX_RUN: 6}
    assert {r["backend"] for _, _, r in ENGINE_MEASURED} == {"vllm"}
    assert {r["model"] for r in runs[FULL_RUN]} == {"deepseek-v3", "qwen3-30b-a3b",
                                                     "mixtral-8x7b", "gpt-oss-120b"}
    assert {r["scheme"] for r in runs[POST_FIX_RUN]} == {"fp8-w8a16", "w4a8-int8"}
    assert not any(r["oom"] == "1" for _, _, r in ENGINE_MEASURED)


@pytest.mark.parametrize(("case", "peak"), [pytest.param(c, p, id=f"{c.case_id}-{r['run']}")
                                            for c, p, r in ENGINE_MEASURED if r["oom"] != "1"])
def test_every_measured_vllm_case_is_within_its_budget(case, peak):
    """vLLM's peak at or below the bound with vLLM's term (device_memory.engine_term). The
    out-of-memory rows are left out: lower bounds of what the code before the fixes needed
    (its whole-layer reading), which the same cases' post-fix rows replace."""
    need = device_need(case)
    assert peak <= need, (f"{case.case_id}: measured {peak / GIB:.2f} GiB on an H200, "
                          f"budgeted {need / GIB:.2f} GiB")


def test_the_vllm_term_is_what_holds_the_measured_peaks(monkeypatch):
    """Without the engine's term the bound is the harness's parts alone, and vLLM's peaks
    exceed it, after the fixes too (the test above can fail)."""
    monkeypatch.setattr(device_memory, "engine_term", lambda case: 0)
    above = {(r["scheme"], r["model"], r["run"]) for c, peak, r in ENGINE_MEASURED
             if peak > device_need(c) and r["oom"] != "1"}
    assert len(above) >= 10
    assert {("fp8-w8a16", "deepseek-v3", POST_FIX_RUN), ("fp8-w8a16", "mixtral-8x7b",
            POST_FIX_RUN), ("fp8-w8a8", "deepseek-v3", FULL_RUN)} <= above


def test_vllm_deepseek_fp8_w8a16_runs_since_its_reading_is_chunked():
    """The case that ran out of memory on the H200 before the declared reading went over
    expert chunks (vLLM's layer and the reading held 106 GiB and asked for 28 more) peaked at
    63.0 GiB after it: budgeted above that, within one 139.8 GiB GPU (not refused)."""
    case = Case("vllm", "fp8-w8a16", DEEPSEEK)
    need = device_need(case)
    assert 63.0 * GIB <= need <= H200 * USABLE_FRACTION
    gpus = [GpuBudget(H200, 12)]
    assert oversize([case], "cuda", gpus) == []


def test_a_vllm_case_that_fits_only_alone_is_given_the_gpu_alone():
    """A vLLM case above a GPU's room for shared work (its reserves for the other workers)
    but within the GPU: small problems stop starting there until it has run, and it runs
    with nothing else on the GPU."""
    case = Case("vllm", "fp8-w8a8", DEEPSEEK)
    need = device_need(case)
    small = Case("torch", "bf16", MoEProblem(M=1, K=64, N=64, E=4, topk=2))
    # the room of a GPU on which this case fits alone, not beside 11 workers' reserves
    total = int((need + 5 * GIB) / USABLE_FRACTION)
    gpu = GpuBudget(total, 12)
    assert gpu.oversize(need) and not oversize([case], "cuda", [gpu])
    pool = WorkPool([case, small], [gpu])
    gpu.running = 1  # another worker's small problem is running
    assert pool.take(0, worker=1, wait=False) is False  # nothing starts beside it
    gpu.running = 0
    taken, held = pool.take(0, worker=1, wait=False)
    assert taken == [case] and held == need
    assert not gpu.fits(0)  # the small problem waits until it is released
