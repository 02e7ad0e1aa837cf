"""A Mixtral checkpoint whose experts are named gate_proj / up_proj / down_proj (as
llm-compressor 0.14 on transformers 5.17 saved it) loads with its experts left unread and
uninitialized, silently (transformers 5.24.0).

The llm-compressor fixture tests/fixtures/checkpoints/ct-w4a16-sym-mixtral-sharded (made with
llm-compressor 0.14.0.1 and transformers 5.17.0) names every expert tensor
`model.layers.L.block_sparse_moe.experts.e.{gate_proj,up_proj,down_proj}.*`. transformers
5.24's Mixtral conversion mapping fuses only the original Mixtral names (`w1`, `w3`, `w2`)
into `mlp.experts.gate_up_proj` / `down_proj`: every expert tensor of the file is an
UNEXPECTED key of the load report, gate_up_proj and down_proj are MISSING and keep
transformers' initialization, and from_pretrained returns without an error. Not specific to
compressed-tensors: the same names in bf16 are left unread too.

Expected: MixtralExperts.gate_up_proj / down_proj read (decompressed) from the file, or the
load refused. Found (transformers 5.24.0, compressed-tensors 0.20.0, torch 2.13.0+cpu): the
counts printed below; moecert on the fixture: rel_fro 1.0, cosine ~0 against the file's layer.

    python tools/transformers_repro/mixtral_experts_unread.py     # torch and transformers only
                                              # (+ compressed-tensors, which transformers'
                                              #  compressed-tensors quantizer needs)
"""

import json
import tempfile
from pathlib import Path

import torch
import transformers

E, K, N = 2, 256, 128


def folder(quantization_config: dict, tensors: dict, architecture="Qwen3MoeForCausalLM",
           model_type="qwen3_moe") -> Path:
    """A one-layer MoE model folder holding only the layer's expert tensors (the model's
    other modules excluded from quantization, initialized by transformers)."""
    config = {"model_type": model_type, "architectures": [architecture], "hidden_size": K,
              "moe_intermediate_size": N, "intermediate_size": N, "num_experts": E,
              "num_local_experts": E, "num_experts_per_tok": 1, "num_hidden_layers": 1,
              "num_attention_heads": 1, "num_key_value_heads": 1, "head_dim": 16,
              "vocab_size": 8, "mlp_only_layers": [], "decoder_sparse_step": 1,
              "dtype": "bfloat16", "quantization_config": quantization_config}
    path = Path(tempfile.mkdtemp())
    (path / "config.json").write_text(json.dumps(config))
    torch.save(tensors, path / "pytorch_model.bin")
    return path


def ct_config(fmt: str, weights: dict, inputs: dict | None = None) -> dict:
    """llm-compressor's quantization_config (one group, Linear targets)."""
    return {"quant_method": "compressed-tensors", "format": fmt,
            "quantization_status": "compressed",
            "config_groups": {"group_0": {"targets": ["Linear"], "format": fmt,
                                          "weights": weights, "input_activations": inputs}},
            "ignore": ["lm_head", "re:.*self_attn.*", "re:.*mlp[.]gate$"]}


def load(path: Path):
    return transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16)


def header():
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")


def main():
    header()
    g = torch.Generator().manual_seed(0)
    G = 32
    tensors = {}
    for e in range(E):
        for proj, (o, i) in (("gate_proj", (N, K)), ("up_proj", (N, K)), ("down_proj", (K, N))):
            name = f"model.layers.0.block_sparse_moe.experts.{e}.{proj}"
            tensors[f"{name}.weight_packed"] = torch.randint(-2**31, 2**31 - 1, (o, i // 8),
                                                             generator=g, dtype=torch.int32)
            tensors[f"{name}.weight_scale"] = ((torch.rand(o, i // G, generator=g) + 0.5)
                                               / 100).bfloat16()
            tensors[f"{name}.weight_shape"] = torch.tensor([o, i])
    args = {"num_bits": 4, "type": "int", "symmetric": True, "strategy": "group",
            "group_size": G, "dynamic": False}
    qc = ct_config("pack-quantized", args)
    qc["ignore"] = ["lm_head", "re:.*self_attn.*", "re:.*block_sparse_moe[.]gate$"]
    model, info = transformers.AutoModelForCausalLM.from_pretrained(
        folder(qc, tensors, "MixtralForCausalLM", "mixtral"), dtype=torch.bfloat16,
        output_loading_info=True)
    unread = [k for k in info["unexpected_keys"] if ".experts." in k]
    missing = [k for k in info["missing_keys"] if ".experts." in k]
    print(f"{type(model.model.layers[0].mlp.experts).__name__}: expert tensors of the file left "
          f"unread: {len(unread)} of {len(tensors)}; expert parameters missing: {missing}")
    print("BUG: the experts keep their initialization" if missing else "ok")


if __name__ == "__main__":
    main()
