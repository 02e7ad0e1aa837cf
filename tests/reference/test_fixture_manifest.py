"""The committed producer fixtures (tests/fixtures/checkpoints) against their manifest.

Each fixture folder is a model folder a real producer wrote (tools/producers/ makes them).
These tests hold the set to what the loader's tests rely on: every folder listed in
MANIFEST.json with its fields, every listed folder present, files as listed, sizes within the
budget, safetensors headers that parse (and shards that match their index), the model shape
the manifest states equal to the one config.json states, routed experts in exactly the
layers the manifest calls MoE layers, and expectation files that name their fixture. The
checks are plain functions, each also run on a broken copy so that it is seen to fail.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from moecert.reference.schemes import SCHEME_NAMES
from safetensors import safe_open

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CHECKPOINTS = FIXTURES / "checkpoints"
MANIFEST = json.loads((CHECKPOINTS / "MANIFEST.json").read_text())["fixtures"]

# Size budget: each fixture well under 1 MB, each expectation file small, the set a few MB
# (measured 2026-11-26: largest fixture 724 KB, largest expectation 394 KB, all 10.4 MB;
# 2026-11-28, issue 30's DeepSeek-V3 sharded and GPTQModel per-channel fixtures and its three
# one-layer ModelOpt NVFP4 fixtures (440 KB): about 13.5 MB. The whole repository travels to
# the GPU machine under 64 MiB: 14.5 MB of fixtures leaves room; 2026-11-29, issue 42's four
# int4 producer fixtures (96-168 KB each) and the Quark int4 expectation (99 KB): 14.27 MB;
# with issue 42's two MXFP4 W4A4 fixtures (190 KB each) and their expectations (99 + 198 KB):
# 14.79 MB; with ModelOpt's own fake quantization of one INT4 AWQ expert linear (34 KB,
# expected_dequant/*.fakequant.safetensors): 14.98 MB. The engines' carry
# (tools/engine_carry.py) cuts parts of 44 MiB beside the tree:
# 15 MB of fixtures keeps the tree (18.1 MB, 2026-11-29) plus one part under the 64 MiB of one call)
MAX_FIXTURE_BYTES = 800_000
MAX_EXPECTED_BYTES = 400_000
MAX_TOTAL_BYTES = 15_000_000

PRODUCERS = {"llm-compressor": "llmcompressor", "modelopt": "nvidia-modelopt",
             "quark": "amd-quark", "gptqmodel": "gptqmodel", "auto-round": "auto-round",
             "moecert": None}
# scheme names a fixture may carry before moecert has the scheme (issue 22: W4AFP8)
PENDING_SCHEMES = {"w4afp8"}
FIELDS = {"producer": str, "how": str, "versions": dict, "scheme": str, "variant": dict,
          "family": str, "base_model": str, "E": int, "K": int, "N": int, "topk": int,
          "layers": int, "moe_layers": list, "dense_layers": list, "sharded": bool,
          "files": list, "command": str, "env": str, "notes": str}
# config.json keys that state each shape field, by model family
SHAPE_KEYS = {
    "qwen3_moe": {"E": ("num_experts", "num_local_experts"), "N": ("moe_intermediate_size",)},
    "mixtral": {"E": ("num_local_experts",), "N": ("intermediate_size",)},
    "gpt_oss": {"E": ("num_local_experts",), "N": ("intermediate_size",)},
    "deepseek_v3": {"E": ("n_routed_experts",), "N": ("moe_intermediate_size",)},
}
EXPERT_TENSOR = re.compile(r"^model\.layers\.(\d+)\.(?:mlp|block_sparse_moe)\.experts\.")
EXPECTED_TENSOR = re.compile(r"^layers\.(\d+)\.experts\.(\d+)\.(\w+)\.weight$")


def safetensors_files(folder: Path) -> list[Path]:
    """The weight files of a model folder: the index's shards, or model.safetensors."""
    index = folder / "model.safetensors.index.json"
    if index.exists():
        weight_map = json.loads(index.read_text())["weight_map"]
        return [folder / s for s in sorted(set(weight_map.values()))]
    return [folder / "model.safetensors"]


def tensor_names(folder: Path) -> dict[str, Path]:
    """Every tensor name of a model folder and the file holding it; raises if a header does
    not parse, a shard is missing, or a shard disagrees with the index."""
    names = {}
    for path in safetensors_files(folder):
        with safe_open(path, "pt") as f:
            for name in f.keys():
                names[name] = path
    index = folder / "model.safetensors.index.json"
    if index.exists():
        weight_map = json.loads(index.read_text())["weight_map"]
        wrong = {n for n, s in weight_map.items() if names.get(n, Path()).name != s}
        if wrong or set(names) != set(weight_map):
            raise AssertionError(f"{index}: weight_map disagrees with the shards' headers "
                                 f"({sorted(wrong | (set(names) ^ set(weight_map)))[:3]})")
    return names


def entry_problems(name: str, entry: dict, folder: Path) -> list[str]:
    """What is wrong with one manifest entry against its folder (empty: nothing)."""
    problems = [f"field {k}: expected {t.__name__}, found {type(entry.get(k)).__name__}"
                for k, t in FIELDS.items() if not isinstance(entry.get(k), t)]
    if problems:
        return problems
    if entry["producer"] not in PRODUCERS:
        problems.append(f"producer {entry['producer']!r} not one of {sorted(PRODUCERS)}")
    elif PRODUCERS[entry["producer"]] and not entry["versions"].get(PRODUCERS[entry["producer"]]):
        problems.append(f"versions: no version of {PRODUCERS[entry['producer']]}")
    if entry["scheme"] not in (*SCHEME_NAMES, *PENDING_SCHEMES):
        problems.append(f"scheme {entry['scheme']!r} is no moecert scheme")
    for pkg in ("torch", "transformers"):
        if not entry["versions"].get(pkg):
            problems.append(f"versions: no version of {pkg}")
    if f"--only {name}" not in entry["command"]:
        problems.append(f"command {entry['command']!r} does not make {name}")
    present = sorted(p.name for p in folder.iterdir())
    if present != sorted(entry["files"]):
        problems.append(f"files {sorted(entry['files'])} but the folder holds {present}")
    if entry["sharded"] != (folder / "model.safetensors.index.json").exists():
        problems.append(f"sharded is {entry['sharded']} but the index file says otherwise")
    return problems


