"""`load_checkpoint`: model folders in the producers' layouts read back as moecert Checkpoints.

The folders are written by `model_folders.py` from a synthesized Checkpoint, split the way
each producer writes its files (research/real_checkpoints.md); the loaded Checkpoint must hold
exactly the synthesized tensors, and the torch backend must agree with the reference on it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from moecert.kernels.native import TorchBackend
from moecert.reference import (
    CheckpointError,
    MoEProblem,
    dequantize,
    load_checkpoint,
    synthesize,
)

sys.path.insert(0, str(Path(__file__).parent))
import model_folders as mf
from loaded_layer import INT8_STEP, UNIT_ROUNDOFF, torch_backend_error

E, K, N, TOPK = 4, 128, 64, 2


def qwen3_folder(tmp_path, ckpt, qc, shards=1, dense_first=True, **split):
    """Layer 0 dense (when dense_first), layer 1 MoE holding `ckpt`."""
    tensors = {**mf.model_extras(K), **mf.layer_extras(1, K, E)}
    tensors.update(mf.split_expert_tensors(ckpt, "model.layers.1.mlp.experts", **split))
    if dense_first:
        tensors.update(mf.layer_extras(0, K, E, router=False))
        for proj in ("gate_proj", "up_proj", "down_proj"):
            tensors[f"model.layers.0.mlp.{proj}.weight"] = torch.ones(8, 8).bfloat16()
    return mf.write_folder(tmp_path / "model", mf.qwen3_config(E, K, N, TOPK, qc), tensors,
                           shards=shards)


def ct_w4a16(sym=True, act_order=False, seed=0):
    P = MoEProblem(M=5, K=K, N=N, E=E, topk=TOPK)
    ckpt = synthesize("ct-int4", P, seed=seed, group_size=32, sym=sym, act_order=act_order,
                      checkpoint_format="ct-0.18")
    qc = mf.ct_config(4, 32, symmetric=sym, actorder="group" if act_order else None)
    return ckpt, qc


def assert_same_tensors(got, want):
    assert sorted(got.tensors) == sorted(want.tensors)
    for name, t in want.tensors.items():
        g = got.tensors[name]
        if t.dim() == 1 and g.shape == (*t.shape, 2):  # one scale per expert synthesized, the
            assert torch.equal(g[:, 0], t) and torch.equal(g[:, 1], t), name  # file's two
            continue
        assert g.dtype == t.dtype and g.shape == t.shape, name
        assert torch.equal(g.view(torch.uint8) if g.dtype.itemsize == 1 else g,
                           t.view(torch.uint8) if t.dtype.itemsize == 1 else t), name


@pytest.mark.parametrize("sym,act_order", [(True, False), (False, False), (True, True)])
def test_ct_w4a16_qwen3_loads_as_written(tmp_path, sym, act_order):
    ckpt, qc = ct_w4a16(sym, act_order)
    folder = qwen3_folder(tmp_path, ckpt, qc)
    layers = load_checkpoint(folder)
    assert [(s.layer, s.scheme, s.producer, s.E, s.K, s.N, s.topk) for s in layers] == \
        [(1, "ct-int4", "llm-compressor", E, K, N, TOPK)]
    ml = load_checkpoint(folder, layer=1)
    got = getattr(ml, "checkpoint", ml)
    assert (got.scheme, got.sym, got.group_size, got.act_order, got.checkpoint_format) == \
        ("ct-int4", sym, 32, act_order, "ct-0.18")
    assert_same_tensors(got, ckpt)
    for name, w in dequantize(ckpt).items():
        assert torch.equal(dequantize(got)[name], w)
    assert (ml.E, ml.K, ml.N, ml.topk, ml.activation, ml.bias) == (E, K, N, TOPK, "silu", False)
    assert ml.problem(7) == MoEProblem(M=7, K=K, N=N, E=E, topk=TOPK)
    assert ml.router.function == "softmax_topk" and ml.router.params == {"renormalize": True}
    assert ml.router.weight.shape == (E, K)
    assert set(ml.not_read) >= {"attention", "norms", "router", "embeddings", "lm_head",
                                "other decoder layers"}
    assert ml.source.layer == 1 and ml.source.producer == "llm-compressor"
    assert ml.source.files == ("model.safetensors",) and len(ml.source.sha256) == 64


def test_sharded_folder_and_hf_cache_snapshot(tmp_path):
    ckpt, qc = ct_w4a16()
    cache = tmp_path / "models--org--tiny"
    snap = cache / "snapshots" / "abc123"
    folder = qwen3_folder(tmp_path, ckpt, qc, shards=3)
    snap.mkdir(parents=True)
    for f in folder.iterdir():  # the cache links each file into the snapshot
        (snap / f.name).symlink_to(f)
    (cache / "refs").mkdir()
    (cache / "refs" / "main").write_text("abc123")
    ml = load_checkpoint(cache, layer=1)
    assert_same_tensors(ml.checkpoint, ckpt)
    assert len(ml.source.files) == 3
    # the hash is over what was read, not over where it sat
    assert ml.source.sha256 == load_checkpoint(folder, layer=1).source.sha256


def test_hash_changes_with_one_byte(tmp_path):
    ckpt, qc = ct_w4a16()
    a = load_checkpoint(qwen3_folder(tmp_path / "a", ckpt, qc), layer=1).source.sha256
    ckpt.tensors["w2_weight_packed"][3, 5, 1] ^= 1
    b = load_checkpoint(qwen3_folder(tmp_path / "b", ckpt, qc), layer=1).source.sha256
    assert a != b


def test_torch_backend_agrees_with_reference_on_loaded_layer(tmp_path):
    ckpt, qc = ct_w4a16(sym=False)
    ml = load_checkpoint(qwen3_folder(tmp_path, ckpt, qc), layer=1)
    assert torch_backend_error(ml, ml.problem(9), seed=3) < UNIT_ROUNDOFF["bf16"]


def test_a_layer_without_experts_is_one_error(tmp_path):
    ckpt, qc = ct_w4a16()
    folder = qwen3_folder(tmp_path, ckpt, qc)
    with pytest.raises(CheckpointError, match=r"layer 0: expected a decoder layer with routed "
                       r"experts \(MoE layers: 1\), found no routed experts"):
        load_checkpoint(folder, layer=0)
    with pytest.raises(CheckpointError, match="layer 7.*no such layer"):
        load_checkpoint(folder, layer=7)


# --- every producer and scheme the loader reads ----------------------------------------------

def _int_input(strategy="token", dynamic=True, type_="int"):
    return {"num_bits": 8, "type": type_, "symmetric": True, "strategy": strategy,
            "dynamic": dynamic, "group_size": 128 if strategy == "group" else None}


QUARK_INT8 = {"dtype": "int8", "qscheme": "per_tensor", "ch_axis": None, "symmetric": True,
              "is_dynamic": False, "round_method": "half_even", "scale_type": "float"}
GPT_OSS = {"model_type": "gpt_oss", "hidden_size": K, "intermediate_size": N,
           "num_local_experts": E, "num_experts_per_tok": TOPK, "hidden_act": "silu",
           "torch_dtype": "bfloat16", "quantization_config": {"quant_method": "mxfp4"}}
DEEPSEEK = {"model_type": "deepseek_v3", "hidden_size": K, "moe_intermediate_size": 128,
            "n_routed_experts": E, "num_experts_per_tok": TOPK, "hidden_act": "silu",
            "n_group": 2, "topk_group": 1, "scoring_func": "sigmoid", "norm_topk_prob": True,
            "routed_scaling_factor": 2.5, "first_k_dense_replace": 1, "n_shared_experts": 1,
            "torch_dtype": "bfloat16",
            "quantization_config": {"quant_method": "fp8", "fmt": "e4m3",
                                    "activation_scheme": "dynamic",
                                    "weight_block_size": [128, 128]}}
MIXTRAL = {"model_type": "mixtral", "hidden_size": K, "intermediate_size": N,
           "num_local_experts": E, "num_experts_per_tok": TOPK, "hidden_act": "silu",
           "torch_dtype": "float16"}
MIXTRAL_CT = {**MIXTRAL, "torch_dtype": "bfloat16", "quantization_config": mf.ct_config(4, 32)}
QWEN2 = {"model_type": "qwen2_moe", "hidden_size": K, "moe_intermediate_size": N,
         "shared_expert_intermediate_size": 2 * N, "num_experts": E, "num_experts_per_tok": TOPK,
         "hidden_act": "silu", "norm_topk_prob": False, "torch_dtype": "bfloat16"}

# id -> (producer, scheme, checkpoint attrs, quantization_config, options)
PRODUCER_CASES = {
    "ct-int8-channel": ("llm-compressor", "ct-int8", dict(group_size=-1),
                        mf.ct_config(8, strategy="channel"), {}),
    "ct-int4-0.17": ("llm-compressor", "ct-int4", dict(group_size=64, checkpoint_format="ct-0.17"),
                     mf.ct_config(4, 64, version="0.17.1"), {}),
    "ct-w8a8-int8": ("llm-compressor", "int8-w8a8",
                     dict(weight_strategy="channel", activation="dynamic-token"),
                     mf.ct_config(8, fmt="int-quantized", strategy="channel",
                                  input_activations=_int_input()), {}),
    "ct-fp8-static": ("llm-compressor", "fp8-w8a8",
                      dict(weight_strategy="tensor", activation="static-tensor"),
                      mf.ct_config(8, fmt="float-quantized", strategy="tensor", wtype="float",
                                   input_activations=_int_input("tensor", False, "float")),
                      {"scalar_shape": (1,)}),
    "ct-fp8-dynamic": ("llm-compressor", "fp8-w8a8",
                       dict(weight_strategy="channel", activation="dynamic-token"),
                       mf.ct_config(8, fmt="float-quantized", strategy="channel", wtype="float",
                                    input_activations=_int_input(type_="float")), {}),
    "ct-fp8-block": ("llm-compressor", "fp8-w8a8",
                     dict(weight_strategy="block", activation="dynamic-group"),
                     mf.ct_config(8, fmt="float-quantized", strategy="block", wtype="float",
                                  input_activations=_int_input("group", type_="float")),
                     {"N": 128}),
    "ct-nvfp4": ("llm-compressor", "nvfp4", dict(checkpoint_format="ct", activation="nvfp4"),
                 mf.ct_config(4, 16, fmt="nvfp4-pack-quantized", strategy="tensor_group",
                              wtype="float", input_activations={
                                  "num_bits": 4, "type": "float", "strategy": "tensor_group",
                                  "group_size": 16, "dynamic": "local"}),
                 {"scalar_shape": (1,)}),
    "ct-mxfp4": ("llm-compressor", "mxfp4", dict(activation="none"),
                 mf.ct_config(4, 32, fmt="mxfp4-pack-quantized", wtype="float"),
                 {"rename": {"weight": "weight_packed"}}),
    "ct-mxfp8": ("llm-compressor", "mxfp8", dict(activation="none"),
                 mf.ct_config(8, 32, fmt="mxfp8-quantized", wtype="float"), {}),
    "gptq-v1-act-order": ("autogptq", "gptq-int4",
                          dict(group_size=32, act_order=True, checkpoint_format="gptq"),
                          {"quant_method": "gptq", "bits": 4, "group_size": 32,
                           "desc_act": True, "sym": True, "checkpoint_format": "gptq"}, {}),
    "gptq-v2-int8-asym": ("autogptq", "gptq-int8",
                          dict(group_size=64, sym=False, checkpoint_format="gptq_v2"),
                          {"quant_method": "gptq", "bits": 8, "group_size": 64,
                           "desc_act": False, "sym": False, "checkpoint_format": "gptq_v2"},
                          {}),
    "awq-gemm": ("autoawq", "awq-int4", dict(group_size=32),
                 {"quant_method": "awq", "bits": 4, "group_size": 32, "zero_point": True,
                  "version": "gemm"}, {}),
    "modelopt-fp8": ("modelopt", "fp8-w8a8",
                     dict(weight_strategy="tensor", activation="static-tensor"),
                     None, {"hf_quant": "FP8"}),
    "modelopt-nvfp4": ("modelopt", "nvfp4", dict(checkpoint_format="modelopt",
                                                 activation="nvfp4"),
                       None, {"hf_quant": "NVFP4"}),
    "modelopt-mxfp8": ("modelopt", "mxfp8", dict(activation="mxfp8"), None,
                       {"hf_quant": "MXFP8"}),
    "quark-int8": ("quark", "int8-w8a8", dict(weight_strategy="tensor",
                                              activation="static-tensor"),
                   {"quant_method": "quark", "global_quant_config": {
                       "weight": QUARK_INT8, "input_tensors": QUARK_INT8,
                       "output_tensors": None, "bias": None}}, {"quark": True}),
    "deepseek-fp8": ("fp8-release", "fp8-w8a8", dict(weight_strategy="block",
                                             activation="dynamic-group"),
                     None, {"config": DEEPSEEK, "N": 128,
                            "rename": {"weight_scale": "weight_scale_inv"}}),
    "mixtral-fp16": ("unquantized", "fp16", {}, None,
                     {"config": MIXTRAL, "names": mf.MIXTRAL, "block": "block_sparse_moe",
                      "dtype": "fp16"}),
    # llm-compressor's Mixtral: gate_proj/up_proj/down_proj under block_sparse_moe.experts
    "mixtral-ct-int4-llmc-names": ("llm-compressor", "ct-int4", dict(group_size=32), None,
                                   {"config": MIXTRAL_CT, "block": "block_sparse_moe"}),
    "qwen2-moe-bf16-shared-expert": ("unquantized", "bf16", {}, None,
                                     {"config": QWEN2, "shared": True}),
    "gpt-oss-mxfp4": ("gpt-oss", "mxfp4", dict(activation="none"), None,
                      {"config": GPT_OSS, "fused": True, "activation": "swigluoai",
                       "bias": True}),
}


def producer_folder(tmp_path, case, seed=0):
    _, scheme, attrs, qc, opt = PRODUCER_CASES[case]
    n = opt.get("N", N)
    P = MoEProblem(M=3, K=K, N=n, E=E, topk=TOPK, dtype=opt.get("dtype", "bf16"),
                   activation=opt.get("activation", "silu"), bias=opt.get("bias", False))
    ckpt = synthesize(scheme, P, seed=seed, **attrs)
    block = opt.get("block", "mlp")
    prefix = f"model.layers.1.{block}.experts"
    if opt.get("fused"):
        files = mf.fused_expert_tensors(ckpt, prefix, K)
    else:
        files = mf.split_expert_tensors(ckpt, prefix, names=opt.get("names", mf.QWEN),
                                        rename=opt.get("rename"),
                                        scalar_shape=opt.get("scalar_shape", ()))
    if opt.get("quark"):
        files.update(mf.quark_zero_points(files))
    extras = mf.layer_extras(1, K, E, router=False)
    router = "router" if opt.get("fused") else "gate"
    gen = torch.Generator().manual_seed(5)
    extras[f"model.layers.1.{block}.{router}.weight"] = torch.randn(E, K, generator=gen).bfloat16()
    if opt.get("fused"):
        extras[f"model.layers.1.{block}.router.bias"] = torch.randn(E, generator=gen).bfloat16()
    config = dict(opt.get("config") or mf.qwen3_config(E, K, n, TOPK, qc))
    if "config" in opt and "moe_intermediate_size" in config:
        config["moe_intermediate_size"] = n
    if config["model_type"] == "deepseek_v3":
        extras["model.layers.1.mlp.gate.e_score_correction_bias"] = torch.rand(E)
        extras["model.layers.1.mlp.shared_experts.gate_proj.weight"] = torch.ones(8, 8)
    if opt.get("shared"):  # Qwen2-MoE's shared expert and its gate
        for proj in ("gate_proj", "up_proj", "down_proj"):
            extras[f"model.layers.1.mlp.shared_expert.{proj}.weight"] = torch.ones(8, 8)
        extras["model.layers.1.mlp.shared_expert_gate.weight"] = torch.ones(1, K)
    hf_quant = None
    if "hf_quant" in opt:
        hf_quant = {"hf_quant_config.json": {
            "producer": {"name": "modelopt", "version": "0.47.0"},
            "quantization": {"quant_algo": opt["hf_quant"], "kv_cache_quant_algo": None,
                             "exclude_modules": ["lm_head"]}}}
        # ModelOpt writes the block size of its block formats (NVFP4 16, MXFP8 32)
        group = {"NVFP4": 16, "MXFP8": 32}.get(opt["hf_quant"])
        if group:
            hf_quant["hf_quant_config.json"]["quantization"]["group_size"] = group
    folder = mf.write_folder(tmp_path / case, config, {**mf.model_extras(K), **extras, **files},
                             extra_files=hf_quant)
    return P, ckpt, folder


@pytest.mark.parametrize("case", sorted(PRODUCER_CASES))
def test_producer_layouts_load_as_written(tmp_path, case):
    producer, scheme, attrs, _, opt = PRODUCER_CASES[case]
    P, ckpt, folder = producer_folder(tmp_path, case)
    [summary] = load_checkpoint(folder)
    assert (summary.layer, summary.scheme, summary.producer) == (1, scheme, producer)
    ml = load_checkpoint(folder, layer=1)
    got = ml.checkpoint
    if "quark" in opt:  # held as stored (SPEC's int8 layout has none): symmetric, all 0
        zeros = {n: got.tensors.pop(n)
                 for n in ("w13_weight_zero_point", "w2_weight_zero_point")}
        assert all(z.dtype == torch.int8 and not z.any() for z in zeros.values())
        assert zeros["w13_weight_zero_point"].shape == (E, 2)
    assert_same_tensors(got, ckpt)
    for attr, value in attrs.items():
        assert getattr(ml.checkpoint, attr) == value, attr
    assert ml.problem(3) == P
    if "quark" in opt:
        assert any("input_zero_point" in note for note in ml.notes)
    if "shared" in opt:
        assert ml.not_read["shared experts"].endswith("(4 tensors)")
        assert ml.router.params == {"renormalize": False}


@pytest.mark.parametrize("case", sorted(PRODUCER_CASES))
def test_torch_backend_agrees_on_each_producer(tmp_path, case):
    _, _, folder = producer_folder(tmp_path, case, seed=1)
    ml = load_checkpoint(folder, layer=1)
    problem = ml.problem(6)
    why = TorchBackend().supports(ml.checkpoint, problem)
    if why is not None:
        pytest.skip(f"torch does not claim {case}: {why}")
    bound = INT8_STEP if ml.checkpoint.activation in (
        "dynamic-token", "static-tensor", "dynamic-tensor") and \
        ml.checkpoint.info.activation_element == "int8" else UNIT_ROUNDOFF["bf16"]
    assert torch_backend_error(ml, problem, seed=2) < bound


def test_deepseek_router_and_what_is_not_read(tmp_path):
    _, _, folder = producer_folder(tmp_path, "deepseek-fp8")
    ml = load_checkpoint(folder, layer=1)
    assert ml.router.function == "grouped_topk"
    assert ml.router.params == {"num_expert_group": 2, "topk_group": 1, "scoring": "sigmoid",
                                "renormalize": True, "routed_scaling_factor": 2.5}
    assert ml.router.correction_bias is not None
    assert "shared experts" in ml.not_read and "router" in ml.not_read


def test_gpt_oss_router_bias_and_interleaved_activation(tmp_path):
    _, _, folder = producer_folder(tmp_path, "gpt-oss-mxfp4")
    ml = load_checkpoint(folder, layer=1)
    assert ml.activation == "swigluoai" and ml.bias
    assert ml.router.bias is not None and ml.router.function == "softmax_topk"


# --- malformed folders: one CheckpointError naming the file and the tensor or key -----------

def one_line_error(folder, layer=1) -> CheckpointError:
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(folder, layer=layer)
    assert "\n" not in str(info.value)
    return info.value


def sharded(tmp_path):
    ckpt, qc = ct_w4a16()
    return qwen3_folder(tmp_path, ckpt, qc, shards=3)


def test_truncated_shard(tmp_path):
    folder = sharded(tmp_path)
    shard = folder / "model-00002-of-00003.safetensors"
    shard.write_bytes(shard.read_bytes()[:-100])
    err = one_line_error(folder)
    assert "model-00002-of-00003.safetensors" in str(err)
    assert "expected a complete safetensors file" in str(err)


def test_corrupt_shard_header(tmp_path):
    folder = sharded(tmp_path)
    shard = folder / "model-00001-of-00003.safetensors"
    data = bytearray(shard.read_bytes())
    data[8:20] = b"not json ..."
    shard.write_bytes(bytes(data))
    err = one_line_error(folder)
    assert "model-00001-of-00003.safetensors" in str(err)


def test_index_naming_a_missing_shard(tmp_path):
    folder = sharded(tmp_path)
    (folder / "model-00003-of-00003.safetensors").unlink()
    err = one_line_error(folder)
    assert "model.safetensors.index.json" in str(err) and "weight_map" in str(err)
    assert "shard model-00003-of-00003.safetensors in the folder, found missing" in str(err)


def test_tensor_missing_for_an_expert(tmp_path):
    ckpt, qc = ct_w4a16()
    folder = tmp_path / "model"
    files = mf.split_expert_tensors(ckpt, "model.layers.1.mlp.experts")
    del files["model.layers.1.mlp.experts.2.up_proj.weight_scale"]
    mf.write_folder(folder, mf.qwen3_config(E, K, N, TOPK, qc), files)
    err = one_line_error(folder)
    assert str(err).startswith("model.layers.1.mlp.experts.2.up_proj.weight_scale: expected a "
                               "tensor for expert 2")


def test_four_bits_declared_eight_stored(tmp_path):
    P = MoEProblem(M=1, K=K, N=N, E=E, topk=TOPK)
    ckpt = synthesize("ct-int8", P, seed=0, group_size=32, checkpoint_format="ct-0.18")
    folder = qwen3_folder(tmp_path, ckpt, mf.ct_config(4, 32))
    err = one_line_error(folder)
    assert "model.safetensors: model.layers.1.mlp.experts.0." in str(err)
    assert "ct-int4" in err.expected and "config.json" in err.expected


def test_dtype_disagreeing_with_config(tmp_path):
    P = MoEProblem(M=1, K=K, N=N, E=E, topk=TOPK)
    ckpt = synthesize("bf16", P, seed=0)
    qc = mf.ct_config(8, fmt="float-quantized", strategy="channel", wtype="float")
    files = mf.split_expert_tensors(ckpt, "model.layers.1.mlp.experts")
    files.update({n.replace(".weight", ".weight_scale"): torch.ones(N if "down" not in n else K, 1)
                  for n in list(files)})
    folder = mf.write_folder(tmp_path / "m", mf.qwen3_config(E, K, N, TOPK, qc), files)
    err = one_line_error(folder)
    assert ".weight" in err.tensor and "torch.float8_e4m3fn" in err.expected
    assert err.found == "torch.bfloat16"


@pytest.mark.parametrize("qc,match", [
    ({"quant_method": "bitsandbytes", "load_in_4bit": True},
     r"quantization_config\.quant_method: expected quant_method one of .*awq.*"
     r"compressed-tensors.*schemes .*ct-int4.*, found .*'bitsandbytes'"),
    (mf.ct_config(3, 32), r"quantization_config.config_groups.group_0.weights.num_bits: "
     r"expected 4 / 8 \(the nearest compressed-tensors scheme moecert reads is ct-int4.*found 3"),
    # W4AFP8 is w4a8-fp8 when symmetric (the preset); asymmetric has no scheme
    (mf.ct_config(4, 32, symmetric=False, fmt="int-quantized",
                  input_activations=_int_input(type_="float")),
     r"config_groups.group_0.weights.symmetric: expected True \(the nearest compressed-tensors "
     r"scheme moecert reads is w4a8-fp8.*found False"),
    ({"quant_method": "awq", "bits": 4, "group_size": 32, "version": "gemv"},
     r"quantization_config.version: expected 'gemm'.*is awq-int4.*found version='gemv'"),
])
def test_unknown_quantization_is_one_error_listing_what_is_known(tmp_path, qc, match):
    ckpt, _ = ct_w4a16()
    folder = qwen3_folder(tmp_path, ckpt, qc)
    with pytest.raises(CheckpointError, match=match) as info:
        load_checkpoint(folder)
    assert "config.json" in str(info.value)
    one_line_error(folder)


def test_not_a_model_folder(tmp_path):
    with pytest.raises(CheckpointError, match="no such file or directory"):
        load_checkpoint(tmp_path / "nowhere")
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match=r"config.json: expected valid JSON"):
        load_checkpoint(tmp_path)


@pytest.mark.parametrize("case", ["gptq-v1-act-order", "gpt-oss-mxfp4", "quark-int8"])
def test_a_range_of_experts_is_that_slice_of_the_layer(tmp_path, case):
    _, _, folder = producer_folder(tmp_path, case)
    part = load_checkpoint(folder, layer=1, experts=range(1, 3))
    whole = load_checkpoint(folder, layer=1)
    assert part.E == 2 and part.checkpoint.first_expert == 1
    for name, t in whole.checkpoint.tensors.items():
        assert torch.equal(part.checkpoint.tensors[name], t[1:3]), name
    with pytest.raises(CheckpointError, match="experts: expected a contiguous range"):
        load_checkpoint(folder, layer=1, experts=range(2, 9))


def test_expert_count_disagreeing_with_config(tmp_path):
    ckpt, qc = ct_w4a16()
    files = mf.split_expert_tensors(ckpt, "model.layers.1.mlp.experts")
    folder = mf.write_folder(tmp_path / "m", mf.qwen3_config(8, K, N, TOPK, qc), files)
    err = one_line_error(folder)
    assert str(err).endswith("config.json: num_experts: expected the 4 experts layer 1 holds, "
                             "found 8")
