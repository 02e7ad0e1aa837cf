"""Decoder layer L of a model folder alone, for transformers' from_pretrained to load (issue 36:
"load only the layer the case needs for big folders").

A case runs one layer's experts; reading a whole folder builds and fills every layer (a 60-layer
model's memory and load time for one layer's). Here the model transformers builds has one
decoder layer, and the tensors it is handed are layer L's only:

- the config: the folder's own, with `num_hidden_layers` 1, the per-layer lists
  (`layer_types`) cut to layer L's entry, the values that make the remaining layer (index 0)
  the MoE kind layer L is (MOE_LAYER: DeepSeek's dense first layers, Qwen's `mlp_only_layers`),
  and the layer indices the quantization config names (an exclusion list's
  `model.layers.1.mlp.gate`) relabelled as the tensors are: L -> 0, every other index to one
  the one-layer model does not have;
- the tensors: safetensors' own lazy slices (`safe_open(...).get_slice`, as from_pretrained
  makes them) of the shards that hold layer L's tensors (the index says which), keyed by the
  name the one-layer model gives them (`model.layers.L.` -> `model.layers.0.`). Nothing is
  read here: transformers materializes the slices it loads, and its conversion mapping and
  quantizer convert, fuse, dequantize them as for the whole folder (`state_dict=`).

Renaming and selecting only: every number reaches transformers as the file stores it. Where
the folder is not in that form (no table entry for its model_type, .bin weights, a layer
prefix other than `model.layers.`), `select` says why and the adapter loads the whole folder.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from safetensors import safe_open

# model_type -> config values under which a one-layer model's layer 0 is an MoE layer of the
# kind every MoE layer of the folder is (the harness runs MoE layers only)
MOE_LAYER: dict[str, dict] = {
    "qwen3_moe": {"mlp_only_layers": [], "decoder_sparse_step": 1},
    "qwen2_moe": {"mlp_only_layers": [], "decoder_sparse_step": 1},
    "mixtral": {},
    "deepseek_v3": {"first_k_dense_replace": 0},
    "deepseek_v2": {"first_k_dense_replace": 0, "moe_layer_freq": 1},
    "gpt_oss": {},
}
# config lists with one entry per decoder layer
PER_LAYER_KEYS = ("layer_types",)
LAYER_PREFIX = "model.layers.{}."
INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"
# a layer index inside a module name or pattern: "layers.3.", "layers\.3\."
_LAYER_INDEX = re.compile(r"(layers\\?\.)(\d+)(?=\\?\.)")


@dataclass
class OneLayer:
    """What from_pretrained is handed for decoder layer `layer` of `folder`."""

    folder: Path
    layer: int
    num_layers: int
    config: dict  # config.json of the one-layer model
    state_dict: dict = field(default_factory=dict)  # one-layer name -> safetensors slice
    files: list[str] = field(default_factory=list)  # the shard files opened
    _handles: list = field(default_factory=list, repr=False)

    def describe(self) -> str:
        return (f"decoder layer {self.layer} alone ({len(self.state_dict)} tensors of "
                f"{len(self.files)} file(s); {self.num_layers} layers in the folder)")

    def close(self) -> None:
        """The shard files' handles closed (after the load: the slices are then unusable)."""
        self.state_dict.clear()
        for h in self._handles:
            h.__exit__(None, None, None)
        self._handles.clear()


def select(folder: str | Path, layer: int) -> OneLayer | str:
    """Layer `layer` of `folder` as a one-layer model's config and lazy tensors, or why the
    whole folder is read instead (a str)."""
    folder = Path(folder)
    config = json.loads((folder / "config.json").read_text())
    model_type = config.get("model_type")
    n = config.get("num_hidden_layers")
    if model_type not in MOE_LAYER:
        return (f"model_type {model_type!r}: no one-layer form known (one_layer.MOE_LAYER: "
                f"{', '.join(MOE_LAYER)})")
    if not isinstance(n, int) or not 0 <= layer < n:
        return f"num_hidden_layers {n!r} does not hold layer {layer}"
    prefix = LAYER_PREFIX.format(layer)
    shards = _shards(folder, prefix)
    if isinstance(shards, str):
        return shards
    out = OneLayer(folder, layer, n, one_layer_config(config, layer))
    try:
        for name in shards:
            handle = safe_open(str(folder / name), framework="pt", device="cpu")
            keys = [k for k in handle.keys() if k.startswith(prefix)]
            if not keys:
                continue
            out._handles.append(handle)
            out.files.append(name)
            for k in keys:
                out.state_dict[LAYER_PREFIX.format(0) + k[len(prefix):]] = handle.get_slice(k)
    except Exception:
        out.close()
        raise
    if not out.state_dict:
        out.close()
        return f"no tensor named {prefix}* in the folder's safetensors files"
    return out


def one_layer_config(config: dict, layer: int) -> dict:
    """The folder's config.json for a model of decoder layer `layer` alone (as index 0)."""
    n = config["num_hidden_layers"]
    out = dict(config)
    for key in PER_LAYER_KEYS:
        if isinstance(out.get(key), list) and len(out[key]) == n:
            out[key] = [out[key][layer]]
    out.update(MOE_LAYER[config["model_type"]])
    out["num_hidden_layers"] = 1
    if "quantization_config" in out:
        out["quantization_config"] = relabel(out["quantization_config"], layer)
    return out


def relabel(value, layer: int):
    """Every layer index in the strings of `value` as the one-layer model numbers the
    tensors: `layer` -> 0, an index i < layer -> i + 1, one above stays (neither is 0, so no
    other layer's entry lands on the one layer)."""
    if isinstance(value, str):
        def index(m):
            i = int(m[2])
            return m[1] + str(0 if i == layer else i + 1 if i < layer else i)
        return _LAYER_INDEX.sub(index, value)
    if isinstance(value, list):
        return [relabel(v, layer) for v in value]
    if isinstance(value, dict):
        return {k: relabel(v, layer) for k, v in value.items()}
    return value


def _shards(folder: Path, prefix: str) -> list[str] | str:
    """The safetensors files that hold tensors named `prefix`*: by the index of a sharded
    folder (the other shards are never opened), else the one file."""
    index = folder / INDEX_FILE
    if index.exists():
        weight_map = json.loads(index.read_text()).get("weight_map", {})
        return sorted({f for k, f in weight_map.items() if k.startswith(prefix)})
    if (folder / SINGLE_FILE).exists():
        return [SINGLE_FILE]
    return "no safetensors weights (model.safetensors or its index)"


__all__ = ["MOE_LAYER", "OneLayer", "one_layer_config", "relabel", "select"]
