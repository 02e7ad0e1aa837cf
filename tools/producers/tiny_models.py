"""Tiny MoE models from a fixed seed, a word-level tokenizer and a made-up calibration set.

The one place that says what each fixture's base model is. Every producer script starts from
`make_model(name, folder)`: transformers builds the model from its config with a seeded
initialization (weights are redrawn from `SEED` so that they do not depend on transformers'
init order), saves it in bf16 with a tiny tokenizer, and the producer quantizes that folder.

Two decoder layers each. Where the family allows it, layer 0 is dense (Qwen3-MoE
`mlp_only_layers`, DeepSeek `first_k_dense_replace`): a layer with no routed experts is test
data too, and it saves bytes. Shapes are kept small because the fixtures are committed
(each well under 1 MB): "wide" models have K, N >= 256, "block" models several 128x128 FP8
blocks, "small" models 8 experts at K = 128.

Runs offline (HF_HUB_OFFLINE=1) on the CPU with transformers only; no producer package.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

SEED = 20261126
VOCAB = 64  # words "w0".."w59" plus 4 special tokens
CALIB_SAMPLES = 16
CALIB_TOKENS = 32


@dataclass(frozen=True)
class TinyModel:
    """A base model: its transformers family and shape (`config` holds the config's own keys)."""

    family: str  # transformers model_type
    E: int  # routed experts
    K: int  # hidden size
    N: int  # routed expert intermediate size
    topk: int
    config: dict = field(default_factory=dict)  # further config keys (attention, dense layers)


_ATTN = {"num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32}
_TINY = {"num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16,
         "num_hidden_layers": 1}

MODELS: dict[str, TinyModel] = {
    # 8 experts at K = 128: the default for formats whose bytes grow with the element width
    "qwen3moe-small": TinyModel("qwen3_moe", E=8, K=128, N=64, topk=2,
                                config={"mlp_only_layers": [0], "intermediate_size": 128,
                                        **_ATTN}),
    # K, N >= 256: group 32 act-order has 8 groups along K and a real permutation
    "qwen3moe-wide": TinyModel("qwen3_moe", E=4, K=256, N=256, topk=2,
                               config={"mlp_only_layers": [0], "intermediate_size": 128,
                                       **_ATTN}),
    # several 128x128 FP8 blocks per expert linear (w13: 2x2, w2: 2x1); 4 heads so that
    # o_proj's input (128) holds whole groups of 128 (W4AFP8)
    "qwen3moe-block": TinyModel("qwen3_moe", E=4, K=256, N=128, topk=2,
                                config={"mlp_only_layers": [0], "intermediate_size": 128,
                                        **_ATTN, "num_attention_heads": 4}),
    # every layer MoE: GPTQModel 7.7.0 expects experts in every decoder layer ("layer module
    # item `mlp.experts.0.gate_proj` not found in model" on a dense layer 0); 2 KV heads, as
    # its AWQ clip search needs output widths that are multiples of 64
    "qwen3moe-small-allmoe": TinyModel("qwen3_moe", E=8, K=128, N=64, topk=2,
                                       config={**_ATTN, "num_key_value_heads": 2}),
    "qwen3moe-wide-allmoe": TinyModel("qwen3_moe", E=4, K=256, N=256, topk=2,
                                      config={**_ATTN, "num_hidden_layers": 1}),
    # one decoder layer, all MoE (the NVFP4 W4A4 regression fixtures, kept small): 16 experts
    # (some see few calibration tokens), 8 experts, Mixtral's names
    "qwen3moe-e16-1layer": TinyModel("qwen3_moe", E=16, K=128, N=32, topk=2,
                                     config={**_ATTN, "num_hidden_layers": 1}),
    "qwen3moe-1layer": TinyModel("qwen3_moe", E=8, K=128, N=64, topk=2,
                                 config={**_ATTN, "num_hidden_layers": 1}),
    "mixtral-1layer": TinyModel("mixtral", E=4, K=128, N=64, topk=2,
                                config={"num_hidden_layers": 1}),
    "mixtral-small": TinyModel("mixtral", E=4, K=128, N=64, topk=2),
    # one decoder layer, 4 experts, 16-wide heads: the int4 producers of issue 42 (AutoRound,
    # Quark int4, ModelOpt INT4 AWQ), a few tens of KB each; N = 128 and o_proj's input 128
    # where a preset's groups of 128 must fit every linear's input (ModelOpt's AWQ export
    # refuses partial blocks)
    "qwen3moe-tiny": TinyModel("qwen3_moe", E=4, K=128, N=64, topk=2, config=_TINY),
    "qwen3moe-tiny-n128": TinyModel("qwen3_moe", E=4, K=128, N=128, topk=2,
                                    config={**_TINY, "head_dim": 64}),
    # gpt-oss: biases on every expert linear, swigluoai; its attention has sinks
    "gptoss-small": TinyModel("gpt_oss", E=4, K=128, N=128, topk=2,
                              config={"layer_types": ["sliding_attention", "full_attention"],
                                      "sliding_window": 32}),
    # DeepSeek-V3: dense first layer, one shared expert, grouped routing with correction bias
    "deepseekv3-block": TinyModel("deepseek_v3", E=4, K=256, N=128, topk=2,
                                  config={"first_k_dense_replace": 1, "intermediate_size": 128,
                                          "n_shared_experts": 1, "n_group": 2, "topk_group": 1,
                                          "q_lora_rank": 32, "kv_lora_rank": 32,
                                          "qk_rope_head_dim": 16, "qk_nope_head_dim": 16,
                                          "v_head_dim": 32, "num_attention_heads": 2,
                                          "num_key_value_heads": 2,
                                          "rope_parameters": {"rope_type": "default",
                                                              "rope_theta": 10000.0}}),
    # DeepSeek-V3 with three decoder layers: dense layer 0, two MoE layers with a shared
    # expert each (a sharded folder with several MoE layers and a dense first layer)
    "deepseekv3-small": TinyModel("deepseek_v3", E=4, K=128, N=64, topk=2,
                                  config={"first_k_dense_replace": 1, "intermediate_size": 128,
                                          "num_hidden_layers": 3, "n_shared_experts": 1,
                                          "n_group": 2, "topk_group": 1, "q_lora_rank": 32,
                                          "kv_lora_rank": 32, "qk_rope_head_dim": 16,
                                          "qk_nope_head_dim": 16, "v_head_dim": 32,
                                          "num_attention_heads": 2, "num_key_value_heads": 2,
                                          "rope_parameters": {"rope_type": "default",
                                                              "rope_theta": 10000.0}}),
}


def build_config(name: str):
    """The transformers config of base model `name`."""
    import transformers

    m = MODELS[name]
    common = {"vocab_size": VOCAB, "hidden_size": m.K, "num_hidden_layers": 2,
              "num_experts_per_tok": m.topk, "max_position_embeddings": 128,
              "tie_word_embeddings": True, "bos_token_id": 1, "eos_token_id": 2,
              "pad_token_id": 0}
    if m.family == "qwen3_moe":
        cls = transformers.Qwen3MoeConfig
        shape = {"num_experts": m.E, "moe_intermediate_size": m.N}
    elif m.family == "mixtral":
        cls = transformers.MixtralConfig
        shape = {"num_local_experts": m.E, "intermediate_size": m.N, **_ATTN}
    elif m.family == "gpt_oss":
        cls = transformers.GptOssConfig
        shape = {"num_local_experts": m.E, "intermediate_size": m.N, **_ATTN}
    elif m.family == "deepseek_v3":
        cls = transformers.DeepseekV3Config
        shape = {"n_routed_experts": m.E, "moe_intermediate_size": m.N}
    else:
        raise ValueError(f"tiny_models: unknown family {m.family!r} of model {name!r}")
    return cls(**{**common, **shape, **m.config})


def _redraw(model: torch.nn.Module) -> None:
    """Draw every parameter again from one seeded generator, in name order, so that the
    weights depend only on SEED and the shapes (not on transformers' init code). Weights are
    N(0, 0.05^2) (the 0.02 of most inits makes int4 scales tiny), norms near 1, biases
    non-zero, router correction biases small."""
    gen = torch.Generator().manual_seed(SEED)
    for pname, p in sorted(model.named_parameters()):
        with torch.no_grad():
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            if "norm" in pname and p.dim() == 1:
                value = 1.0 + 0.1 * noise
            elif pname.endswith("bias") or "bias" in pname.rsplit(".", 1)[-1]:
                value = 0.02 * noise
            elif pname.endswith("sinks"):
                value = noise
            else:
                value = 0.05 * noise
            p.copy_(value.to(p.dtype))
    for bname, b in sorted(model.named_buffers()):
        if bname.endswith("e_score_correction_bias"):
            b.copy_(0.01 * torch.randn(b.shape, generator=gen).to(b.dtype))


def save_tokenizer(folder: Path) -> None:
    """A word-level tokenizer ("w0".."w59"): some producers load one from the model folder."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "<s>", "</s>", "<unk>"]
    vocab = {t: i for i, t in enumerate(specials + [f"w{i}" for i in range(VOCAB - 4)])}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<s>",
                                   eos_token="</s>", unk_token="<unk>")
    fast.save_pretrained(folder)


def make_model(name: str, folder: str | Path) -> Path:
    """Build base model `name`, save it (bf16, one file) with a tokenizer into `folder`."""
    import transformers

    folder = Path(folder)
    torch.manual_seed(SEED)
    config = build_config(name)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    _redraw(model)
    model.save_pretrained(folder)
    save_tokenizer(folder)
    return folder


def calibration_ids(seed: int = SEED) -> torch.Tensor:
    """The made-up calibration set: random token ids [CALIB_SAMPLES, CALIB_TOKENS]."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(4, VOCAB, (CALIB_SAMPLES, CALIB_TOKENS), generator=gen)


def calibration_dataset():
    """The calibration set as a `datasets.Dataset` of input_ids / attention_mask rows."""
    import datasets

    ids = calibration_ids()
    return datasets.Dataset.from_dict({"input_ids": ids.tolist(),
                                       "attention_mask": torch.ones_like(ids).tolist()})


if __name__ == "__main__":
    import sys

    for arg in sys.argv[1:]:
        print(make_model(arg, Path("/tmp/tiny") / arg))
