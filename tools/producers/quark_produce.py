"""Fixtures written by AMD Quark (int8 W8A8, int4 W4A16, OCP MXFP6 W6A16), on the CPU,
offline.

    python tools/producers/quark_produce.py [--out DIR] [--only NAME ...]

Environment: amd-quark 0.13, torch 2.13.0 (CPU), transformers 5.17 (`tox -e
producers-quark`). With transformers 5 the experts are fused in memory; Quark's
`preprocess_for_quantization` turns them into per-expert `nn.Linear`s first (without it they
stay fused and unquantized). Then Quark's `ModelQuantizer` with the made-up calibration set
and its own `export_safetensors` (real_quantized, the default).

- per-tensor: Quark's `int8` template (`LLMTemplate`'s Int8Scheme): weights and inputs
  static per-tensor symmetric int8, 0-d scales and zero points.
- per-channel: weights static per-channel symmetric (ch_axis 0), inputs dynamic per-token
  (ch_axis 1), the int8 counterpart of Quark's `ptpc_fp8` template.
- MXFP6 (E2M3, E3M2): Quark's `OCP_MXFP6E2M3Spec` / `OCP_MXFP6E3M2Spec` on the weights
  (static, ch_axis -1: blocks of 32 along in, E8M0 scales, Quark's default "even" scale
  rule), no input quantization (weight-only: the activations moecert holds for MXFP6 are
  16-bit; vLLM's Quark OCP MX MoE takes MXFP6 weights only with MXFP6 or FP8 inputs).
  Quark's fp6 export packs 4 codes in 3 bytes (docs/mxfp6.md).
- MXFP4 W4A4 (issue 42): Quark's `OCP_MXFP4Spec` on the weights (static) and on the inputs
  (dynamic): fp4 e2m1 per 32 along in, E8M0 scales, the format AMD's MI355 MoE releases ship.
- int4 per group (`int4_wo_32`, LLMTemplate's Int4WeightOnlyScheme): symmetric signed int4
  weights, groups of 32 along in, no input quantization (issue 42).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).parent))

from fixture_io import finish, producer_main
from tiny_models import calibration_ids, make_model

EXCLUDE = ["lm_head", "*.mlp.gate"]


@dataclass(frozen=True)
class Job:
    model: str  # tiny_models.MODELS key
    spec: str  # key of SPECS: the weight and input specs
    scheme: str  # moecert scheme name
    variant: dict
    notes: str = ""


JOBS: dict[str, Job] = {
    "quark-int8-tensor-qwen3moe": Job(
        "qwen3moe-small", "int8-tensor", "int8-w8a8",
        {"weight_strategy": "tensor", "activation": "static-tensor"},
        notes="weight_scale, input_scale fp32 0-d; weight_zero_point, input_zero_point int8 "
              "0-d (zero: symmetric)"),
    "quark-int8-channel-qwen3moe": Job(
        "qwen3moe-small", "int8-channel", "int8-w8a8",
        {"weight_strategy": "channel", "activation": "dynamic-token"},
        notes="weight_scale bf16 [N] and weight_zero_point int8 [N] (1-D, not [N, 1]); "
              "dynamic per-token inputs: no input scales stored"),
    "quark-mxfp6-e2m3-qwen3moe": Job(
        "qwen3moe-small", "mxfp6-e2m3", "mxfp6-e2m3", {"activation": "none"},
        notes="weight uint8 [N, 3K/4] (4 fp6 codes per 3 bytes, code 4j in the low 6 bits of "
              "a little-endian 24-bit word), weight_scale uint8 E8M0 [N, K/32]"),
    "quark-mxfp6-e3m2-qwen3moe": Job(
        "qwen3moe-small", "mxfp6-e3m2", "mxfp6-e3m2", {"activation": "none"},
        notes="as quark-mxfp6-e2m3-qwen3moe, E3M2 elements"),
    "quark-mxfp4-w4a4-qwen3moe": Job(
        "qwen3moe-small", "mxfp4-w4a4", "mxfp4", {"group_size": 32, "activation": "mxfp4"},
        notes="weight uint8 [N, K/2] (two e2m1 codes per byte), weight_scale uint8 E8M0 "
              "[N, K/32]; input_tensors OCP_MXFP4Spec dynamic: no input scales stored"),
    "quark-int4-wo32-qwen3moe": Job(
        "qwen3moe-tiny", "int4-wo-32", "quark-int4", {"group_size": 32, "sym": True},
        notes="Quark's int4_wo_32 template (Int4PerGroupSpec, symmetric, group 32 along in): "
              "signed int4 codes, weight int32 [K, N/8] (transposed) in the nibble order "
              "0,2,4,6,1,3,5,7 (export pack_method reorder), weight_zero_point packed the "
              "same way"),
}


def _specs(spec: str):
    """Quark's weight and input specs for a job's `spec` (inputs None: not quantized)."""
    from quark.torch.quantization.config import config as qc

    if spec == "int8-channel":
        return (qc.Int8PerChannelSpec(ch_axis=0, symmetric=True, is_dynamic=False),
                qc.Int8PerChannelSpec(ch_axis=1, symmetric=True, is_dynamic=True))
    if spec == "int4-wo-32":  # LLMTemplate's Int4WeightOnlyScheme(group_size=32)
        return qc.Int4PerGroupSpec(ch_axis=-1, is_dynamic=False, scale_type="float",
                                   group_size=32), None
    if spec == "int8-tensor":
        both = qc.Int8PerTensorSpec(observer_method="min_max", symmetric=True,
                                    scale_type="float", round_method="half_even",
                                    is_dynamic=False)
        return both, both
    if spec == "mxfp4-w4a4":
        return (qc.OCP_MXFP4Spec(ch_axis=-1, is_dynamic=False),
                qc.OCP_MXFP4Spec(ch_axis=-1, is_dynamic=True))
    mx = {"mxfp6-e2m3": qc.OCP_MXFP6E2M3Spec, "mxfp6-e3m2": qc.OCP_MXFP6E3M2Spec}[spec]
    return mx(ch_axis=-1, is_dynamic=False), None


def _config(job: Job):
    from quark.torch.quantization.config.config import QConfig, QLayerConfig

    weight, inputs = _specs(job.spec)
    layer = QLayerConfig(weight=weight.to_quantization_spec(),
                         input_tensors=None if inputs is None else inputs.to_quantization_spec())
    return QConfig(global_quant_config=layer, exclude=EXCLUDE)


def produce(name: str, out_root: Path) -> float:
    """Quantize fixture `name` into `out_root/name`; returns the seconds quantize took."""
    import torch
    from quark.torch import ModelQuantizer, export_safetensors
    from quark.torch.utils.llm.model_preparation import preprocess_for_quantization
    from transformers import AutoModelForCausalLM

    job = JOBS[name]
    with tempfile.TemporaryDirectory(prefix=f"moecert-{name}-") as tmp:
        base = make_model(job.model, Path(tmp) / "base")
        model = AutoModelForCausalLM.from_pretrained(base, dtype="auto")
        model.eval()
        preprocess_for_quantization(model)
        loader = torch.utils.data.DataLoader(list(calibration_ids()), batch_size=1)
        t0 = time.perf_counter()
        model = ModelQuantizer(_config(job)).quantize_model(model, loader)
        seconds = time.perf_counter() - t0
        out = Path(tmp) / "out"
        with torch.no_grad():
            export_safetensors(model, out)
        finish(out_root, name, out, producer="quark", env="quark", packages=("amd-quark",),
               scheme=job.scheme, variant=job.variant, model=job.model,
               how="quantized by Quark's ModelQuantizer after its preprocess_for_quantization, "
               "written by its export_safetensors", notes=job.notes)
    return seconds


def main(argv: list[str] | None = None) -> int:
    return producer_main(__doc__, JOBS, produce, argv)


if __name__ == "__main__":
    sys.exit(main())
