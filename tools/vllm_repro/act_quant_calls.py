"""What vLLM's activation quantizers do inside a moecert case, call by call: for each case
id (of the ci suite, backend vllm, on cuda), the layer is built and applied through moecert's
adapter with vLLM's `ops.scaled_fp8_quant` and its MoE path's `per_token_quant_int8` wrapped.
Each fp8 call's input, scale and codes are kept and compared with

- the codes of two rules on vLLM's own input: the exact ratio x * 448 / amax rounded (the
  reference's reading without `activation_fp8_float32`) and the float32 one (with it:
  per tensor x * fl(1 / s), per token x / s, s = fl(amax / 448));
- the reference's largest magnitude of each GEMM's input (reference.moe's `record`, of the
  declared reading): vLLM's scale * 448 should be it.

Each int8 call's codes are compared with the exact ratio x * 127 / amax rounded half to even
and with the float32 x * fl(127 / amax) rounded half away from zero (the reference's reading
with `activation_round_half_away`), with how many of the differing elements are exact ties
of the ratio (where a float32 quotient a few ulps off lands on either side).

    PYTHONPATH=/tmp/shim-engines:$(python3 tools/engine_carry.py env vllm) \\
        python3 tools/vllm_repro/act_quant_calls.py \\
            'vllm/fp8-w8a16/M64.K1024.N512.E16.k4/bf16.silu/s0'

A rule that matches vLLM's codes everywhere is what vLLM computes; an amax that differs from
the reference's says the quantized tensor is not the one the reference quantizes.
"""

from __future__ import annotations

import sys

import torch


def _rule_codes(x: torch.Tensor, scale: torch.Tensor, dynamic: bool, per_token: bool):
    """(exact, float32) e4m3 codes of x for vLLM's scale (float32, [1] or [rows, 1]); the
    exact rule of a dynamic scale divides by amax / 448, of a static one by the scale."""
    from moecert.reference.elements import round_to_e4m3

    x64 = x.to(torch.float64)
    amax = x64.abs().amax(-1, keepdim=True) if per_token else x64.abs().amax()
    den = amax.clamp_min(1e-30) / 448 if dynamic else scale.to(torch.float64).reshape(())
    exact = round_to_e4m3((x64 / den).clamp(-448, 448))
    s = scale.to(torch.float32).reshape(-1, 1) if per_token else scale.to(torch.float32).reshape(())
    x32 = x.to(torch.float32)
    ratio = x32 / s if per_token else x32 * (1.0 / s)
    return exact, round_to_e4m3(ratio.to(torch.float64).clamp(-448, 448))


def _int8_rule_codes(x: torch.Tensor):
    """(half to even of the exact ratio, half away of the float32 one, exact ties) per row."""
    x64 = x.to(torch.float64)
    amax = x64.abs().amax(-1, keepdim=True).clamp_min(1e-10)
    ratio = x64 * 127 / amax
    even = torch.round(ratio).clamp(-128, 127)
    r32 = x.to(torch.float32) * (127 / amax.to(torch.float32))
    away = (torch.sign(r32) * torch.floor(r32.abs() + 0.5)).clamp(-128, 127).to(torch.float64)
    return even, away, (ratio - ratio.trunc()).abs() == 0.5


def main(argv: list[str]) -> int:
    import vllm._custom_ops as ops
    from moecert.conformance.harness.context import CaseRun
    from moecert.conformance.harness.numerics import reading
    from moecert.conformance.harness.suites import build_suite
    from moecert.reference import moe

    by_id = {c.case_id: c for c in build_suite("ci", backends=["vllm"])}
    calls = []
    original = ops.scaled_fp8_quant

    def recording(input, scale=None, *args, **kwargs):
        out, s = original(input, scale, *args, **kwargs)
        per_token = bool(kwargs.get("use_per_token_if_dynamic", False))
        calls.append((input.detach().clone(), scale is None, per_token, out.detach().clone(),
                      s.detach().clone()))
        return out, s

    ops.scaled_fp8_quant = recording
    import vllm.model_executor.layers.fused_moe.utils as moe_utils

    int8_calls = []
    int8_original = moe_utils.per_token_quant_int8

    def int8_recording(x):
        q, s = int8_original(x)
        int8_calls.append((x.detach().clone(), q.detach().clone()))
        return q, s

    moe_utils.per_token_quant_int8 = int8_recording
    for cid in argv:
        calls.clear()
        int8_calls.clear()
        run = CaseRun(by_id[cid], "cuda")
        run.output  # noqa: B018 - the layer applied once, its quantizer calls recorded
        x, w, ids, counts = run.inputs.tensors()
        kept = run._kept_checkpoint()
        raw = run.laid_out_checkpoint(kept if kept is not None
                                      else run._draw_checkpoint(run.case.seed))
        record = {}
        moe(reading(raw, run.numerics), x, w, ids, run.problem, expert_num_tokens=counts,
            record=record)
        print(f"{cid}: {run.backend_detail}; declared {run.numerics}")
        print(f"  reference amax: w13 input {record.get('w13')!r}, w2 input {record.get('w2')!r}")
        for i, (a, dynamic, per_token, out, s) in enumerate(calls):
            codes = out[:a.shape[0]].to(torch.float64)  # vLLM may pad the rows
            exact, f32 = _rule_codes(a, s, dynamic, per_token)
            vllm_amax = float(s.max()) * 448
            kind = ("dynamic " if dynamic else "static ") + ("per token" if per_token
                                                             else "per tensor")
            amax = float(a.abs().max())
            print(f"  call {i}: input {tuple(a.shape)} {a.dtype}, {kind}; amax {amax!r},"
                  f" vLLM scale * 448 {vllm_amax!r}; codes differing from vLLM's: exact rule "
                  f"{int((exact != codes).sum())}, float32 rule {int((f32 != codes).sum())} "
                  f"of {codes.numel()}")
        for i, (a, q) in enumerate(int8_calls):
            codes = q.reshape(a.shape).to(torch.float64)
            even, away, tie = _int8_rule_codes(a)
            print(f"  int8 call {i}: input {tuple(a.shape)} {a.dtype}; codes differing from "
                  f"vLLM's: half-even exact {int((even != codes).sum())}, half-away float32 "
                  f"{int((away != codes).sum())} ({int(((away != codes) & tie).sum())} at exact "
                  f"ties; {int(tie.sum())} ties in all) of {codes.numel()}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
