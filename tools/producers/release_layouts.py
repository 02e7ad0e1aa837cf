"""Fixtures in the layout of two model releases that no producer can write on a CPU.

    python tools/producers/release_layouts.py [--out DIR] [--only NAME ...]

- gpt-oss MXFP4 (the layout of openai/gpt-oss-*): transformers reads it (`Mxfp4Config`) but
  its quantizer needs OpenAI's triton_kernels from the kernel hub and a GPU, so this script
  writes the file by the format's definition: OCP MX v1.0 (blocks of 32 along the input,
  E8M0 shared exponent floor(log2(amax)) - 2, E2M1 elements rounded to nearest even and
  saturated at 6), two elements per byte with element 2j in the low nibble, expert tensors
  fused as `gate_up_proj_{blocks,scales,bias}` [E, 2I, ...] with gate and up interleaved by
  row (row 2j gate j, row 2j+1 up j: transformers' bf16 `gate_up_proj [E, H, 2I]` transposed)
  and `down_proj_{blocks,scales,bias}`; biases, attention and router stay bf16.
- DeepSeek-V3 native FP8 (the layout of deepseek-ai/DeepSeek-V3): written the way DeepSeek's
  release stores it: every linear weight of the decoder layers but the router (`mlp.gate`)
  in float8_e4m3fn with `weight_scale_inv` fp32 [ceil(N/128), ceil(K/128)], one per 128x128
  block, w = e4m3 * scale_inv, scale_inv = amax(block) / 448; `e_score_correction_bias` fp32.

The manifest says of both: "written by moecert's script, layout of the release". The check
script (`decompress_reference.py`) dequantizes them with transformers' own readers.
Environment: the llm-compressor one (torch 2.13.0, transformers 5.17); no producer package.
"""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).parent))

import torch
from fixture_io import finish, producer_main
from tiny_models import make_model

HOW = "written by moecert's script, layout of the release"
E2M1_GRID = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)  # code 0..7 (sign is bit 3)
E2M1_EMAX = 2  # exponent of the largest normal, 6 = 1.5 * 2^2
E8M0_BIAS = 127
FP8_MAX = 448.0
BLOCK = 128


def _e2m1_codes(x: torch.Tensor) -> torch.Tensor:
    """E2M1 codes (uint8, 0..15) of fp32 `x`: nearest grid value, ties to the even code,
    magnitudes above 6 saturate to 6."""
    grid = torch.tensor(E2M1_GRID, dtype=torch.float32)
    a = x.abs().clamp(max=E2M1_GRID[-1]).contiguous()
    lo = (torch.searchsorted(grid, a, right=True) - 1).clamp(0, len(grid) - 1)
    hi = (lo + 1).clamp(max=len(grid) - 1)
    d_lo, d_hi = a - grid[lo], grid[hi] - a
    pick_hi = (d_hi < d_lo) | ((d_hi == d_lo) & (hi % 2 == 0) & (hi != lo))
    code = torch.where(pick_hi, hi, lo).to(torch.uint8)
    return code | ((x < 0) & (code != 0)).to(torch.uint8) << 3


