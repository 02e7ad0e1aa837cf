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
    engine_term,
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


def test_the_measured_vllm_run_is_all_there():
    """vLLM on every scheme of the ci suite's model layers: 61 cases, three of them out of
    memory (fp8-w8a16 DeepSeek-V3 and Mixtral-8x7B, w4a8-int8 DeepSeek-V3)."""
    assert len(ENGINE_MEASURED) == 61
    assert {r["backend"] for _, _, r in ENGINE_MEASURED} == {"vllm"}
    assert {r["model"] for _, _, r in ENGINE_MEASURED} == {"deepseek-v3", "qwen3-30b-a3b",
                                                           "mixtral-8x7b", "gpt-oss-120b"}
    assert sorted((r["scheme"], r["model"]) for _, _, r in ENGINE_MEASURED
                  if r["oom"] == "1") == [("fp8-w8a16", "deepseek-v3"),
                                          ("fp8-w8a16", "mixtral-8x7b"),
                                          ("w4a8-int8", "deepseek-v3")]


@pytest.mark.parametrize(("case", "peak"), [pytest.param(c, p, id=c.case_id)
                                            for c, p, _ in ENGINE_MEASURED])
def test_every_measured_vllm_case_is_within_its_budget(case, peak):
    """vLLM's peak, or where it ran out of memory the peak it reached, at or below the
    bound with vLLM's term (device_memory.engine_term)."""
    need = device_need(case)
    assert peak <= need, (f"{case.case_id}: measured {peak / GIB:.2f} GiB on an H200, "
                          f"budgeted {need / GIB:.2f} GiB")


def test_the_vllm_term_is_what_holds_the_measured_peaks(monkeypatch):
    """Without the engine's term the bound is the harness's parts alone, and vLLM's peaks
    exceed it (the test above can fail)."""
    monkeypatch.setattr(device_memory, "engine_term", lambda case: 0)
    above = {(r["scheme"], r["model"]) for c, peak, r in ENGINE_MEASURED
             if peak > device_need(c)}
    assert len(above) >= 10
    assert {("fp8-w8a16", "qwen3-30b-a3b"), ("fp8-w8a16", "mixtral-8x7b"),
            ("w4a8-int8", "mixtral-8x7b"), ("fp8-w8a8", "deepseek-v3")} <= above


def test_vllm_requantized_w13_is_budgeted_its_reading():
    """Per-tensor fp8 weights: vLLM requantizes w13 to one scale per expert and declares
    it, and the harness reads the checkpoint so; channel-wise weights are not requantized."""
    per_tensor = Case("vllm", "fp8-w8a16", DEEPSEEK)
    block = Case("vllm", "fp8-w8a8", DEEPSEEK)
    assert per_tensor.variant.weight_strategy == "tensor" != block.variant.weight_strategy
    weights = DEEPSEEK.E * DEEPSEEK.K * DEEPSEEK.N * 3
    processing = checkpoint_bytes(per_tensor) - checkpoint_bytes(block)  # block scales
    assert engine_term(per_tensor) - engine_term(block) == processing + (
        device_memory.VLLM_REQUANTIZED_READING_BYTES_PER_WEIGHT * weights)


def test_vllm_deepseek_fp8_w8a16_is_refused_before_it_runs():
    """The case that ran out of memory on the H200 (vLLM's layer and the reading held 106 GiB
    and asked for 28 more) needs more than a whole 139.8 GiB GPU under the bound: oversize,
    refused up front. Qwen3-30B-A3B's fits and shares the GPU; Mixtral-8x7B's (out of memory
    also when retried alone) is refused too."""
    qwen = MoEProblem(M=64, K=2048, N=768, E=128, topk=8)
    mixtral = MoEProblem(M=16, K=4096, N=14336, E=8, topk=2)
    cases = [Case("vllm", "fp8-w8a16", P) for P in (DEEPSEEK, mixtral, qwen)]
    gpus = [GpuBudget(H200, 12)]
    refused = oversize(cases, "cuda", gpus)
    assert [c for c, _, _ in refused] == cases[:2]
    assert all(need > room * USABLE_FRACTION and room == H200 for _, need, room in refused)
    assert not gpus[0].oversize(device_need(cases[2]))  # not alone: it shares the GPU


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
