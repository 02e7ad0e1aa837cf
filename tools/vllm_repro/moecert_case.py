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
    "fp16-forced-mxfp4-abort": (
        "vllm-cpu-forced/mxfp4/M9.K128.N128.E4.k2/fp16.silu.bias/s0", "claims", "crash",
        r"worker process died \(exit code -6\)",
        "the same on the MXFP4 kernel: entry 25"),
    "int8-prepack-k": (
        "vllm-cpu-forced/int8-w8a8/M9.K160.N128.E4.k2/bf16.silu/s0", "accuracy", "error",
        r"CHECK_EQ\(packed_w1\.size\(2\), packed_K",
        "CPUExpertsInt8's prepack and its kernel disagree on the packed K: entry 26"),
}


def reproduce(name: str) -> bool:
    case_id, check, status, pattern, what = REPRODUCTIONS[name]
    backend = case_id.split("/", 1)[0]
    with tempfile.TemporaryDirectory() as results:
        done = subprocess.run(
            [sys.executable, "-m", "moecert.conformance.cli", "run", "--suite", "smoke",
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


def main(names: list[str]) -> int:
    unknown = [n for n in names if n not in REPRODUCTIONS]
    if unknown:
        print(f"unknown reproduction {unknown[0]!r}; known: {', '.join(REPRODUCTIONS)}")
        return 2
    results = [reproduce(n) for n in names or REPRODUCTIONS]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
