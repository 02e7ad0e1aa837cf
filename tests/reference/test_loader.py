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
    make_inputs,
    moe,
    synthesize,
)

sys.path.insert(0, str(Path(__file__).parent))
import model_folders as mf

E, K, N, TOPK = 4, 128, 64, 2
# relative Frobenius error bounds of the torch backend, as measured in
# tests/kernels/test_torch_backend.py: the activation dtype's unit roundoff, one int8 step
BOUND = {"bf16": 2.0**-8, "int8": 1 / 127}


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
    problem = ml.problem(9)
    x, _, _ = make_inputs(problem, seed=3)
    topk_weights, topk_ids = ml.router.select(x, problem.topk)
    backend = TorchBackend()
    layer = backend.create_layer(ml.checkpoint, problem)
    backend.process_weights_after_loading(layer)
    y = backend.apply(layer, x, topk_weights.float(), topk_ids)
    ref = moe(ml.checkpoint, x, topk_weights, topk_ids, problem)
    err = (y.double() - ref).norm() / ref.norm()
    assert err < BOUND["bf16"]


def test_a_layer_without_experts_is_one_error(tmp_path):
    ckpt, qc = ct_w4a16()
    folder = qwen3_folder(tmp_path, ckpt, qc)
    with pytest.raises(CheckpointError, match=r"layer 0: expected a decoder layer with routed "
                       r"experts \(MoE layers: 1\), found no routed experts"):
        load_checkpoint(folder, layer=0)
    with pytest.raises(CheckpointError, match="layer 7.*no such layer"):
        load_checkpoint(folder, layer=7)
