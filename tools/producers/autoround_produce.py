"""Fixtures written by Intel AutoRound (its default export and its auto_gptq export), on the
CPU, offline.

    python tools/producers/autoround_produce.py [--out DIR] [--only NAME ...]

Environment: auto-round 0.16.1, torch 2.13.0 (CPU), transformers 5.17 (`tox -e
producers-autoround`). Each fixture: a tiny base model (`tiny_models.py`), `AutoRound(model,
tokenizer, bits=4, group_size=32, sym=True, ...)` tuned on the made-up calibration set (its
token ids as text of the tiny word-level tokenizer), then AutoRound's own
`quantize_and_save(format=...)`.

- `auto_round` (the default format): `quant_method: "auto-round"`, GPTQ-style packing
  (`packing_format` says which), no g_idx.
- `auto_gptq`: `quant_method: "gptq"`, GPTQ v1 (zero - 1 stored).

AutoRound's symmetric rule maps each group's largest magnitude to the code -8, so about half
of the stored scales are negative: the files are read with signed scales (issue 42).
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

# a few tuning steps: the fixture needs AutoRound's rule and layout, not its best accuracy
ITERS = 4


@dataclass(frozen=True)
class Job:
    model: str  # tiny_models.MODELS key
    format: str  # AutoRound's export format
    scheme: str  # moecert scheme name
    variant: dict
    notes: str = ""


JOBS: dict[str, Job] = {
    "autoround-default-qwen3moe": Job(
        "qwen3moe-tiny", "auto_round", "gptq-int4",
        {"checkpoint_format": "gptq", "group_size": 32, "sym": True, "act_order": False},
        notes="quant_method auto-round (AutoRound's default export), packing_format "
              "auto_round:auto_gptq: qweight int32 [K/8, N], qzeros v1 (zero - 1 stored: "
              "0x77777777), scales fp16 [K/g, N], no g_idx; signed scales (half negative)"),
    "autoround-gptq-qwen3moe": Job(
        "qwen3moe-tiny", "auto_gptq", "gptq-int4",
        {"checkpoint_format": "gptq", "group_size": 32, "sym": True, "act_order": False},
        notes="AutoRound's auto_gptq export: GPTQ v1 layout, quant_method gptq; signed "
              "scales (about half negative)"),
}


def _texts() -> list[str]:
    """The calibration set as text of the tiny word-level tokenizer (ids 4.. are w0..)."""
    return [" ".join(f"w{int(i) - 4}" for i in row) for row in calibration_ids()]


def produce(name: str, out_root: Path) -> float:
    """Quantize fixture `name` into `out_root/name`; returns the seconds quantize took."""
    from auto_round import AutoRound
    from transformers import AutoModelForCausalLM, AutoTokenizer

    job = JOBS[name]
    with tempfile.TemporaryDirectory(prefix=f"moecert-{name}-") as tmp:
        base = make_model(job.model, Path(tmp) / "base")
        model = AutoModelForCausalLM.from_pretrained(base, dtype="auto")
        tokenizer = AutoTokenizer.from_pretrained(base)
        texts = _texts()
        t0 = time.perf_counter()
        ar = AutoRound(model, tokenizer, bits=4, group_size=32, sym=True, iters=ITERS,
                       nsamples=len(texts), seqlen=len(texts[0].split()), batch_size=4,
                       dataset=texts, device_map="cpu", seed=0)
        out = Path(tmp) / "out"
        ar.quantize_and_save(str(out), format=job.format)
        seconds = time.perf_counter() - t0
        # AutoRound writes into a subfolder named after the model and scheme
        out = next(p.parent for p in out.rglob("config.json"))
        finish(out_root, name, out, producer="auto-round", env="autoround",
               packages=("auto-round",), scheme=job.scheme, variant=job.variant,
               model=job.model, how=f"quantized by AutoRound (iters={ITERS}, sym, group 32), "
               f"written by its quantize_and_save(format={job.format!r})", notes=job.notes)
    return seconds


def main(argv: list[str] | None = None) -> int:
    return producer_main(__doc__, JOBS, produce, argv)


if __name__ == "__main__":
    sys.exit(main())