def mxfp4_quantize(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[..., R, C] float -> blocks uint8 [..., R, C/32, 16], scales uint8 E8M0 [..., R, C/32]."""
    *lead, rows, cols = w.shape
    x = w.float().reshape(*lead, rows, cols // 32, 32)
    amax = x.abs().amax(dim=-1)
    exp = torch.floor(torch.log2(amax.clamp(min=2.0**-126))) - E2M1_EMAX
    exp = exp.clamp(-E8M0_BIAS, E8M0_BIAS)
    codes = _e2m1_codes(x / torch.exp2(exp)[..., None])
    blocks = codes[..., 0::2] | (codes[..., 1::2] << 4)
    return blocks.contiguous(), (exp + E8M0_BIAS).to(torch.uint8)


def fp8_block_quantize(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[N, K] float -> e4m3 [N, K], scale_inv fp32 [ceil(N/128), ceil(K/128)] (w = q * s)."""
    n, k = w.shape
    bn, bk = math.ceil(n / BLOCK), math.ceil(k / BLOCK)
    padded = torch.zeros(bn * BLOCK, bk * BLOCK, dtype=torch.float32)
    padded[:n, :k] = w.float()
    blocks = padded.reshape(bn, BLOCK, bk, BLOCK)
    scale = blocks.abs().amax(dim=(1, 3)) / FP8_MAX
    scale = torch.where(scale == 0, torch.ones_like(scale), scale)
    q = (blocks / scale[:, None, :, None]).clamp(-FP8_MAX, FP8_MAX)
    q = q.reshape(bn * BLOCK, bk * BLOCK)[:n, :k].to(torch.float8_e4m3fn)
    return q.contiguous(), scale.contiguous()


def _load(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(folder / "model.safetensors")


def _write(folder: Path, tensors: dict[str, torch.Tensor], quantization_config: dict) -> None:
    from safetensors.torch import save_file

    config = json.loads((folder / "config.json").read_text())
    config["quantization_config"] = quantization_config
    (folder / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    save_file(dict(sorted(tensors.items())), folder / "model.safetensors",
              metadata={"format": "pt"})


def write_gptoss_mxfp4(base: Path) -> None:
    """Rewrite bf16 gpt-oss folder `base` in place in the release's MXFP4 layout."""
    tensors = _load(base)
    out = {}
    for name, t in tensors.items():
        if name.endswith("mlp.experts.gate_up_proj") or name.endswith("mlp.experts.down_proj"):
            # transformers keeps [E, in, out]; the release stores rows = outputs
            blocks, scales = mxfp4_quantize(t.transpose(1, 2))
            out[f"{name}_blocks"], out[f"{name}_scales"] = blocks, scales
        else:
            out[name] = t
    _write(base, out, {"quant_method": "mxfp4",
                       "modules_to_not_convert": ["model.layers.*.self_attn",
                                                  "model.layers.*.mlp.router",
                                                  "model.embed_tokens", "lm_head"]})


def write_deepseek_fp8(base: Path) -> None:
    """Rewrite bf16 DeepSeek-V3 folder `base` in place in the release's FP8 layout."""
    tensors = _load(base)
    out = {}
    for name, t in tensors.items():
        linear = (name.startswith("model.layers.") and name.endswith(".weight") and t.dim() == 2
                  and not name.endswith("mlp.gate.weight"))
        if linear:
            q, s = fp8_block_quantize(t)
            out[name], out[name.removesuffix("weight") + "weight_scale_inv"] = q, s
        elif name.endswith("e_score_correction_bias"):
            out[name] = t.float()
        else:
            out[name] = t
    _write(base, out, {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                       "weight_block_size": [BLOCK, BLOCK]})


JOBS = {
    "gptoss-mxfp4-release": ("gptoss-small", write_gptoss_mxfp4, "mxfp4",
                             {"group_size": 32, "activation": "none"},
                             "fused gate_up_proj_{blocks,scales,bias}, gate/up interleaved by "
                             "row, biases bf16, swigluoai"),
    "deepseekv3-fp8-release": ("deepseekv3-block", write_deepseek_fp8, "fp8-w8a8",
                               {"weight_strategy": "block", "activation": "dynamic-group"},
                               "weight_scale_inv fp32 per 128x128 block; layer 0 dense, one "
                               "shared expert (not routed), e_score_correction_bias fp32"),
}


def produce(name: str, out_root: Path) -> None:
    model, write, scheme, variant, notes = JOBS[name]
    with tempfile.TemporaryDirectory(prefix=f"moecert-{name}-") as tmp:
        base = make_model(model, Path(tmp) / "base")
        write(base)
        finish(out_root, name, base, producer="moecert", env="llmc", packages=(),
               scheme=scheme, variant=variant, model=model, how=HOW, notes=notes)


def main(argv: list[str] | None = None) -> int:
    return producer_main(__doc__, JOBS, produce, argv)


if __name__ == "__main__":
    sys.exit(main())
