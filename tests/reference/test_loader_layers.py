"""A sharded DeepSeek-style folder: a dense first layer (`first_k_dense_replace`), several MoE
layers with shared experts, tensors of every layer spread over every shard (issue 30, item 6).

Reading one layer must read that layer's routed experts and router and nothing else: the
file reads are recorded (every byte range read through the loader's file handles, and every
tensor asked of safetensors' own reader) and mapped back to the tensors whose bytes they
touch, using the shards' headers.
"""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path

import pytest
import torch
from moecert.reference import MoEProblem, load_checkpoint, synthesize
from moecert.reference.loader import files as loader_files

sys.path.insert(0, str(Path(__file__).parent))
import model_folders as mf
from test_loader import DEEPSEEK, assert_same_tensors

E, K, N, TOPK, LAYERS, SHARDS = 4, 128, 64, 2, 4, 3


@pytest.fixture(scope="module")
def deepseek_folder(tmp_path_factory):
    """Layer 0 dense, layers 1..3 MoE in compressed-tensors W4A16 (a different draw each) with
    a shared expert and router; 3 shards, each holding tensors of every layer."""
    P = MoEProblem(M=3, K=K, N=N, E=E, topk=TOPK)
    tensors = mf.model_extras(K)
    ckpts = {}
    gen = torch.Generator().manual_seed(7)
    for L in range(LAYERS):
        tensors.update(mf.layer_extras(L, K, E, router=L > 0))
        if L == 0:
            for proj in ("gate_proj", "up_proj", "down_proj"):
                tensors[f"model.layers.0.mlp.{proj}.weight"] = torch.randn(
                    16, 16, generator=gen).bfloat16()
            continue
        ckpts[L] = synthesize("ct-int4", P, seed=L, group_size=32, checkpoint_format="ct-0.18")
        tensors.update(mf.split_expert_tensors(ckpts[L], f"model.layers.{L}.mlp.experts"))
        tensors[f"model.layers.{L}.mlp.gate.e_score_correction_bias"] = torch.rand(E)
        for proj, shape in (("gate_proj", (N, K)), ("up_proj", (N, K)), ("down_proj", (K, N))):
            tensors[f"model.layers.{L}.mlp.shared_experts.{proj}.weight"] = torch.randn(
                shape, generator=gen).bfloat16()
    config = {**DEEPSEEK, "moe_intermediate_size": N, "num_hidden_layers": LAYERS,
              "quantization_config": mf.ct_config(4, 32)}
    folder = mf.write_folder(tmp_path_factory.mktemp("ds") / "m", config, tensors,
                             shards=SHARDS)
    return folder, ckpts


def test_every_moe_layer_listed_dense_first_layer_not(deepseek_folder):
    folder, ckpts = deepseek_folder
    summaries = load_checkpoint(folder)
    assert [(s.layer, s.scheme, s.E, s.K, s.N) for s in summaries] == \
        [(L, "ct-int4", E, K, N) for L in sorted(ckpts)]
    assert "shared experts" in summaries[0].not_read


@pytest.mark.parametrize("layer", [1, 2, 3])
def test_each_layer_reads_as_written(deepseek_folder, layer):
    folder, ckpts = deepseek_folder
    ml = load_checkpoint(folder, layer=layer)
    assert_same_tensors(ml.checkpoint, ckpts[layer])
    assert ml.router.function == "grouped_topk"
    assert ml.not_read["shared experts"].endswith("(3 tensors)")
    assert len(ml.source.files) == SHARDS  # the layer's tensors sit in every shard


class _Recorder:
    """Byte ranges read through the loader's file handles, and tensors read by safe_open."""

    def __init__(self):
        self.ranges: list[tuple[str, int, int]] = []  # (file name, start, stop)
        self.st_tensors: list[str] = []


class _File:
    def __init__(self, fh, rec: _Recorder, name: str):
        self._fh, self._rec, self._name = fh, rec, name

    def read(self, n=-1):
        start = self._fh.tell()
        data = self._fh.read(n)
        self._rec.ranges.append((self._name, start, start + len(data)))
        return data

    def readinto(self, buf):
        start = self._fh.tell()
        n = self._fh.readinto(buf)
        self._rec.ranges.append((self._name, start, start + n))
        return n

    def __getattr__(self, attr):
        return getattr(self._fh, attr)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return self._fh.__exit__(*exc)


