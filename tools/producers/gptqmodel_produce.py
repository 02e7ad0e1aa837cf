"""Fixtures written by GPTQModel (GPTQ v1 and v2, AWQ gemm), on the CPU, offline.

    GPTQMODEL_CPU_WORKERS=2 python tools/producers/gptqmodel_produce.py [--out DIR] [--only NAME]

Environment of its own (`tox -e producers-gptqmodel`): gptqmodel 7.7.0 needs torch >= 2.14.1
(pip takes the 2.14.1 CUDA build from the machine's wheel folder; it runs on the CPU) and
transformers >= 5.20.2. Each fixture: a tiny base model (`tiny_models.py`), GPTQModel's
`GPTQModel.load(folder, QuantizeConfig)`, `quantize` on the made-up calibration set (token
id rows), `save`. All tokens are routed to every expert while calibrating
(`ExpertsRoutingBypass`), so that every expert has a Hessian from the small set.
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
os.environ.setdefault("GPTQMODEL_CPU_WORKERS", "2")
sys.path.insert(0, str(Path(__file__).parent))

from fixture_io import finish, producer_main
from tiny_models import calibration_ids, make_model


@dataclass(frozen=True)
class Job:
    model: str  # tiny_models.MODELS key
    method: str  # "gptq" or "awq"
    format: str  # GPTQModel FORMAT: "gptq", "gptq_v2", "gemm"
    sym: bool
    desc_act: bool
    scheme: str  # moecert scheme name
    variant: dict
    group_size: int = 32
    notes: str = ""


# measured on the committed files (tools/producers/check_against_base.py)
_MIXED = ("GPTQModel 7.7.0 stored weights under the wrong expert names in this model (E=8, two "
          "MoE layers, gate_up 128x128): layer 0 expert 0 gate_proj/up_proj and expert 7 "
          "down_proj match no base weight (rel err 1.4), layer 0 expert 1 down_proj holds expert "
          "3's; same bytes on every regeneration. Still what the producer wrote; not the base "
          "model's experts")

JOBS: dict[str, Job] = {
    "gptqmodel-gptq-descact-qwen3moe": Job(
        "qwen3moe-wide-allmoe", "gptq", "gptq", sym=True, desc_act=True, scheme="gptq-int4",
        variant={"checkpoint_format": "gptq", "group_size": 32, "sym": True, "act_order": True},
        notes="desc_act: g_idx is a permutation of the groups along K (K = N = 256; one "
              "decoder layer, to stay small); v1 stores zero - 1 (symmetric: 0x77777777)"),
    "gptqmodel-gptq-v2-qwen3moe": Job(
        "qwen3moe-small-allmoe", "gptq", "gptq_v2", sym=True, desc_act=False, scheme="gptq-int4",
        variant={"checkpoint_format": "gptq_v2", "group_size": 32, "sym": True,
                 "act_order": False},
        notes="gptq_v2 stores the zero itself (symmetric: 0x88888888). " + _MIXED),
    "gptqmodel-gptq-asym-qwen3moe": Job(
        "qwen3moe-small-allmoe", "gptq", "gptq", sym=False, desc_act=False, scheme="gptq-int4",
        variant={"checkpoint_format": "gptq", "group_size": 32, "sym": False,
                 "act_order": False},
        notes="v1 asym: stored zero = z - 1. " + _MIXED),
    "gptqmodel-awq-gemm-qwen3moe": Job(
        "qwen3moe-small-allmoe", "awq", "gemm", sym=False, desc_act=False, scheme="awq-int4",
        variant={"checkpoint_format": "awq", "group_size": 32, "sym": False},
        notes="AWQ gemm: qweight [K, N/8] in nibble order 0,2,4,6,1,3,5,7; scales as written "
              "by GPTQModel (bf16, where AutoAWQ writes fp16). Same base model as the gptq_v2 "
              "fixture, whose experts GPTQModel misnamed; not checked for this one (no "
              "producer dequantization wired in)"),
    # issue 30: one group along K (group_size -1): scales and zeros [1, out] per linear
    "gptqmodel-gptq-perchannel-qwen3moe": Job(
        "qwen3moe-small-allmoe", "gptq", "gptq", sym=False, desc_act=False, scheme="gptq-int4",
        variant={"checkpoint_format": "gptq", "group_size": -1, "sym": False,
                 "act_order": False}, group_size=-1,
        notes="per-channel (group_size -1): one group along K, scales [1, out], qzeros "
              "[1, out/8] per linear; v1 asym stores zero - 1. " + _MIXED),
    "gptqmodel-awq-gemm-perchannel-qwen3moe": Job(
        "qwen3moe-small-allmoe", "awq", "gemm", sym=False, desc_act=False, scheme="awq-int4",
        variant={"checkpoint_format": "awq", "group_size": -1, "sym": False}, group_size=-1,
        notes="AWQ gemm per-channel (group_size -1): scales [1, out], qzeros [1, out/8]. "
              "Same base model as the gptq_v2 fixture, whose experts GPTQModel misnamed"),
}


def _config(job: Job):
    from gptqmodel.quantization.config import AWQConfig, ExpertsRoutingBypass, GPTQConfig, MoEConfig

    common = {"bits": 4, "group_size": job.group_size, "sym": job.sym,
              "desc_act": job.desc_act, "format": job.format,
              "moe": MoEConfig(routing=ExpertsRoutingBypass())}
    if job.method == "awq":
        return AWQConfig(**common)
    # GPTQ's default act_group_aware=True refuses group_size -1 ("requires group_size > 0")
    extra = {"act_group_aware": False} if job.group_size <= 0 else {}
    return GPTQConfig(**common, **extra)


def produce(name: str, out_root: Path) -> float:
    """Quantize fixture `name` into `out_root/name`; returns the seconds quantize took."""
    from gptqmodel import GPTQModel

    job = JOBS[name]
    with tempfile.TemporaryDirectory(prefix=f"moecert-{name}-") as tmp:
        base = make_model(job.model, Path(tmp) / "base")
        model = GPTQModel.load(str(base), _config(job), device="cpu")
        calib = [{"input_ids": row.tolist(), "attention_mask": [1] * len(row)}
                 for row in calibration_ids()]
        cwd = os.getcwd()
        os.chdir(tmp)  # GPTQModel writes its run logs to ./logs/
        try:
            t0 = time.perf_counter()
            model.quantize(calib, batch_size=1)
            seconds = time.perf_counter() - t0
        finally:
            os.chdir(cwd)
        out = Path(tmp) / "out"
        model.save(str(out))
        finish(out_root, name, out, producer="gptqmodel", env="gptqmodel",
               packages=("gptqmodel",), scheme=job.scheme, variant=job.variant,
               model=job.model, how=f"quantized by GPTQModel's quantize ({job.method}, format "
               f"{job.format}), written by its save", notes=job.notes)
    return seconds


def main(argv: list[str] | None = None) -> int:
    return producer_main(__doc__, JOBS, produce, argv)


if __name__ == "__main__":
    sys.exit(main())
