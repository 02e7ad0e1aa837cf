"""A model folder on disk: its config files and its safetensors, read lazily.

`ModelFolder` opens only the headers until a tensor is asked for, then reads that tensor (or
a slice of it) with `safetensors.safe_open(...).get_slice`, so reading one layer of a sharded
model touches that layer's bytes only. Every failure of the files is a `CheckpointError`
naming the file (and the tensor, where there is one).
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open

from ..errors import CheckpointError

INDEX = "model.safetensors.index.json"
# safetensors dtype names -> torch (E8M0 read as its bytes)
_ST_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16,
              "BF16": torch.bfloat16, "I64": torch.int64, "I32": torch.int32,
              "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8, "BOOL": torch.bool,
              "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2,
              "F8_E8M0": torch.uint8}
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
        self._headers: dict[Path, tuple[dict, int, object]] = {}
        # name -> (file, sha256 of the entry, or the tensor until `sha256` hashes it)
        self.read_log: dict[str, tuple[str, object]] = {}
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
            out, paths = {}, {}
            for name, shard in wm.items():
                if shard not in paths:
                    paths[shard] = self.root / shard
                    if not paths[shard].exists():
                        raise CheckpointError(f"{index}: weight_map[{name!r}]", f"shard "
                                              f"{shard} in the folder", "missing")
                out[name] = paths[shard]
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

    def dtype(self, name: str) -> str:
        """Tensor `name`'s dtype as its file's header names it ("BF16", "F8_E4M3", ...), read
        without its data."""
        f = self.file_of(name)
        self._handle(f)  # safe_open validates the header first
        header = self._header(f)[0]
        if name not in header:
            raise CheckpointError(f"{f.name}: {name}", "the tensor the index puts in this file",
                                  "missing from the file")
        return header[name]["dtype"]

    def read(self, name: str, index=None, into: torch.Tensor | None = None) -> torch.Tensor:
        """Tensor `name` (or its rows `index`, a `slice` along dim 0, e.g. experts of a fused
        tensor), read from its file; E8M0 is returned as its uint8 bit patterns.

        The bytes are read with plain file reads at the offsets of the header that
        `safe_open` validated, not through safe_open's memory map: pages of a mapped file
        count as resident memory while the file is open, which doubled the peak memory of a
        layer's load (docs/checkpoints.md has the measurement). `into`: a contiguous tensor
        to read the bytes into when it has the tensor's dtype and size (the slot of the
        Checkpoint tensor it goes to: no second copy); the tensor is returned either way."""
        f = self.file_of(name)
        try:
            h = self._handle(f)
            if name not in self._header(f)[0]:
                raise CheckpointError(f"{f.name}: {name}", "the tensor the index puts in this "
                                      "file", "missing from the file")
            t = self._pread(f, name, index, into)
            if t is None:  # a dtype torch has no name for here: safe_open's own reader
                t = h.get_tensor(name) if index is None else h.get_slice(name)[index]
        except SafetensorError as e:
            raise CheckpointError(f"{f.name}: {name}", "a readable tensor",
                                  f"unreadable ({_reason(e)})") from None
        if t.dtype == getattr(torch, "float8_e8m0fnu", None):
            t = t.view(torch.uint8)
        key = name if index is None else f"{name}[{_describe_index(index)}]"
        # a tensor read into its Checkpoint slot stays there: hash it later, in parallel
        self.read_log[key] = (f.name, t if t is into else tensor_digest(key, t))
        return t

    def sha256(self) -> str:
        """A stable hash over the tensors read: names, dtypes, shapes and bytes (sorted)."""
        pending = [k for k, (_, d) in self.read_log.items() if isinstance(d, torch.Tensor)]
        with ThreadPoolExecutor(os.cpu_count() or 1) as pool:  # hashlib frees the GIL
            digests = pool.map(lambda k: tensor_digest(k, self.read_log[k][1]), pending)
            for k, d in zip(pending, digests, strict=True):
                self.read_log[k] = (self.read_log[k][0], d)
        h = hashlib.sha256()
        for key in sorted(self.read_log):
            h.update(self.read_log[key][1].encode())
        return h.hexdigest()

    def files_read(self) -> list[str]:
        return sorted({f for f, _ in self.read_log.values()})

    def _header(self, f: Path) -> tuple[dict, int, object]:
        """(header, offset of the data, open file) of a file safe_open has validated."""
        if f not in self._headers:
            fh = self._stack.enter_context(open(f, "rb"))
            n = struct.unpack("<Q", fh.read(8))[0]
            self._headers[f] = (json.loads(fh.read(n)), 8 + n, fh)
        return self._headers[f]

    def _pread(self, f: Path, name: str, index, into) -> torch.Tensor | None:
        header, base, fh = self._header(f)
        info = header[name]
        dtype = _ST_DTYPES.get(info["dtype"])
        if dtype is None or not (index is None or (isinstance(index, slice) and
                                 index.step in (None, 1))):
            return None
        shape = list(info["shape"])
        start, stop = info["data_offsets"]
        if index is not None and shape:
            first, last, _ = index.indices(shape[0])
            row = (stop - start) // max(shape[0], 1)
            start, stop, shape[0] = start + first * row, start + max(last, first) * row, \
                max(last - first, 0)
        direct = (into is not None and into.dtype == dtype and into.is_contiguous()
                  and into.numel() * into.element_size() == stop - start)
        buf = into.view(torch.uint8).reshape(-1) if direct else \
            torch.empty(stop - start, dtype=torch.uint8)
        fh.seek(base + start)
        if fh.readinto(memoryview(buf.numpy())) != stop - start:
            raise CheckpointError(f"{f.name}: {name}", "a complete tensor", "a short read")
        return into if direct else buf.view(dtype).reshape(shape)

    def close(self) -> None:
        self._stack.close()
        self._open.clear()
        self._headers.clear()


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