class _Handle:
    def __init__(self, h, rec):
        self._h, self._rec = h, rec

    def get_tensor(self, name):
        self._rec.st_tensors.append(name)
        return self._h.get_tensor(name)

    def __getattr__(self, attr):  # keys(), get_slice (shapes; an indexed slice is data)
        if attr == "get_slice":
            rec, h = self._rec, self._h

            class _Slice:
                def __init__(self, name):
                    self._s, self._name = h.get_slice(name), name

                def get_shape(self):
                    return self._s.get_shape()

                def __getitem__(self, index):
                    rec.st_tensors.append(self._name)
                    return self._s[index]

            return _Slice
        return getattr(self._h, attr)


def _instrument(monkeypatch) -> _Recorder:
    rec = _Recorder()
    real_safe_open, real_open = loader_files.safe_open, open

    class _SafeOpen:
        def __init__(self, *a, **kw):
            self._cm = real_safe_open(*a, **kw)

        def __enter__(self):
            return _Handle(self._cm.__enter__(), rec)

        def __exit__(self, *exc):
            return self._cm.__exit__(*exc)

    monkeypatch.setattr(loader_files, "safe_open", _SafeOpen)
    monkeypatch.setattr(loader_files, "open",
                        lambda f, mode="r", *a, **kw: _File(real_open(f, mode, *a, **kw), rec,
                                                            Path(f).name), raising=False)
    return rec


def _tensors_touched(folder: Path, ranges) -> set[str]:
    """The tensors whose data bytes the ranges overlap (header bytes touch none)."""
    out = set()
    for fname in {f for f, _, _ in ranges}:
        raw = (folder / fname).read_bytes()
        n = struct.unpack("<Q", raw[:8])[0]
        header = json.loads(raw[8:8 + n])
        base = 8 + n
        for f, a, b in ranges:
            if f != fname:
                continue
            for name, info in header.items():
                if name == "__metadata__":
                    continue
                s, e = (base + o for o in info["data_offsets"])
                if a < e and s < b:
                    out.add(name)
    return out


@pytest.mark.parametrize("layer", [1, 3])
def test_one_layer_reads_no_other_layers_bytes(deepseek_folder, monkeypatch, layer):
    folder, _ = deepseek_folder
    rec = _instrument(monkeypatch)
    load_checkpoint(folder, layer=layer)
    touched = _tensors_touched(folder, rec.ranges) | set(rec.st_tensors)
    names = json.loads((folder / "model.safetensors.index.json").read_text())["weight_map"]
    own = {n for n in names if n.startswith(f"model.layers.{layer}.mlp.")
           and (".experts." in n or ".gate." in n)}
    assert touched, "nothing recorded: the instrumentation missed the reads"
    assert touched <= own, f"read beyond layer {layer}: {sorted(touched - own)[:5]}"
    experts = {n for n in own if ".experts." in n}
    assert experts <= touched  # and the layer itself was read in full
    # byte for byte: what was read is the layer's tensors and the headers, no more
    data = sum(b - a for _, a, b in rec.ranges)
    sizes = {}
    for fname in set(names.values()):
        raw = (folder / fname).read_bytes()
        n = struct.unpack("<Q", raw[:8])[0]
        for name, info in json.loads(raw[8:8 + n]).items():
            if name != "__metadata__":
                sizes[name] = info["data_offsets"][1] - info["data_offsets"][0]
        data -= 8 + n  # each shard's header, read once
    assert data == sum(sizes[n] for n in touched - set(rec.st_tensors))


def test_the_list_of_layers_reads_headers_only(deepseek_folder, monkeypatch):
    folder, _ = deepseek_folder
    rec = _instrument(monkeypatch)
    load_checkpoint(folder)
    assert _tensors_touched(folder, rec.ranges) == set() and rec.st_tensors == []
