"""Model folders built by hand from the producers' published formats, with the weights and
scales each must read as written out here (not synthesized by moecert, nor compared with a
backend):

- Mixtral (transformers' MixtralBlockSparseTop2MLP): w1 is the gate projection, w3 the up
  projection, w2 the down projection; w13 holds the gate rows first.
- compressed-tensors FP8 with static per-tensor activations: gate and up each carry an
  input_scale; engines keep one per expert, the larger of the two (vLLM's
  `process_weights_after_loading`: w13_input_scale.max(dim=1)), and so does the loader.
- ModelOpt NVFP4 (NVFP4QTensor): weight uint8, two E2M1 codes a byte, element 2j in the low
  nibble (code: bit 3 sign, bits 0..2 the magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6: OCP MX v1.0
  §5.3.3); weight_scale E4M3 per 16 along the input; weight_scale_2 an fp32 multiplier per
  projection: w = e2m1 * weight_scale * weight_scale_2.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from moecert.reference import dequantize, load_checkpoint

sys.path.insert(0, str(Path(__file__).parent))
import model_folders as mf

E, K, N, TOPK = 2, 32, 16, 1
PROJECTIONS = ("gate_proj", "up_proj", "down_proj")
SHAPES = {"gate_proj": (N, K), "up_proj": (N, K), "down_proj": (K, N)}


def _folder(tmp_path, experts: dict[str, torch.Tensor], config: dict, block="mlp",
            extra_files=None) -> Path:
    tensors = {**mf.model_extras(K), **mf.layer_extras(1, K, E, router=False)}
    tensors[f"model.layers.1.{block}.gate.weight"] = torch.ones(E, K).bfloat16()
    tensors.update({f"model.layers.1.{block}.experts.{name}": t for name, t in experts.items()})
    return mf.write_folder(tmp_path / "model", config, tensors, extra_files=extra_files)


def test_mixtral_w1_is_the_gate_and_w3_the_up_projection(tmp_path):
    # expert e: w1 all 1 + e, w3 all 10 + e, w2 all 100 + e (fp16 exact)
    experts = {}
    for e in range(E):
        experts[f"{e}.w1.weight"] = torch.full((N, K), 1.0 + e, dtype=torch.float16)
        experts[f"{e}.w3.weight"] = torch.full((N, K), 10.0 + e, dtype=torch.float16)
        experts[f"{e}.w2.weight"] = torch.full((K, N), 100.0 + e, dtype=torch.float16)
    config = {"model_type": "mixtral", "hidden_size": K, "intermediate_size": N,
              "num_local_experts": E, "num_experts_per_tok": TOPK, "hidden_act": "silu",
              "torch_dtype": "float16"}
    folder = _folder(tmp_path, experts, config, block="block_sparse_moe")
    w = dequantize(load_checkpoint(folder, layer=1).checkpoint)
    for e in range(E):
        assert (w["w13"][e, :N] == 1.0 + e).all()  # gate rows first: w1
        assert (w["w13"][e, N:] == 10.0 + e).all()  # then up: w3
        assert (w["w2"][e] == 100.0 + e).all()


# input scales of (gate, up) per expert: the larger differs in place between the experts
FP8_INPUT_SCALES = [(0.5, 2.0), (3.0, 1.0)]


def test_static_input_scales_keep_the_larger_of_gate_and_up(tmp_path):
    gen = torch.Generator().manual_seed(0)
    experts = {}
    for e, scales in enumerate(FP8_INPUT_SCALES):
        for proj in PROJECTIONS:
            base = f"{e}.{proj}"
            w = torch.randn(*SHAPES[proj], generator=gen).to(torch.float8_e4m3fn)
            experts[f"{base}.weight"] = w
            experts[f"{base}.weight_scale"] = torch.tensor([0.01], dtype=torch.float32)
            s = scales[PROJECTIONS.index(proj)] if proj != "down_proj" else 0.25
            experts[f"{base}.input_scale"] = torch.tensor([s], dtype=torch.float32)
    qc = mf.ct_config(8, fmt="float-quantized", strategy="tensor", wtype="float",
                      input_activations={"num_bits": 8, "type": "float", "symmetric": True,
                                         "strategy": "tensor", "dynamic": False,
                                         "group_size": None})
    folder = _folder(tmp_path, experts, mf.qwen3_config(E, K, N, TOPK, qc))
    ckpt = load_checkpoint(folder, layer=1).checkpoint
    assert ckpt.activation == "static-tensor"
    assert ckpt.tensors["w13_input_scale"].tolist() == [2.0, 3.0]
    assert ckpt.tensors["w2_input_scale"].tolist() == [0.25, 0.25]


E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
# E4M3 (bias 7) bytes used as block scales: 0x30 = 2^-1, 0x38 = 1, 0x3C = 1.5, 0x40 = 2
E4M3_BYTES = {0x30: 0.5, 0x38: 1.0, 0x3C: 1.5, 0x40: 2.0}


def _e2m1(code: int) -> float:
    return (-1.0 if code & 8 else 1.0) * E2M1[code & 7]


def _nvfp4_projection(gen, rows, cols, scale_2):
    """(files' weight, weight_scale, weight_scale_2; the weights they stand for)."""
    packed = torch.randint(0, 256, (rows, cols // 2), generator=gen, dtype=torch.uint8)
    scale_bytes = torch.tensor(list(E4M3_BYTES), dtype=torch.uint8)[
        torch.randint(0, len(E4M3_BYTES), (rows, cols // 16), generator=gen)]
    want = torch.empty(rows, cols, dtype=torch.float64)
    for r in range(rows):
        for j in range(cols // 2):
            byte = int(packed[r, j])
            for i, code in enumerate((byte & 0xF, byte >> 4)):  # element 2j: low nibble
                c = 2 * j + i
                want[r, c] = _e2m1(code) * E4M3_BYTES[int(scale_bytes[r, c // 16])] * scale_2
    files = (packed, scale_bytes.view(torch.float8_e4m3fn),
             torch.tensor(scale_2, dtype=torch.float32))
    return files, want


def test_modelopt_nvfp4_dequantizes_as_its_format_says(tmp_path):
    gen = torch.Generator().manual_seed(1)
    experts, want = {}, {"w13": [], "w2": []}
    for e in range(E):
        rows = []
        for i, proj in enumerate(PROJECTIONS):
            scale_2 = 2.0 ** -(2 + i + e)  # gate, up and down each their own
            (w, s, s2), values = _nvfp4_projection(gen, *SHAPES[proj], scale_2)
            base = f"{e}.{proj}"
            experts.update({f"{base}.weight": w, f"{base}.weight_scale": s,
                            f"{base}.weight_scale_2": s2,
                            f"{base}.input_scale": torch.tensor(0.01, dtype=torch.float32)})
            rows.append(values)
        want["w13"].append(torch.cat(rows[:2]))
        want["w2"].append(rows[2])
    hf_quant = {"hf_quant_config.json": {
        "producer": {"name": "modelopt", "version": "0.47.0"},
        "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": None,
                         "exclude_modules": ["lm_head"], "group_size": 16}}}
    folder = _folder(tmp_path, experts, mf.qwen3_config(E, K, N, TOPK), extra_files=hf_quant)
    ml = load_checkpoint(folder, layer=1)
    assert (ml.checkpoint.scheme, ml.checkpoint.checkpoint_format) == ("nvfp4", "modelopt")
    w = dequantize(ml.checkpoint)
    assert torch.equal(w["w13"], torch.stack(want["w13"]))
    assert torch.equal(w["w2"], torch.stack(want["w2"]))
