"""Reproductions through moecert's vllm adapter (kernels/vllm_backend.py): for the expected
failures of conformance/harness/xfail-vllm.toml whose behaviour is the adapter's own (reload),
or that were found by the harness and not reduced to a vLLM-and-torch script yet. Each runs
one case and one check of the smoke suite with `moecert run`, without the expected-failure
list, in a child process (a native abort ends the child, not this script), and prints the
row's status and message: what the entry expects.

    python tools/vllm_repro/moecert_case.py            # every reproduction below
    python tools/vllm_repro/moecert_case.py int8-prepack-k

Needs vLLM's CPU build beside moecert (`tox -e vllm --notest`, then run this with
.tox/vllm/bin/python). Exit 0 when every chosen reproduction showed its failure (status and
message pattern), 1 otherwise.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile

# name: (case id, check, expected status, message pattern, what it shows)
REPRODUCTIONS = {
    "adapter-reload": (
        "vllm/bf16/M17.K128.N128.E4.k2/bf16.silu/s0", "reload", "error",
        r"expected an unprocessed vLLM layer",
        "the adapter refuses to load a checkpoint into a processed vLLM layer (vLLM's "
        "layerwise reload needs a whole model): entries 0 and 1"),
    "adapter-reload-forced": (
        "vllm-cpu-forced/gptq-int4/M17.K128.N128.E4.k2/bf16.silu/s0", "reload", "error",
        r"expected an unprocessed vLLM layer", "the same on the forced gate: entry 1"),
    "fp8-block-exact": (
        "vllm-cpu-forced/fp8-w8a16[block]/M17.K256.N256.E4.k2/bf16.silu/s0", "exact", "fail",
        r"structured exact output.*\(4280 of 4352 elements differ\)",
        "CPUExpertsFp8 passes accuracy, but not the exact tier (fp8 x block-scale products not "
        "exact): entry 19"),
    "fp16-forced-fp8-abort": (
        "vllm-cpu-forced/fp8-w8a8/M9.K128.N128.E4.k2/fp16.silu.bias/s0", "claims", "crash",
        r"worker process died \(exit code -6\)",
        "fp16 activations on vLLM's CPU fp8 MoE kernel without AMX: SIGABRT: entry 24"),
    "int8-prepack-k": (
        "vllm-cpu-forced/int8-w8a8/M9.K160.N128.E4.k2/bf16.silu/s0", "accuracy", "error",
        r"CHECK_EQ\(packed_w1\.size\(2\), packed_K",
        "CPUExpertsInt8's prepack and its kernel disagree on the packed K: entry 26"),
    # vLLM 0.25.1's CUDA build on the GPU machine (tools/engine_carry.py; run this with its
    # PYTHONPATH, docs/gpu-ci.md): vLLM's oracle picks a kernel for a layer it then refuses,
    # loudly (an error, not a wrong output): entries of xfail-vllm-cuda.toml
    "gpu-k160-fp8-block": (
        "vllm/fp8-w8a8/M9.K160.N128.E4.k2/bf16.silu/s0", "accuracy", "error",
        r"the last dimension of `x` 160 must be divisible by `group_size` 128",
        "block fp8 at hidden 160: TritonExperts' activation quantizer asserts on the group"),
    "gpu-k160-nvfp4-marlin": (
        "vllm/nvfp4/M9.K160.N128.E4.k2/bf16.silu/s0", "accuracy", "error",
        r"hidden_size = 160 unsupported by Marlin tiles",
        "NVFP4 at hidden 160: the oracle picks Marlin FP4, whose processing asserts"),
    "gpu-k160-mxfp8-marlin": (
        "vllm/mxfp8/M9.K160.N128.E4.k2/bf16.silu/s0", "accuracy", "error",
        r"size_n = 160 is not divisible by tile_n_size = 64",
        "MXFP8 at hidden 160: the oracle picks Marlin, whose repack raises"),
    "gpu-relu2-int-marlin": (
        "vllm/gptq-int4/M9.K128.N128.E4.k2/bf16.relu2/s0", "accuracy", "error",
        r"moe_wna16_marlin_gemm.*size_n = 128, actual_size_n = 256",
        "a non-gated (relu2) int4 layer: the oracle picks Marlin, whose GEMM reads w13 as "
        "gated (twice N)"),
    "gpu-relu2-int-marlin-n256": (
        "vllm/gptq-int4/M33.K512.N256.E8.k2/bf16.relu2/s0", "accuracy", "error",
        r"moe_wna16_marlin_gemm.*size_n = 256, actual_size_n = 512",
        "the same at N = 256 (the ci suite): the GEMM's size_n is N, w13 is read as 2N"),
    "gpu-swigluoai-int-marlin": (
        "vllm/gptq-int4/M64.K1024.N512.E16.k4/bf16.swigluoai-split/s0", "accuracy", "error",
        r"SWIGLUOAI_UNINTERLEAVE requires clamp_limit",
        "a swigluoai-split int4 layer with the limit passed to FusedMoE: the Marlin method's "
        "quant config carries no gemm1_clamp_limit, and the activation asserts"),
    "gpu-w4a8-fp8-w13-weight": (
        "vllm/w4a8-fp8/M17.K512.N256.E8.k2/bf16.silu/s0", "accuracy", "error",
        r"object has no attribute 'w13_weight'",
        "W4A8 (int4 weights, fp8 activations) at a hidden size CUTLASS takes: the layer's "
        "parameters are w13_weight_packed, and building it reads w13_weight"),
    "gpu-relu2-fp-marlin": (
        "vllm/nvfp4/M9.K128.N128.E4.k2/bf16.relu2/s0", "accuracy", "error",
        r"shape '\[\]' is invalid for input of size 2",
        "a non-gated NVFP4 / fp8 W8A16 layer: the Marlin FP path's processing fails on its "
        "one-shard global scale"),
    "gpu-relu2-mxfp4-marlin": (
        "vllm/mxfp4/M33.K512.N256.E8.k2/bf16.relu2/s0", "accuracy", "error",
        r"moe_wna16_marlin_gemm.*size_n = 256, actual_size_n = 512",
        "a non-gated MXFP4 layer: the oracle picks Marlin, whose GEMM reads w13 as gated "
        "(twice N), as for int4 (the ci suite, 2026-11-30 15:00)"),
    "gpu-mxfp4-fp16-marlin": (
        "vllm/mxfp4/M33.K512.N256.E8.k2/fp16.silu.bias/s0", "accuracy", "error",
        r"Invalid thread config: .*num_bits = 4, group_size = 32",
        "MXFP4 weights with fp16 activations: the oracle picks Marlin, which finds no thread "
        "config for the layer and raises (the ci suite, 2026-11-30 15:00)"),
    "gpu-k160-mxfp4-ct-marlin": (
        "vllm/mxfp4/M33.K160.N256.E8.k2/bf16.silu/s0", "accuracy", "error",
        r"size_n = 160 is not divisible by tile_n_size = 64",
        "a SiLU MXFP4 layer at hidden 160 as llm-compressor's MXFP4A16 file: its method "
        "does not pad to Marlin's tiles, and Marlin's repack raises"),
    "gpu-n32-mxfp4-ct-marlin": (
        "vllm/mxfp4/M33.K512.N32.E8.k2/bf16.silu/s0", "accuracy", "error",
        r"Invalid thread config: .*MKN = \[\d+, 32, \d+\]",
        "the same file at intermediate 32: the Marlin GEMM finds no thread config"),
    "gpu-mxfp6-quant-dtype": (
        "vllm/mxfp6-e2m3/M17.K128.N128.E4.k2/bf16.silu/s0", "accuracy", "error",
        r"assert quant_dtype in OCP_MX_DTYPES",
        "weight-only MXFP6 (Quark OCP MX, no input quantization) on vLLM 0.25.1 on cuda: the "
        "method's kernel config takes its input dtype None as quant_dtype and asserts"),
    "gpu-fp8-block-dynamic-token": (
        "vllm/fp8-w8a8[a-dynamic-token]/M17.K256.N256.E4.k2/bf16.silu/s0", "accuracy",
        "error", r"AssertionError",
        "block fp8 weights with per-token activations (a compressed-tensors file): vLLM "
        "asserts while building the layer, with no message"),
    "quark-mxfp6-cpu-accelerator": (
        "vllm/mxfp6-e2m3/M17.K128.N128.E4.k2/bf16.silu/s0", "accuracy", "error",
        r"Cannot access accelerator device when none is available",
        "a Quark OCP MX fp6 layer on the CPU, built under a model config as a served model's "
        "is: vLLM builds, loads and processes it, then its forward asks for an accelerator "
        "(RuntimeError); without a model config its build fails first"),
}


def reproduce(name: str) -> bool:
    case_id, check, status, pattern, what = REPRODUCTIONS[name]
    backend = case_id.split("/", 1)[0]
    with tempfile.TemporaryDirectory() as results:
        done = subprocess.run(
            [sys.executable, "-m", "moecert.conformance.cli", "run", "--suite",
             suite_of(case_id, backend),
             "--backend", backend, "--case-id", case_id, "--check", check, "--results",
             results, "-n", "1"], capture_output=True, text=True)
        from moecert.reports import load

        rows = load(results)
    row = rows[rows["check"] == check].iloc[0] if len(rows) else None
    got_status = None if row is None else str(row["status"])
    message = "" if row is None else str(row["message"])
    shown = got_status == status and re.search(pattern, message) is not None
    print(f"{name}: {what}\n  {case_id} {check}: {got_status}: {message[:400]}\n"
          f"  {'reproduced' if shown else 'NOT reproduced'} (expected {status}, {pattern!r})")
    if row is None:
        print(done.stdout[-2000:], done.stderr[-2000:])
    return shown


def suite_of(case_id: str, backend: str) -> str:
    """The first suite that holds the case (the smoke suite's, else the ci suite's ...)."""
    from moecert.conformance.harness.suites import build_suite

    for suite in ("smoke", "ci", "certify"):
        if any(c.case_id == case_id for c in build_suite(suite, backends=[backend])):
            return suite
    return "smoke"  # `moecert run` says the case is in none


def main(names: list[str]) -> int:
    unknown = [n for n in names if n not in REPRODUCTIONS]
    if unknown:
        print(f"unknown reproduction {unknown[0]!r}; known: {', '.join(REPRODUCTIONS)}")
        return 2
    results = [reproduce(n) for n in names or REPRODUCTIONS]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
