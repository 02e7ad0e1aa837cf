"""The table scheme variant -> vLLM's choice of experts kernel, native and forced, on the
smoke suite's base shape (what `supports` asked vLLM; run in a venv with vLLM)."""

from moecert.conformance.harness.suites import SPECS, _variant_base
from moecert.kernels.vllm_backend import VllmBackend, VllmCpuForcedBackend
from moecert.reference import SCHEME_NAMES
from moecert.reference.schemes import scheme_variants

native, forced = VllmBackend(), VllmCpuForcedBackend()
print("| variant | vllm | vllm-cpu-forced |\n|---|---|---|")
for scheme in SCHEME_NAMES:
    for quant in scheme_variants(scheme):
        P = _variant_base(SPECS["smoke"].base, quant)
        cells = []
        for b in (native, forced):
            why = b.supports(quant, P)
            choice = b.chosen(quant, P)
            cells.append(choice if why is None else
                         f"refused: {why[:110]}" + (f" [{choice}]" if choice else ""))
        print(f"| {quant.describe()} | {cells[0]} | {cells[1]} |")
