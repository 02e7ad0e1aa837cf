"""A model folder on disk: its config files and its safetensors, read lazily.

`ModelFolder` opens only the headers until a tensor is asked for, then reads that tensor (or
a slice of it) with `safetensors.safe_open(...).get_slice`, so reading one layer of a sharded
model touches that layer's bytes only. Every failure of the files is a `CheckpointError`
naming the file (and the tensor, where there is one).
"""

from __future__ import annotations

import hashlib
import json
from contextlib import ExitStack
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open

from ..errors import CheckpointError

INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"


def resolve(path) -> Path:
    """The model folder `path` names: the folder itself, or an HF cache repo folder's
    snapshot (`models--org--name/` -> `snapshots/<refs/main>/`, or its only snapshot)."""
    p = Path(path).expanduser()
    if not p.exists():
        raise CheckpointError(str(p), "a model folder", "no such file or directory")
    if not p.is_dir():
        raise CheckpointError(str(p), "a model folder (config.json and *.safetensors)",
                              "a file")
    snaps = p / "snapshots"
    if not (p / "config.json").exists() and snaps.is_dir():
        ref = p / "refs" / "main"
        if ref.is_file() and (snaps / ref.read_text().strip()).is_dir():
            return snaps / ref.read_text().strip()
        revs = sorted(d for d in snaps.iterdir() if d.is_dir())
        if len(revs) != 1:
            raise CheckpointError(str(snaps), "one snapshot (or refs/main naming one)",
                                  f"{len(revs)} snapshots")
        return revs[0]
    return p


def read_json(path: Path, required: bool = True) -> dict | None:
    if not path.exists():
        if required:
            raise CheckpointError(str(path), "a JSON file", "missing")
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(str(path), "valid JSON", f"unreadable ({type(e).__name__}: "
                              f"{e})") from None
    if not isinstance(data, dict):
        raise CheckpointError(str(path), "a JSON object", type(data).__name__)
    return data


class ModelFolder:
    """Config files and tensors of one HF-format model folder.

    names():     every tensor name, from the index or the headers (no tensor data read)
    read(name):  one tensor (or `read(name, index)`, a slice of it), recorded in `read_log`
    """

    def __init__(self, path):
        self.root = resolve(path)
        self.config = read_json(self.root / "config.json")
        self.hf_quant = read_json(self.root / "hf_quant_config.json", required=False)
        self.quantize_config = read_json(self.root / "quantize_config.json", required=False)
        self._stack = ExitStack()
        self._open: dict[Path, object] = {}
        self.read_log: dict[str, tuple[str, str]] = {}  # name -> (file, sha256 of its entry)
        self.weight_map = self._weight_map()

    # --- which file holds what ----------------------------------------------------------------
    def _weight_map(self) -> dict[str, Path]:
        index = self.root / INDEX
        if index.exists():
            data = read_json(index)
            wm = data.get("weight_map")
            if not isinstance(wm, dict) or not wm:
                raise CheckpointError(f"{index}: weight_map", "a map of tensor -> shard file",
                                      repr(type(wm).__name__))
            out = {}
            for name, shard in wm.items():
                f = self.root / shard
                if not f.exists():
                    raise CheckpointError(f"{index}: weight_map[{name!r}]", f"shard {shard} "
                                          "in the folder", "missing")
                out[name] = f
            return out
        files = [self.root / SINGLE] if (self.root / SINGLE).exists() else \
            sorted(self.root.glob("*.safetensors"))
        if not files:
            raise CheckpointError(str(self.root), f"{SINGLE}, {INDEX} or *.safetensors",
                                  "no weights")
        out = {}
        for f in files:
            for name in self._handle(f).keys():
                out[name] = f
        return out

    def names(self) -> list[str]:
        return list(self.weight_map)

    def file_of(self, name: str) -> Path:
        if name not in self.weight_map:
            raise CheckpointError(name, "a tensor in the model folder", "missing")
        return self.weight_map[name]

    # --- reading ---------------------------------------------------------------------------
    def _handle(self, f: Path):
        h = self._open.get(f)
        if h is None:
            try:
                h = self._stack.enter_context(safe_open(str(f), framework="pt"))
            except (SafetensorError, OSError, ValueError) as e:
                raise CheckpointError(str(f), "a complete safetensors file",
                                      f"unreadable ({_reason(e)})") from None
            self._open[f] = h
        return h

    def shape(self, name: str) -> tuple[int, ...]:
        f = self.file_of(name)
        try:
            return tuple(self._handle(f).get_slice(name).get_shape())
        except SafetensorError as e:
            raise CheckpointError(f"{f.name}: {name}", "a tensor of the file",
                                  f"unreadable ({_reason(e)})") from None

    def read(self, name: str, index=None) -> torch.Tensor:
        """Tensor `name` (or its slice `index`, e.g. `slice(0, 8)` of a fused expert tensor),
        read from its file; E8M0 is returned as its uint8 bit patterns."""
        f = self.file_of(name)
        try:
            h = self._handle(f)
            if name not in h.keys():
                raise CheckpointError(f"{f.name}: {name}", "the tensor the index puts in this "
                                      "file", "missing from the file")
            t = h.get_tensor(name) if index is None else h.get_slice(name)[index]
        except SafetensorError as e:
            raise CheckpointError(f"{f.name}: {name}", "a readable tensor",
                                  f"unreadable ({_reason(e)})") from None
        if t.dtype == getattr(torch, "float8_e8m0fnu", None):
            t = t.view(torch.uint8)
        key = name if index is None else f"{name}[{_describe_index(index)}]"
        self.read_log[key] = (f.name, tensor_digest(key, t))
        return t

    def sha256(self) -> str:
        """A stable hash over the tensors read: names, dtypes, shapes and bytes (sorted)."""
        h = hashlib.sha256()
        for key in sorted(self.read_log):
            h.update(self.read_log[key][1].encode())
        return h.hexdigest()

    def files_read(self) -> list[str]:
        return sorted({f for f, _ in self.read_log.values()})

    def close(self) -> None:
        self._stack.close()
        self._open.clear()


def tensor_digest(name: str, t: torch.Tensor) -> str:
    """sha256 of a tensor's name, dtype, shape and bytes (row-major)."""
    h = hashlib.sha256(f"{name}|{t.dtype}|{list(t.shape)}|".encode())
    h.update(t.contiguous().reshape(-1).view(torch.uint8).numpy().data)
    return h.hexdigest()


def _reason(e: Exception) -> str:
    msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return msg[:200]


def _describe_index(index) -> str:
    parts = index if isinstance(index, tuple) else (index,)
    return ", ".join(f"{s.start or 0}:{s.stop}" if isinstance(s, slice) else str(s)
                     for s in parts)
