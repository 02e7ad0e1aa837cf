"""Fixtures written by NVIDIA ModelOpt (FP8, NVFP4, MXFP8, INT4 AWQ W4A16 and W4A8), on the
CPU, offline.

    python tools/producers/modelopt_produce.py [--out DIR] [--only NAME ...]

Environment: nvidia-modelopt[hf] 0.47.0, torch 2.13.0 (CPU), transformers < 5.15 (the `[hf]`
extra's bound), plus `requests` and `datasets` (`tox -e producers-modelopt`). Each fixture:
a tiny base model (`tiny_models.py`), ModelOpt's preset config (`mtq.*_CFG`, as its
`hf_ptq.py` example uses them), calibration by running the made-up token ids through the
model, then ModelOpt's own `export_hf_checkpoint` (which writes `hf_quant_config.json`).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).parent))

from fixture_io import finish, producer_main, versions
from tiny_models import calibration_ids, make_model

FAKE_QUANT_DIR, FAKE_QUANT_SUFFIX = "expected_dequant", ".fakequant.safetensors"


@dataclass(frozen=True)
class Job:
    model: str  # tiny_models.MODELS key
    config: str  # name of ModelOpt's preset in modelopt.torch.quantization
    scheme: str  # moecert scheme name
    variant: dict
    notes: str = ""
    # calibration inputs of every MoE block multiplied by this (1: the model's own hidden
    # states): the input scales then sit that far from the hidden states' usual range
    calib_scale: float = 1.0
    # the tox environment (`producers-<env>`): ModelOpt 0.47's INT4 AWQ export needs
    # transformers 4's per-expert modules (tools/producers/README.md)
    env: str = "modelopt"
    # also write ModelOpt's own fake quantization of these (expert, projection) pairs of the
    # first MoE layer beside expected_dequant/ (`_own_dequantization`)
    expected: tuple[tuple[int, str], ...] = ()


JOBS: dict[str, Job] = {
    "modelopt-fp8-qwen3moe": Job(
        "qwen3moe-small", "FP8_DEFAULT_CFG", "fp8-w8a8",
        {"weight_strategy": "tensor", "activation": "static-tensor"},
        notes="per-tensor weight_scale and input_scale stored as 0-d fp32 tensors"),
    "modelopt-nvfp4-qwen3moe": Job(
        "qwen3moe-small", "NVFP4_DEFAULT_CFG", "nvfp4",
        {"checkpoint_format": "modelopt", "group_size": 16, "activation": "nvfp4"},
        notes="weight_scale_2 = amax / (6 * 448), 0-d; input_scale present (an engine may "
              "run the same file W4A16); gate and up share weight_scale_2"),
    # issue 30: ModelOpt NVFP4 files whose activation quantization lands on e2m1 / e4m3 ties
    # (docs/checkpoints.md, "NVFP4 activations: ties"); one decoder layer each
    "modelopt-nvfp4-mixtral": Job(
        "mixtral-1layer", "NVFP4_DEFAULT_CFG", "nvfp4",
        {"checkpoint_format": "modelopt", "group_size": 16, "activation": "nvfp4"},
        notes="Mixtral names (w1 / w3 / w2); gate and up share weight_scale_2"),
    "modelopt-nvfp4-qwen3moe-e16": Job(
        "qwen3moe-e16-1layer", "NVFP4_DEFAULT_CFG", "nvfp4",
        {"checkpoint_format": "modelopt", "group_size": 16, "activation": "nvfp4"},
        notes="16 experts, N = 32: some experts see few calibration tokens"),
    "modelopt-nvfp4-qwen3moe-lowcal": Job(
        "qwen3moe-1layer", "NVFP4_DEFAULT_CFG", "nvfp4",
        {"checkpoint_format": "modelopt", "group_size": 16, "activation": "nvfp4"},
        notes="MoE inputs scaled by 1/20 during calibration: input scales 1/20 of the "
              "usual, so hidden states of the usual size saturate the block scales",
        calib_scale=0.05),
    # issue 42: ModelOpt's INT4 AWQ preset, read as modelopt-int4-awq (its pre_quant_scale
    # multiplies each GEMM's input). Its W4A8 preset (W4A8_AWQ_BETA_CFG) fails in ModelOpt's
    # export here (tools/producers/README.md)
    "modelopt-int4-awq-qwen3moe": Job(
        "qwen3moe-tiny-n128", "INT4_AWQ_CFG", "modelopt-int4-awq",
        {"group_size": 128, "sym": True, "activation": "none"},
        notes="quant_algo W4A16_AWQ: weight uint8 [N/2, K] (two signed nibbles per byte "
              "along out), weight_scale fp32 [N, K/128], pre_quant_scale bf16 [K] per expert "
              "linear (the export averages it over the experts: equal in every expert, gate "
              "and up equal); ModelOpt's own fake quantization of expert 3's gate_proj in "
              f"{FAKE_QUANT_DIR}/modelopt-int4-awq-qwen3moe{FAKE_QUANT_SUFFIX} (not "
              "bit for bit with the file: docs/checkpoints.md)", env="modelopt-awq",
        expected=((3, "gate_proj"),)),
    "modelopt-mxfp8-qwen3moe": Job(
        "qwen3moe-small", "MXFP8_DEFAULT_CFG", "mxfp8",
        {"group_size": 32, "activation": "mxfp8"}),
}


def produce(name: str, out_root: Path) -> float:
    """Quantize fixture `name` into `out_root/name`; returns the seconds quantize took."""
    import modelopt.torch.quantization as mtq
    import torch
    from modelopt.torch.export import export_hf_checkpoint
    from transformers import AutoModelForCausalLM

    job = JOBS[name]
    ids = calibration_ids()

    def forward_loop(model):
        hooks = []
        if job.calib_scale != 1.0:
            for module in model.modules():
                if type(module).__name__.endswith("SparseMoeBlock"):  # routed blocks only
                    hooks.append(module.register_forward_pre_hook(
                        lambda _m, args: (args[0] * job.calib_scale, *args[1:])))
        with torch.no_grad():
            for row in ids:
                model(row[None, :])
        for h in hooks:
            h.remove()

    with tempfile.TemporaryDirectory(prefix=f"moecert-{name}-") as tmp:
        base = make_model(job.model, Path(tmp) / "base")
        model = AutoModelForCausalLM.from_pretrained(base, dtype="auto")
        t0 = time.perf_counter()
        model = mtq.quantize(model, getattr(mtq, job.config), forward_loop)
        seconds = time.perf_counter() - t0
        out = Path(tmp) / "out"
        with _own_dequantization(model, job.expected) as own:
            with torch.inference_mode():
                export_hf_checkpoint(model, export_dir=out)
        if job.expected:
            _write_fake_quant(out_root, name, own)
        finish(out_root, name, out, producer="modelopt", env=job.env,
               packages=("nvidia-modelopt",), scheme=job.scheme, variant=job.variant,
               model=job.model, how=f"quantized by ModelOpt's mtq.quantize({job.config}), "
               "written by its export_hf_checkpoint" + (
                   f"; calibrated with every MoE block's input times {job.calib_scale}"
                   if job.calib_scale != 1.0 else ""), notes=job.notes)
    return seconds


@contextmanager
def _own_dequantization(model, pairs):
    """{tensor name: value}: ModelOpt's own fake-quantized weight (its `weight_quantizer`
    applied to the weight, what its quantized layer multiplies with) and the input
    quantizer's `pre_quant_scale` (what that layer multiplies its input by) of each (expert,
    projection) in `pairs` of the first MoE layer, taken inside `export_hf_checkpoint` just
    before it packs that weight, so after the export's own resmoothing (its
    `requantize_resmooth_fused_llm_layers` averages the experts' pre_quant_scale): the state
    the file holds."""
    import modelopt.torch.export.unified_export_hf as unified
    import torch

    wanted = {f".experts.{e}.{proj}": (e, proj) for e, proj in pairs}
    names = {id(m): n for n, m in model.named_modules()}
    own: dict = {}
    original = unified._export_quantized_weight

    def capture(sub_module, dtype, weight_name="weight"):
        name = names.get(id(sub_module), "")
        if (weight_name == "weight" and any(name.endswith(k) for k in wanted)
                and f"{name}.weight" not in own):
            with torch.no_grad():
                own[f"{name}.weight"] = sub_module.weight_quantizer(sub_module.weight).clone()
            own[f"{name}.pre_quant_scale"] = sub_module.input_quantizer.pre_quant_scale.clone()
        return original(sub_module, dtype, weight_name)

    unified._export_quantized_weight = capture
    try:
        yield own
    finally:
        unified._export_quantized_weight = original
    missing = [k for k in wanted if not any(n.endswith(f"{k}.weight") for n in own)]
    if pairs and missing:
        raise RuntimeError(f"ModelOpt's export never packed {missing}")


def _write_fake_quant(out_root: Path, name: str, own: dict) -> str:
    """expected_dequant/<name>.fakequant.safetensors, decompress_reference.py's tensor names
    and metadata. Not the manifest's `expected_dequant` (a bit-for-bit expectation): ModelOpt's
    fake quantization and its export round a few codes differently (docs/checkpoints.md),
    tests/reference/test_modelopt_int4_awq.py says how."""
    import json

    from safetensors.torch import save_file

    path = out_root.parent / FAKE_QUANT_DIR / f"{name}{FAKE_QUANT_SUFFIX}"
    path.parent.mkdir(parents=True, exist_ok=True)
    # the model's per-expert names without "model." and the block ("layers.0.experts.3...")
    tensors = {k.removeprefix("model.").replace(".mlp.", "."): v.contiguous()
               for k, v in sorted(own.items())}
    experts = sorted({int(k.split(".experts.")[1].split(".")[0]) for k in tensors})
    save_file(tensors, str(path), metadata={
        "fixture": name, "layer": tensors and next(iter(tensors)).split(".")[1],
        "experts": json.dumps(experts),
        "decompressor": "ModelOpt's own fake quantization weight_quantizer(weight) and "
                        "input_quantizer.pre_quant_scale, taken inside export_hf_checkpoint "
                        "just before it packs the weight",
        "versions": json.dumps(versions("nvidia-modelopt"))})
    return str(path)


def main(argv: list[str] | None = None) -> int:
    return producer_main(__doc__, JOBS, produce, argv)


if __name__ == "__main__":
    sys.exit(main())
