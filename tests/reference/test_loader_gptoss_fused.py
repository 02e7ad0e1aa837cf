"""A gpt-oss bf16 folder (transformers' GptOssExperts layout: fused `gate_up_proj` [E, in, 2N]
and `down_proj` [E, N, in], stored inputs first) reads as written whatever the sizes. The real
models' down_proj is square (gpt-oss-20b / 120b: hidden 2880 = intermediate 2880): a reader
that tells the orientation from the shape takes it as stored (outputs first) and reads every
expert's down projection transposed (the same bug: NVIDIA-NeMo/Megatron-Bridge PR #3743)."""

from __future__ import annotations

import json

import pytest
import torch
from moecert.reference import MoEProblem, load_checkpoint, synthesize
from safetensors.torch import save_file


@pytest.mark.parametrize("K,N", [(128, 128), (128, 64), (128, 96)],
                         ids=["down-square", "gate_up-square", "no-square"])
def test_gpt_oss_bf16_fused_experts_read_as_written(tmp_path, K, N):
    P = MoEProblem(M=1, K=K, N=N, E=3, topk=2, bias=True, activation="swigluoai")
    ckpt = synthesize("bf16", P, seed=5)
    t = ckpt.tensors
    prefix = "model.layers.0.mlp.experts."
    save_file({prefix + "gate_up_proj": t["w13_weight"].transpose(1, 2).contiguous(),
               prefix + "gate_up_proj_bias": t["w13_bias"],
               prefix + "down_proj": t["w2_weight"].transpose(1, 2).contiguous(),
               prefix + "down_proj_bias": t["w2_bias"],
               "model.layers.0.mlp.router.weight": torch.randn(3, K).bfloat16(),
               "model.layers.0.mlp.router.bias": torch.randn(3).bfloat16()},
              str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps({
        "model_type": "gpt_oss", "architectures": ["GptOssForCausalLM"], "hidden_size": K,
        "intermediate_size": N, "num_local_experts": 3, "num_experts_per_tok": 2,
        "num_hidden_layers": 1, "dtype": "bfloat16"}))
    read = load_checkpoint(tmp_path, 0).checkpoint
    for name, want in t.items():
        assert torch.equal(read.tensors[name], want), name
