"""tools/reading_sweep.py: the reading a backend computes stands out from the others."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from moecert.conformance.harness.suites import build_suite

TOOL = Path(__file__).resolve().parents[3] / "tools" / "reading_sweep.py"


def _tool():
    spec = importlib.util.spec_from_file_location("reading_sweep", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_sweep_finds_the_reading_the_backend_computes():
    case = next(c for c in build_suite("smoke", backends=["torch"])
                if c.case_id.startswith("torch/fp8-w8a8[channel,a-dynamic-token]/"))
    rows = {r["reading"]: r for r in _tool().sweep(case, "cpu")}
    declared = rows["declared -"]["rel_fro"]
    assert declared < 4e-3  # the output rounding: the torch backend computes this reading
    assert rows["activation=dynamic-token"]["rel_fro"] == declared
    # another quantization of the same activations, or none: an e4m3 rounding apart (at
    # K = 128 a 1x128 group is the token's row: dynamic-group is the same reading)
    assert rows["activation=dynamic-group"]["rel_fro"] == declared
    # silu(gate) rounded before the product (vLLM's CUDA silu_and_mul), which the torch
    # backend does not do: a per-token row re-rounds where that moves its amax
    assert rows["declared, gate_activation_in_activation_dtype=True"]["rel_fro"] > 3 * declared
    for other in ("activation=none", "activation=dynamic-tensor"):
        assert rows[other]["rel_fro"] > 5 * declared, (other, rows[other])


def test_the_sweep_names_the_planted_bug_a_backend_has():
    from moecert.conformance.mutants import register_mutants

    bug = "mutant-nvfp4-shard-global-collapsed"  # vLLM keeps one w13 global scale an expert
    register_mutants([bug])
    case = next(c for c in build_suite("smoke", backends=[bug]) if c.scheme == "nvfp4"
                and c.problem.activation == "silu")
    rows = {r["reading"]: r for r in _tool().sweep(case, "cpu")}
    assert rows["declared -"]["rel_fro"] > 1e-2  # the bug fails the case
    assert rows[f"planted bug {bug}"]["rel_fro"] == 0.0  # and is named: its own output
    others = [r for name, r in rows.items() if name.startswith("planted bug")
              and name != f"planted bug {bug}" and "rel_fro" in r]
    assert others and all(r["rel_fro"] > 1e-2 for r in others), others
