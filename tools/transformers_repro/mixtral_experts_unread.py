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

import torch
import transformers
from _folder import E, K, N, ct_config, folder, header


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
