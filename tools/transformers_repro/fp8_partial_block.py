"""FineGrainedFP8 dequantizes a block-fp8 expert whose input size is not a multiple of the
128-wide block with the wrong block width (transformers 5.24.0, CPU: the quantizer
dequantizes to bf16 at load).

A DeepSeek-V3-style file (quant_method "fp8", weight_block_size [128, 128], weight_scale_inv
per 128x128 block, the last block partial) for a Qwen3-MoE layer with hidden_size 160: each
expert's gate/up weight is [N, 160] with scales [ceil(N/128), ceil(160/128)] = [1, 2].
`Fp8Dequantize._dequantize_one` (integrations/finegrained_fp8.py, lines 1144-1154) derives
the block from the scale grid, block_n = 160 // 2 = 80, instead of the config's 128: columns
80..127 take the second block's scale.

    python tools/transformers_repro/fp8_partial_block.py     # torch and transformers only

Expected: the loaded gate_up_proj equals the file's fp8 codes times their 128x128 block's
scale (rounded to bf16). Found (transformers 5.24.0, torch 2.13.0+cpu): columns 80..127 of
every row are scaled by the second block's scale; max relative error of the weights 0.472
(printed below), and the layer's output is off by rel_fro ~0.1 (moecert: fp8-w8a8 block
K=160).
"""

import json
import tempfile
from pathlib import Path

import torch
import transformers

E, K, N, BLOCK = 2, 160, 128, 128


def main():
    g = torch.Generator().manual_seed(0)
    codes, scales, tensors = {}, {}, {}
    for e in range(E):
        for proj, (rows, cols) in (("gate_proj", (N, K)), ("up_proj", (N, K)),
                                   ("down_proj", (K, N))):
            w = (torch.randn(rows, cols, generator=g) * 2).to(torch.float8_e4m3fn)
            s = torch.rand(-(-rows // BLOCK), -(-cols // BLOCK), generator=g) + 0.5
            name = f"model.layers.0.mlp.experts.{e}.{proj}"
            tensors[f"{name}.weight"], tensors[f"{name}.weight_scale_inv"] = w, s
            codes[e, proj], scales[e, proj] = w, s
    config = {"model_type": "qwen3_moe", "architectures": ["Qwen3MoeForCausalLM"],
              "hidden_size": K, "moe_intermediate_size": N, "intermediate_size": N,
              "num_experts": E, "num_experts_per_tok": 1, "num_hidden_layers": 1,
              "num_attention_heads": 1, "num_key_value_heads": 1, "head_dim": 16,
              "vocab_size": 8, "mlp_only_layers": [], "decoder_sparse_step": 1,
              "dtype": "bfloat16",
              "quantization_config": {"quant_method": "fp8", "fmt": "e4m3",
                                      "activation_scheme": "dynamic",
                                      "weight_block_size": [BLOCK, BLOCK],
                                      "modules_to_not_convert": ["lm_head", "self_attn",
                                                                 "mlp.gate"]}}
    folder = Path(tempfile.mkdtemp())
    (folder / "config.json").write_text(json.dumps(config))
    torch.save(tensors, folder / "pytorch_model.bin")
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16)
    got = model.model.layers[0].mlp.experts.gate_up_proj[0, :N].float()  # expert 0's gate
    want = _blockwise(codes[0, "gate_proj"], scales[0, "gate_proj"]).bfloat16().float()
    err = ((got - want).abs() / want.abs().clamp_min(1e-3)).amax(dim=0)
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    print(f"max relative weight error, columns 0..79:   {err[:80].max():.3g}")
    print(f"max relative weight error, columns 80..127: {err[80:128].max():.3g}")
    print(f"max relative weight error, columns 128..159: {err[128:].max():.3g}")
    print("BUG: columns 80..127 take the second block's scale" if err[80:128].max() > 1e-2
          else "ok: every column takes its own 128-wide block's scale")


def _blockwise(w: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """fp8 codes times the scale of their 128x128 block (the last block partial)."""
    full = s.repeat_interleave(BLOCK, 0).repeat_interleave(BLOCK, 1)[:w.shape[0], :w.shape[1]]
    return w.to(torch.float64) * full.to(torch.float64)


if __name__ == "__main__":
    main()
