"""Fixtures written by llm-compressor (compressed-tensors format), on the CPU, offline.

    python tools/producers/llmcompressor_produce.py [--out DIR] [--only NAME ...]

Environment: llmcompressor 0.14.0.1, compressed-tensors 0.19.0, torch 2.13.0 (CPU),
transformers 5.17 (`tox -e producers` makes it). Each fixture: a tiny base model
(`tiny_models.py`), a recipe (GPTQ for integer weights, as llm-compressor's examples do;
round-to-nearest with observers for the float formats), the made-up calibration set, then
llm-compressor's own save (`save_compressed=True`). The routers (`mlp.gate`) and `lm_head` are
left unquantized, as the examples for MoE models do.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).parent))

from fixture_io import finish, producer_main
from tiny_models import CALIB_SAMPLES, CALIB_TOKENS, calibration_dataset, make_model

IGNORE = ["lm_head", "re:.*mlp.gate$", "re:.*block_sparse_moe.gate$"]


@dataclass(frozen=True)
class Job:
    model: str  # tiny_models.MODELS key
    modifier: str  # "gptq" or "rtn" (llm-compressor's QuantizationModifier)
    preset: str | None  # compressed-tensors preset scheme name, or None: `weights` below
    scheme: str  # moecert scheme name
    variant: dict
    weights: dict = field(default_factory=dict)  # QuantizationArgs of a custom scheme
    shard: str | None = None  # max_shard_size: save as shards with an index
    notes: str = ""


_W4_G32 = {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 32}

JOBS: dict[str, Job] = {
    # compressed-tensors 0.19 removed actorder="group" (the one that writes weight_g_idx:
    # "actorder='group' has been removed. Consider using actorder='weight'"), so no file of
    # this pinned version carries g_idx; GPTQModel's desc_act fixture does
    "ct-w4a16-sym-qwen3moe": Job(
        "qwen3moe-wide", "gptq", None, "ct-int4",
        {"checkpoint_format": "ct-0.18", "group_size": 32, "sym": True, "act_order": False,
         "weight_strategy": "group", "activation": "none"},
        weights={**_W4_G32, "symmetric": True, "actorder": "weight"},
        notes="GPTQ with actorder=weight (columns quantized in activation order, no g_idx "
              "stored); K = N = 256"),
    "ct-w4a16-asym-qwen3moe": Job(
        "qwen3moe-small", "gptq", None, "ct-int4",
        {"checkpoint_format": "ct-0.18", "group_size": 32, "sym": False, "act_order": False,
         "weight_strategy": "group", "activation": "none"},
        weights={**_W4_G32, "symmetric": False}),
    "ct-w8a8-int8-qwen3moe": Job(
        "qwen3moe-small", "gptq", "W8A8", "int8-w8a8",
        {"weight_strategy": "channel", "activation": "dynamic-token"}),
    "ct-fp8-static-qwen3moe": Job(
        "qwen3moe-small", "rtn", "FP8", "fp8-w8a8",
        {"weight_strategy": "tensor", "activation": "static-tensor"}),
    "ct-fp8-channel-qwen3moe": Job(
        "qwen3moe-small", "rtn", "FP8_DYNAMIC", "fp8-w8a8",
        {"weight_strategy": "channel", "activation": "dynamic-token"}),
    "ct-fp8-block-qwen3moe": Job(
        "qwen3moe-block", "rtn", "FP8_BLOCK", "fp8-w8a8",
        {"weight_strategy": "block", "activation": "dynamic-group"}),
    "ct-nvfp4-qwen3moe": Job(
        "qwen3moe-small", "rtn", "NVFP4", "nvfp4",
        {"checkpoint_format": "ct", "group_size": 16, "activation": "nvfp4"},
        notes="compressed-tensors stores weight_global_scale = 448*6/amax, the reciprocal of "
              "ModelOpt's weight_scale_2"),
    "ct-mxfp4-qwen3moe": Job(
        "qwen3moe-small", "rtn", "MXFP4A16", "mxfp4",
        {"group_size": 32, "activation": "none"},
        notes="MXFP4 on a silu model with no biases (not the gpt-oss layout)"),
    # issue 42: the MXFP4 preset is W4A4 (input_activations fp4 e2m1, group 32, E8M0,
    # dynamic): the same weights as MXFP4A16, the activations the engine's to quantize
    "ct-mxfp4-w4a4-qwen3moe": Job(
        "qwen3moe-small", "rtn", "MXFP4", "mxfp4",
        {"group_size": 32, "activation": "mxfp4"},
        notes="llm-compressor's MXFP4 preset: W4A4, input_activations num_bits 4, type float, "
              "strategy group, group_size 32, dynamic (no input scales stored)"),
    "ct-mxfp8-qwen3moe": Job(
        "qwen3moe-small", "rtn", "MXFP8", "mxfp8",
        {"group_size": 32, "activation": "mxfp8"}),
    "ct-w4afp8-qwen3moe": Job(
        "qwen3moe-block", "gptq", "W4AFP8", "w4a8-fp8",
        {"group_size": 128, "sym": True, "activation": "dynamic-token"},
        notes="W4AFP8 (moecert scheme w4a8-fp8): int4 weights stored unpacked in int8 "
              "('int-quantized'), e4m3 activations per token"),
    "ct-w4a16-sym-mixtral-sharded": Job(
        "mixtral-small", "gptq", None, "ct-int4",
        {"checkpoint_format": "ct-0.18", "group_size": 32, "sym": True, "act_order": False,
         "weight_strategy": "group", "activation": "none"},
        weights={**_W4_G32, "symmetric": True}, shard="100KB",
        notes="llm-compressor saves Mixtral experts as block_sparse_moe.experts.E."
              "{gate_proj,up_proj,down_proj}, not w1/w3/w2; sharded"),
    # issue 30: several MoE layers behind a dense first layer, shared experts, shards
    "ct-w4a16-asym-deepseekv3-sharded": Job(
        "deepseekv3-small", "gptq", None, "ct-int4",
        {"checkpoint_format": "ct-0.18", "group_size": 32, "sym": False, "act_order": False,
         "weight_strategy": "group", "activation": "none"},
        weights={**_W4_G32, "symmetric": False}, shard="100KB",
        notes="DeepSeek-V3 layout: layer 0 dense (first_k_dense_replace 1), layers 1-2 MoE "
              "with one shared expert each (quantized like any Linear, listed in not_read), "
              "grouped routing with correction bias; sharded"),
}


def _recipe(job: Job):
    from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme
    from llmcompressor.modifiers.gptq import GPTQModifier
    from llmcompressor.modifiers.quantization import QuantizationModifier

    cls = GPTQModifier if job.modifier == "gptq" else QuantizationModifier
    if job.preset is not None:
        return cls(targets="Linear", scheme=job.preset, ignore=IGNORE)
    scheme = QuantizationScheme(targets=["Linear"], weights=QuantizationArgs(**job.weights))
    return cls(config_groups={"group_0": scheme}, ignore=IGNORE)


def produce(name: str, out_root: Path) -> float:
    """Quantize fixture `name` into `out_root/name`; returns the seconds oneshot took."""
    from llmcompressor import oneshot
    from transformers import AutoModelForCausalLM

    job = JOBS[name]
    with tempfile.TemporaryDirectory(prefix=f"moecert-{name}-") as tmp:
        base = make_model(job.model, Path(tmp) / "base")
        model = AutoModelForCausalLM.from_pretrained(base, dtype="auto")
        t0 = time.perf_counter()
        oneshot(model=model, tokenizer=str(base), dataset=calibration_dataset(),
                recipe=_recipe(job), num_calibration_samples=CALIB_SAMPLES,
                max_seq_length=CALIB_TOKENS, pipeline="sequential")
        seconds = time.perf_counter() - t0
        out = Path(tmp) / "out"
        kwargs = {"max_shard_size": job.shard} if job.shard else {}
        model.save_pretrained(out, save_compressed=True, **kwargs)
        finish(out_root, name, out, producer="llm-compressor", env="llmc",
               packages=("llmcompressor",), scheme=job.scheme, variant=job.variant,
               model=job.model, how="quantized by llm-compressor's oneshot, saved by its "
               "save_pretrained(save_compressed=True)", notes=job.notes)
    return seconds


def main(argv: list[str] | None = None) -> int:
    return producer_main(__doc__, JOBS, produce, argv)


if __name__ == "__main__":
    sys.exit(main())
