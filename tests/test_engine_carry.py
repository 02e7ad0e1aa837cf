"""tools/engine_carry.py: what it leaves out of vLLM's wheel, and that the parts it cuts go back
together only whole (a missing or altered part installs nothing)."""

import hashlib
import importlib.util
import io
import json
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def carry():
    spec = importlib.util.spec_from_file_location("engine_carry", ROOT / "tools/engine_carry.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_slim_vllm_leaves_out_only_what_slimmed_names(carry, tmp_path):
    wheel = tmp_path / "vllm-0-py3-none-any.whl"
    kept = ["vllm/_moe_C_stable_libtorch.abi3.so", "vllm/model_executor/layers/fused_moe/x.py",
            "vllm/third_party/deep_gemm/_C.so", "vllm/vllm_flash_attn/__init__.py"]
    dropped = list(carry.SLIMMED)
    dropped[dropped.index("vllm/third_party/fmha_sm100/")] = "vllm/third_party/fmha_sm100/a.h"
    with zipfile.ZipFile(wheel, "w") as z:
        for name in kept + dropped:
            z.writestr(name, b"x" * 10)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        left_out = carry.slim_vllm(wheel, tar)
    buf.seek(0)
    with tarfile.open(fileobj=buf) as tar:
        names = tar.getnames()
    assert sorted(names) == sorted(f"vllm-tree/{n}" for n in kept)
    assert left_out == 10 * len(dropped)


def _parts(tmp_path: Path, payload: bytes, n: int) -> Path:
    out = tmp_path / "carry"
    size = -(-len(payload) // n)
    parts = []
    for i in range(n):
        chunk = payload[i * size:(i + 1) * size]
        (out / f"p{i + 1}").mkdir(parents=True)
        (out / f"p{i + 1}" / "chunk").write_bytes(chunk)
        parts.append({"name": f"p{i + 1}", "bytes": len(chunk),
                      "sha256": hashlib.sha256(chunk).hexdigest()})
    manifest = json.dumps({"python": f"{sys.version_info[0]}.{sys.version_info[1]}",
                           "sites": {}, "parts": parts,
                           "sha256": hashlib.sha256(payload).hexdigest()})
    for p in parts:
        (out / p["name"] / "manifest.json").write_text(manifest)
    return out


def test_receive_installs_nothing_until_every_part_is_there_and_whole(carry, tmp_path,
                                                                        monkeypatch, capsys):
    monkeypatch.setattr(carry, "RECEIVED", tmp_path / "received")
    monkeypatch.setattr(carry, "SITE_ROOT", tmp_path / "site")
    out = _parts(tmp_path, b"not the stream the manifest names" * 100, 3)
    assert carry.receive(out / "p1") == 0
    assert "1 of 3 parts here" in capsys.readouterr().out
    assert not (tmp_path / "site").exists()
    assert carry.receive(out / "p2") == 0
    (out / "p3" / "chunk").write_bytes(b"altered")  # the last part is not the one packed
    assert carry.receive(out / "p3") == 1
    assert "do not match the manifest's sha256" in capsys.readouterr().err
    assert not (tmp_path / "site").exists()


def test_receive_refuses_another_python(carry, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(carry, "RECEIVED", tmp_path / "received")
    out = _parts(tmp_path, b"abc", 1)
    manifest = json.loads((out / "p1" / "manifest.json").read_text())
    manifest["python"] = "2.7"
    (out / "p1" / "manifest.json").write_text(json.dumps(manifest))
    assert carry.receive(out / "p1") == 2
    assert "the wheels are for python 2.7" in capsys.readouterr().err


def test_receive_on_a_machine_installed_from_the_same_manifest_installs_nothing(
        carry, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(carry, "RECEIVED", tmp_path / "received")
    monkeypatch.setattr(carry, "SITE_ROOT", tmp_path / "site")
    out = _parts(tmp_path, b"the stream" * 100, 2)
    manifest = json.loads((out / "p1" / "manifest.json").read_text())
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / carry.INSTALLED).write_text(manifest["sha256"])
    assert carry.receive(out / "p1") == 0
    assert "already installed" in capsys.readouterr().out
    assert not (tmp_path / "received").exists()
    # another manifest's install: the part is kept, as on a fresh machine
    (tmp_path / "site" / carry.INSTALLED).write_text("0" * 64)
    assert carry.receive(out / "p1") == 0
    assert "1 of 2 parts here" in capsys.readouterr().out