def shape_problems(entry: dict, config: dict) -> list[str]:
    """Where the manifest's E, K, N, top-k, layers disagree with config.json."""
    keys = SHAPE_KEYS[entry["family"]]
    stated = {"K": config.get("hidden_size"), "topk": config.get("num_experts_per_tok"),
              "layers": config.get("num_hidden_layers")}
    for field, names in keys.items():
        stated[field] = next((config[k] for k in names if k in config), None)
    return [f"{f}: manifest {entry[f]}, config.json {v}" for f, v in stated.items()
            if entry[f] != v]


def layer_problems(entry: dict, names: dict[str, Path]) -> list[str]:
    """Routed expert tensors must be in the MoE layers and in no dense layer."""
    with_experts = {int(m[1]) for n in names if (m := EXPERT_TENSOR.match(n))}
    problems = []
    if with_experts != set(entry["moe_layers"]):
        problems.append(f"expert tensors in layers {sorted(with_experts)}, manifest "
                        f"moe_layers {entry['moe_layers']}")
    if set(entry["moe_layers"]) & set(entry["dense_layers"]):
        problems.append("a layer is both MoE and dense")
    return problems


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


NAMES = sorted(MANIFEST)


def test_every_folder_is_listed_and_every_entry_has_a_folder():
    folders = sorted(p.name for p in CHECKPOINTS.iterdir() if p.is_dir())
    assert folders == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_manifest_entry(name):
    assert entry_problems(name, MANIFEST[name], CHECKPOINTS / name) == []


@pytest.mark.parametrize("name", NAMES)
def test_fixture_reads(name):
    folder, entry = CHECKPOINTS / name, MANIFEST[name]
    config = json.loads((folder / "config.json").read_text())
    quantized = "quantization_config" in config or (folder / "hf_quant_config.json").exists()
    assert quantized, f"{folder}: no quantization_config and no hf_quant_config.json"
    assert shape_problems(entry, config) == []
    assert layer_problems(entry, tensor_names(folder)) == []
    assert folder_bytes(folder) <= MAX_FIXTURE_BYTES


@pytest.mark.parametrize("name", [n for n in NAMES if MANIFEST[n]["expected_dequant"]])
def test_expected_dequant_names_its_fixture(name):
    entry = MANIFEST[name]
    path = FIXTURES / entry["expected_dequant"]
    assert path.stat().st_size <= MAX_EXPECTED_BYTES
    with safe_open(path, "pt") as f:
        meta = f.metadata()
        assert meta["fixture"] == name and meta["decompressor"]
        experts = json.loads(meta["experts"])
        for tensor in f.keys():
            m = EXPECTED_TENSOR.match(tensor)
            assert m, f"{path}: tensor name {tensor!r}"
            assert int(m[1]) in entry["moe_layers"] and int(m[2]) in experts
            assert f.get_slice(tensor).get_shape()[1] in (entry["K"], entry["N"])


def test_whole_set_within_budget():
    assert folder_bytes(FIXTURES) <= MAX_TOTAL_BYTES


# --- the checks fail where they should ---------------------------------------------------

@pytest.fixture
def broken_copy(tmp_path):
    """A copy of the sharded fixture (the checks' hardest case), to break."""
    name = next(n for n in NAMES if MANIFEST[n]["sharded"])
    dst = tmp_path / name
    shutil.copytree(CHECKPOINTS / name, dst)
    return name, dict(MANIFEST[name]), dst


def test_checks_see_a_truncated_header(broken_copy):
    _, _, folder = broken_copy
    shard = safetensors_files(folder)[0]
    shard.write_bytes(shard.read_bytes()[:20])
    with pytest.raises(Exception):  # noqa: B017 - safetensors' own error type varies by version
        tensor_names(folder)


def test_checks_see_an_index_that_disagrees(broken_copy):
    _, _, folder = broken_copy
    index = folder / "model.safetensors.index.json"
    data = json.loads(index.read_text())
    shard = sorted(data["weight_map"].values())[0]
    data["weight_map"]["model.layers.9.mlp.experts.0.gate_proj.weight"] = shard
    index.write_text(json.dumps(data))
    with pytest.raises(AssertionError, match="weight_map disagrees"):
        tensor_names(folder)


def test_checks_see_wrong_fields(broken_copy):
    name, entry, folder = broken_copy
    (folder / "tokenizer.json").write_text("{}")
    entry.update(scheme="int3", E="8", command="python make.py")
    problems = entry_problems(name, entry, folder)
    assert problems == ["field E: expected int, found str"]
    entry["E"] = 8
    problems = "\n".join(entry_problems(name, entry, folder))
    for part in ("scheme 'int3'", "does not make", "tokenizer.json"):
        assert part in problems


def test_checks_see_shape_and_layer_disagreements(broken_copy):
    _, entry, folder = broken_copy
    config = json.loads((folder / "config.json").read_text())
    assert shape_problems({**entry, "K": entry["K"] + 1}, config) == [
        f"K: manifest {entry['K'] + 1}, config.json {entry['K']}"]
    names = tensor_names(folder)
    assert layer_problems({**entry, "moe_layers": [0], "dense_layers": [1]}, names)
