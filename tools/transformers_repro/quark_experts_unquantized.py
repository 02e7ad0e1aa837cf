"""QuarkHfQuantizer leaves a MoE model's fused experts unquantized: int8 experts hold raw codes with their scales unread, MXFP6 experts fail to load (transformers 5.24.0, amd-quark 0.13).

An AMD Quark file of a Qwen3-MoE model stores each expert as Quark quantizes an nn.Linear
(`experts.{e}.{gate,up,down}_proj.weight` plus `weight_scale`, `weight_zero_point`,
`input_scale`, ...). transformers 5 holds the experts fused (`Qwen3MoeExperts.gate_up_proj`
[E, 2I, H], `down_proj` [E, H, I]: 3-D parameters, no nn.Linear). `QuarkHfQuantizer.
_process_model_before_weight_loading` (quantizers/quantizer_quark.py lines 61-72) calls
Quark's `_map_to_quark`, which replaces nn.Linear modules only (quark/torch/export/api.py:
`isinstance(float_module, nn.Linear)`), and never calls Quark's own preparation for fused
experts (`quark.torch.utils.llm.model_preparation.preprocess_for_quantization(model,
reload=True)`: "fused params -> per-expert nn.Linear"). Its `get_weight_conversions` (lines
80-84) only renames `weight_scale` -> `weight_quantizer.scale` etc. So the per-expert codes go
through the model's own conversion mapping (merged and concatenated into `gate_up_proj`),
the base `HfQuantizer.get_new_dtype` keeps a non-float checkpoint tensor's dtype, and:

- int8 (per-channel or per-tensor): the experts hold the raw int8 codes, every scale and zero
  point is an UNEXPECTED key of the load report; the first forward raises a dtype error.
- OCP MXFP6 (fp6_e2m3 / fp6_e3m2, 6-bit codes packed 4 per 3 bytes): the packed uint8
  [., K*3/4] tensors do not fit [., K]: from_pretrained raises (size MISMATCH).

In Quark's own files (tests/fixtures/checkpoints/quark-*-qwen3moe) the attention projections
load as Quark's QParamsLinear (quantized): only the experts are missed.

Expected: the experts dequantized or quantized with their scales (as Quark's reload
preparation does), or the load refused naming the experts. Found (transformers 5.24.0,
amd-quark 0.13, torch 2.13.0+cpu): int8: experts' gate_up_proj dtype int8, 12 expert scale /
zero-point tensors unread (2 experts x 3 projections), forward: RuntimeError "Expected mat_a
to be Float32, BFloat16 or Float16 matrix, got Char" (transformers' default experts
implementation here, grouped_mm; eager: "expected m1 and m2 to have the same dtype, but got:
c10::BFloat16 != signed char"); mxfp6: RuntimeError "You set
`ignore_mismatched_sizes` to `False`, thus raising an error" (gate_up_proj ckpt [2, 256, 96]
vs model [2, 256, 128]).

Upstream (searched 2026-11-28, transformers and amd-quark trackers): none found for Quark;
the same gap for other quantizers: transformers PR #42654 (FP8 experts replacing, merged),
bitsandbytes issue #1849 (fused experts silently left 16-bit).

    python tools/transformers_repro/quark_experts_unquantized.py   # torch, transformers and
                                              # amd-quark==0.13 (QuarkHfQuantizer needs it):
                                              # tox -e transformers-quark --notest
"""

import json
import tempfile
from pathlib import Path

import torch
import transformers

E, K, N = 2, 128, 128


def folder(quantization_config: dict, tensors: dict) -> Path:
    """A one-layer Qwen3-MoE folder holding only the layer's expert tensors (the model's other
    modules excluded from quantization, initialized by transformers)."""
    config = {"model_type": "qwen3_moe", "architectures": ["Qwen3MoeForCausalLM"],
              "hidden_size": K, "moe_intermediate_size": N, "intermediate_size": N,
              "num_experts": E, "num_experts_per_tok": 1, "num_hidden_layers": 1,
              "num_attention_heads": 1, "num_key_value_heads": 1, "head_dim": 16,
              "vocab_size": 8, "mlp_only_layers": [], "decoder_sparse_step": 1,
              "dtype": "bfloat16", "quantization_config": quantization_config}
    path = Path(tempfile.mkdtemp())
    (path / "config.json").write_text(json.dumps(config))
    torch.save(tensors, path / "pytorch_model.bin")
    return path


