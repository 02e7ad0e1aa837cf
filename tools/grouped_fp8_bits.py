"""Whether the grouped backend's FP8 GEMM differs from its documented semantics by more than
the GPU's own FP8 GEMM does (issue 40, item 8; run on a GPU machine from the repository root,
PYTHONPATH as tools/gpu_ci.sh sets it):

    python tools/grouped_fp8_bits.py tests/fixtures/checkpoints/ct-fp8-static-qwen3moe ci

For each torch._scaled_grouped_mm call of the grouped forward on a model folder's layer (the
case's checkpoint and the reload check's second one), the call's bf16 output against: the
exact float64 emulation of its semantics (tests/kernels/test_grouped_fp8.py), and
torch._scaled_mm run per expert on the same operands (use_fast_accum False and True), in bf16
steps. Measured 2026-11-29 on an H200: identical to torch._scaled_mm in every call, 4-18% of
the outputs off the exact emulation (the tolerance table's cuda fp8-w8a8 entries)."""
import sys

import torch
from moecert.conformance.harness.context import RELOAD_SEED_OFFSET, CaseRun, SharedSteps
from moecert.conformance.harness.suites import build_model_suite
from moecert.kernels import grouped

sys.path.insert(0, "tests/kernels")
import test_grouped_fp8  # the emulation lives with its tests (after the path insert)

ROW_MULTIPLE = 16  # cuBLASLt's FP8 GEMM wants the rows of A in multiples of 16


def per_expert_scaled_mm(a, b, scale_a, scale_b, offs, fast: bool) -> torch.Tensor:
    """torch._scaled_mm over each group's rows (zero rows padded up to ROW_MULTIPLE)."""
    out = torch.full((a.shape[0], b.shape[2]), float("nan"), dtype=torch.bfloat16,
                     device=a.device)
    start = 0
    for g, end in enumerate(offs.tolist()):
        n = end - start
        if n:
            rows = -(-n // ROW_MULTIPLE) * ROW_MULTIPLE
            ag = torch.zeros(rows, a.shape[1], dtype=torch.uint8, device=a.device)
            ag[:n] = a[start:end].view(torch.uint8)
            sa = torch.ones(rows, 1, dtype=torch.float32, device=a.device)
            sa[:n, 0] = scale_a[start:end]
            out[start:end] = torch._scaled_mm(
                ag.view(a.dtype), b[g], sa, scale_b[g][None, :].contiguous(),
                out_dtype=torch.bfloat16, use_fast_accum=fast)[:n]
        start = end
    return out


def bf16_steps(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """|x - y| in bf16 steps (the bit patterns as a monotonic integer line)."""
    def line(t):
        i = t.view(torch.int16).to(torch.int32)
        return torch.where(i < 0, -32768 - i, i)
    return (line(x) - line(y)).abs()


def main(folder: str, suite: str) -> None:
    real = grouped.scaled_grouped_mm
    calls = []

    def spy(a, b, sa, sb, offs):
        out = real(a, b, sa, sb, offs)
        calls.append((a, b, sa, sb, offs, out))
        return out

    grouped.scaled_grouped_mm = spy
    shared = SharedSteps()
    for case in build_model_suite(suite, folder, [1], ["grouped"]):
        run = CaseRun(case, "cuda", None, shared)
        if run.claim is not None:
            continue
        second = run.checkpoint_for(case.seed + RELOAD_SEED_OFFSET)
        for name, ckpt in (("first", run.checkpoint), ("second", second)):
            calls.clear()
            run.apply(run.new_layer(ckpt))
            for i, (a, b, sa, sb, offs, out) in enumerate(calls):
                rows = int(offs[-1])
                against = {"exact emulation": test_grouped_fp8.emulated_scaled_grouped_mm(
                    a, b, sa, sb, offs)}
                for fast in (False, True):
                    against[f"scaled_mm fast={fast}"] = per_expert_scaled_mm(a, b, sa, sb,
                                                                             offs, fast)
                parts = [f"{case.case_id} {name} GEMM{i + 1} ({rows} rows)"]
                for what, other in against.items():
                    d = bf16_steps(out[:rows], other[:rows])
                    parts.append(f"vs {what}: {int((d > 0).sum())} of {d.numel()} differ, "
                                 f"{int((d > 1).sum())} by more than a step")
                print(" | ".join(parts), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "ci")
