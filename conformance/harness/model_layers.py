"""The harness's side of a model folder: which MoE layers it has, one layer loaded once per
process, the layer's own routing of given hidden states, the hidden states of `--inputs`, and
the provenance columns a row carries.

The reading itself is the reference's (`moecert.reference.load_checkpoint`); this module only
keeps what the harness needs. A worker process holds one layer at a time (`model_layer` is a
cache of size one): cases of a layer run one after another, so `--layer all` walks a large
model within one layer's memory per worker.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from pathlib import Path

import torch

# The tensor of an `--inputs` file, where it holds several; a file of one tensor needs no name.
INPUTS_TENSOR = "hidden_states"


class ModelInputError(ValueError):
    """A model folder, layer or inputs file the harness cannot use (one line, a usage error)."""


@dataclass(frozen=True)
class LayerSource:
    """Where a case's checkpoint comes from: decoder layer `layer` of the model folder
    `folder` (an absolute path), with hidden states from the safetensors file `inputs`
    (None: drawn from the case's seed)."""

    folder: str
    layer: int
    inputs: str | None = None
    inputs_sha256: str | None = None  # of the inputs file, when the case was made

    @property
    def model(self) -> str:
        return model_name(self.folder)

    @property
    def label(self) -> str:
        """How a case id names the source: `<model>@L<layer>` (+ `.x-<digest>` of inputs)."""
        text = f"{self.model}@L{self.layer}"
        if self.inputs is not None:
            text += f".x-{(self.inputs_sha256 or '')[:8]}"
        return text

    def to_dict(self) -> dict:
        return {"folder": self.folder, "layer": self.layer, "inputs": self.inputs,
                "inputs_sha256": self.inputs_sha256}

    @classmethod
    def from_dict(cls, d: dict | None) -> LayerSource | None:
        if d is None:
            return None
        return cls(str(d["folder"]), int(d["layer"]), d.get("inputs"), d.get("inputs_sha256"))

    @classmethod
    def of(cls, folder: str | Path, layer: int, inputs: str | None = None) -> LayerSource:
        """The source of `layer` in `folder` (made absolute), with the inputs' digest."""
        folder = str(Path(folder).resolve())
        if inputs is None:
            return cls(folder, layer)
        inputs = str(Path(inputs).resolve())
        return cls(folder, layer, inputs, file_digest(inputs))


def model_name(folder: str | Path) -> str:
    """A model folder's name as ids and reports show it: the folder's own name, or for a
    snapshot inside an HF cache (`models--org--name/snapshots/<rev>`) `org--name@<rev8>`."""
    path = Path(folder)
    if path.parent.name == "snapshots" and path.parent.parent.name.startswith("models--"):
        return f"{path.parent.parent.name.removeprefix('models--')}@{path.name[:8]}"
    return path.name


@functools.cache
def file_digest(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


# --- the loader ------------------------------------------------------------------------------

def layer_summaries(folder: str) -> dict:
    """{decoder layer: LayerSummary} of the folder's MoE layers, in order (configs and tensor
    headers only)."""
    from moecert.reference import load_checkpoint

    return {s.layer: s for s in load_checkpoint(folder)}


@functools.lru_cache(maxsize=1)
def model_layer(folder: str, layer: int):
    """The `ModelLayer` `layer` of `folder`, loaded once per process (the last one asked for)."""
    from moecert.reference import load_checkpoint

    return load_checkpoint(folder, layer=layer)


# --- provenance ------------------------------------------------------------------------------

def source_columns(source: LayerSource | None, loaded=None) -> dict:
    """The row's model columns: the model's name and folder, the layer, and (once the layer
    is loaded: `loaded`, its ModelLayer) the producer and the loader's sha256 over the
    tensors read."""
    if source is None:
        return {"model": "", "model_path": "", "model_layer": None, "producer": "",
                "tensors_sha256": ""}
    return {"model": source.model, "model_path": source.folder, "model_layer": source.layer,
            "producer": loaded.source.producer if loaded is not None else "",
            "tensors_sha256": loaded.source.sha256 if loaded is not None else ""}


# --- inputs ----------------------------------------------------------------------------------

def read_inputs(path: str, K: int | None = None) -> torch.Tensor:
    """The hidden states [rows, K] of an `--inputs` safetensors file (float32): its only
    tensor, or the one named `hidden_states`; finite values, K columns when K is given."""
    from safetensors import SafetensorError, safe_open

    where = f"--inputs {path}"
    if Path(path).is_dir():
        raise ModelInputError(f"{where}: is a folder; expected a safetensors file of [M, K] "
                              "hidden states")
    if not Path(path).is_file():
        raise ModelInputError(f"{where}: no such file")
    try:
        with safe_open(path, framework="pt") as f:
            names = list(f.keys())
            if len(names) != 1 and INPUTS_TENSOR not in names:
                raise ModelInputError(
                    f"{where}: expected one tensor, or one named {INPUTS_TENSOR!r}, found "
                    f"{len(names)} ({', '.join(names[:5]) or 'none'})")
            name = names[0] if len(names) == 1 else INPUTS_TENSOR
            x = f.get_tensor(name)
    except (SafetensorError, OSError, ValueError) as e:
        if isinstance(e, ModelInputError):
            raise
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ModelInputError(f"{where}: not a readable safetensors file ({first})") from None
    if x.dim() != 2 or not x.is_floating_point():
        raise ModelInputError(f"{where}: tensor {name!r} expected floating-point [M, K] rows, "
                              f"found {x.dtype} {list(x.shape)}")
    if x.shape[0] == 0:  # every case would route no token to any expert: it tests nothing
        raise ModelInputError(f"{where}: tensor {name!r} has no rows ({list(x.shape)}); "
                              "expected at least one row of hidden states [M, K]")
    if K is not None and x.shape[1] != K:
        raise ModelInputError(f"{where}: tensor {name!r} has {x.shape[1]} columns, the "
                              f"layer's hidden size K is {K}")
    x = x.to(torch.float32)
    if not torch.isfinite(x).all():
        raise ModelInputError(f"{where}: tensor {name!r} holds non-finite values")
    return x


# --- routing ---------------------------------------------------------------------------------

def router_known(folder: str, layer: int) -> bool:
    """Whether layer `layer`'s routing function is one the reference knows (routing.py) and
    its router has a float weight to route with (read with the first expert only)."""
    from moecert.reference import load_checkpoint

    router = load_checkpoint(folder, layer=layer, experts=range(1)).router
    return router.function is not None and router.weight is not None


def route(loaded, x: torch.Tensor, topk: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The layer's own routing of x [M, K] (the loader's `Router.select`: its logits in
    float64 and its routing function): float32 weights and int32 global ids [M, topk]."""
    weights, ids = loaded.router.select(x, topk)
    return weights.to(torch.float32), ids.to(torch.int32)