def spec(dtype: str, qscheme: str, **extra) -> dict:
    """One Quark QuantizationSpec as Quark 0.13 exports it."""
    return {"dtype": dtype, "qscheme": qscheme, "ch_axis": None, "group_size": None,
            "symmetric": True, "is_dynamic": False, "round_method": "half_even",
            "scale_type": "float", "zero_point_type": "int32", **extra}


def quark_config(weight: dict) -> dict:
    return {"quant_method": "quark", "version": "0.13", "quant_mode": "eager_mode",
            "global_quant_config": {"weight": weight, "input_tensors": None,
                                    "output_tensors": None, "bias": None},
            "layer_quant_config": {}, "layer_type_quant_config": {},
            "exclude": ["*lm_head*", "*self_attn*", "*mlp.gate"],
            "export": {"pack_method": "reorder", "weight_format": "real_quantized",
                       "kv_cache_group": [], "min_kv_scale": 0.0}}


def experts(make) -> dict:
    tensors = {}
    for e in range(E):
        for proj, shape in (("gate_proj", (N, K)), ("up_proj", (N, K)), ("down_proj", (K, N))):
            for suffix, t in make(*shape, e).items():
                tensors[f"model.layers.0.mlp.experts.{e}.{proj}.{suffix}"] = t
    return tensors


def main():
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    g = torch.Generator().manual_seed(0)

    # int8, per-channel weights (Quark's W8A8 int8 template, weights part)
    int8 = experts(lambda out, inp, e: {
        "weight": torch.randint(-127, 128, (out, inp), generator=g, dtype=torch.int8),
        "weight_scale": (0.01 + 0.001 * e + torch.rand(out, generator=g) * 1e-3).bfloat16(),
        "weight_zero_point": torch.zeros(out, dtype=torch.int8)})
    qc = quark_config(spec("int8", "per_channel", ch_axis=0,
                           observer_cls="PerChannelMinMaxObserver"))
    model, info = transformers.AutoModelForCausalLM.from_pretrained(
        folder(qc, int8), dtype=torch.bfloat16, output_loading_info=True)
    layer = model.model.layers[0]
    unread = sorted(k for k in info["unexpected_keys"] if ".experts." in k)
    print(f"quantizer: {type(model.hf_quantizer).__name__}; experts: "
          f"{type(layer.mlp.experts).__name__}")
    print(f"int8: expert tensors left unread: {len(unread)} (e.g. {unread[:2]})")
    print(f"int8: experts' gate_up_proj dtype: {layer.mlp.experts.gate_up_proj.dtype}")
    x = torch.randn(3, K, generator=g).bfloat16()
    try:
        layer.mlp.experts(x, torch.zeros(3, 1, dtype=torch.long), torch.ones(3, 1))
        print("int8: forward ran")
    except RuntimeError as e:
        print(f"BUG: int8 experts: forward raised RuntimeError: {e}")

    # OCP MXFP6 e2m3, weight-only, group 32: 6-bit codes packed 4 per 3 bytes, e8m0 scales
    mxfp6 = experts(lambda out, inp, e: {
        "weight": torch.randint(0, 256, (out, inp * 3 // 4), generator=g, dtype=torch.uint8),
        "weight_scale": torch.randint(120, 130, (out, inp // 32), generator=g,
                                      dtype=torch.uint8)})
    qc = quark_config(spec("fp6_e2m3", "per_group", ch_axis=-1, group_size=32,
                           symmetric=None, scale_format="e8m0",
                           scale_calculation_mode="even",
                           observer_cls="PerBlockMXObserver"))
    try:
        transformers.AutoModelForCausalLM.from_pretrained(folder(qc, mxfp6),
                                                          dtype=torch.bfloat16)
        print("mxfp6: loaded")
    except RuntimeError as e:
        print(f"BUG: mxfp6 experts: from_pretrained raised RuntimeError: "
              f"{str(e).splitlines()[0]}")


if __name__ == "__main__":
    main()
