"""Bring the engines' MoE code (vLLM 0.25.1, transformers 5.24) to a GPU machine that has no
package registry, in parts small enough for the device tool's carry (docs/gpu-ci.md).

Here (with a registry), once:

    python tools/engine_carry.py pack [--out .gpu-carry] [--part-mib 44]

downloads vLLM's wheel and the packages its MoE path imports that the GPU image lacks (or
holds at a version vLLM or transformers refuses), leaves out of vLLM what a MoE layer never
loads (SLIMMED below, each with its reason), and writes one stream cut into parts
`.gpu-carry/p1`, `p2`, ... plus `.gpu-carry/manifest.json` (every part's sha256). Each part
travels in one call (`carry: [".gpu-carry/pK"]`, manifest.json copied into every part).

There, one call per part, back to back (the machine keeps /tmp while it stays warm):

    python3 tools/engine_carry.py receive .gpu-carry/pK

keeps the part under /tmp/engine-carry; once every part of the manifest is there it checks
the sha256s, unpacks vLLM into /tmp/engine-site and installs the wheels there (pip, no index,
no dependencies: the list below is the whole set). Two sites, because the engines pin
compressed-tensors differently (vLLM 0.25.1: 0.17.0; transformers' gate: 0.20.0):

    PYTHONPATH=/tmp/engine-site/vllm:/tmp/engine-site/common      vLLM
    PYTHONPATH=/tmp/engine-site/hf:/tmp/engine-site/common        transformers

`python3 tools/engine_carry.py env vllm|transformers` prints that PYTHONPATH.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

VLLM = "vllm==0.25.1"  # pins torch==2.11.0 and CUDA 13: the GPU image's torch (2.11.0+cu130)
# What the MoE path imports and the GPU image lacks, or holds at a version the engines refuse.
# Found on a CPU by importing kernels/vllm_backend.py's modules, every quantization method and
# the model classes of the fixtures with vLLM installed without dependencies, adding what each
# ModuleNotFoundError named (the image's package list: the device tool's KINDS.md).
COMMON = (
    "transformers==5.24.0", "huggingface_hub==2.4.0", "hf-xet==1.8.0", "tokenizers==0.23.3",
    "safetensors==0.8.0", "accelerate==1.15.0", "httpx2==2.16.2", "httpcore2==2.16.2",
    "anyio==4.16.0", "sniffio==1.3.1", "annotated-doc==0.0.7", "pydantic==2.14.4",
    "pydantic_core==2.50.5", "typing-inspection==0.4.5", "annotated-types==0.8.0",
    "typing_extensions==4.16.0", "msgspec==0.22.0", "cachetools==8.0.2", "cbor2==6.3.0",
    "pyzmq==27.3.0", "openai==3.57.0", "openai-harmony==0.0.8", "jiter", "distro",
    "pybase64==1.5.1", "loguru==0.7.3", "truststore==0.10.5",  # httpcore2 imports it
)
SITES = {  # site -> its own packages, beside COMMON
    # vLLM 0.25.1's pin; amd-quark: vLLM's OCP MX path (Quark MXFP4 W4A4 and MXFP6, its
    # emulation experts and dequantizers) imports quark.torch, which imports scipy, onnx,
    # ml_dtypes and onnxslim (found as COMMON was; without it the Quark MX folders errored with
    # vLLM's "The package `amd-quark` is required" on an H200, 2026-11-30 15:00); onnx at
    # amd-quark's own bound (<= 1.22)
    "vllm": ("compressed-tensors==0.17.0", "amd-quark==0.13", "scipy==1.18.1", "onnx==1.22.0",
             "ml_dtypes==0.6.0", "onnxslim==0.1.98"),
    "hf": ("compressed-tensors==0.20.0",),    # tox -e transformers' pin
}
# Left out of vLLM's wheel: never loaded by a MoE layer (attention and serving), measured
# from the wheel's own file list. Anything a MoE kernel path imports stays.
SLIMMED = {
    # flash-attention 3 stays: vllm_flash_attn's __init__ raises unless FA2 or FA3 loads, and
    # vLLM's quantization methods import it (seen on an H200 with both left out: every
    # quantized scheme refused with "vllm.vllm_flash_attn requires the CUDA flash attention
    # extensions"); FA3 is the Hopper one
    "vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so": "flash-attention 2 (attention only), 191 MB",
    "vllm/vllm-rs": "the Rust serving frontend binary, 38 MB",
    "vllm/third_party/fmha_sm100/": "Blackwell attention sources (sm100), 30 MB",
}
PY = "3.12"  # the GPU image's python (checked there by `receive`)
PLATFORMS = ("manylinux_2_39_x86_64", "manylinux_2_35_x86_64", "manylinux_2_34_x86_64",
             "manylinux_2_31_x86_64", "manylinux_2_28_x86_64", "manylinux_2_27_x86_64",
             "manylinux_2_24_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64")
RECEIVED = Path("/tmp/engine-carry")
SITE_ROOT = Path("/tmp/engine-site")
INSTALLED = "installed.sha256"  # the manifest sha256 of the install under SITE_ROOT


def download(specs, into: Path) -> None:
    plats = [a for p in PLATFORMS for a in ("--platform", p)]
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                    "--only-binary=:all:", "--python-version", PY, "--implementation", "cp",
                    *plats, "-d", str(into), *specs], check=True)


def slim_vllm(wheel: Path, tar: tarfile.TarFile) -> int:
    """vLLM's wheel, unpacked into the tar under vllm-tree/ without SLIMMED; bytes left out."""
    dropped = 0
    with zipfile.ZipFile(wheel) as z:
        for info in z.infolist():
            if info.is_dir():
                continue
            if any(info.filename == s or (s.endswith("/") and info.filename.startswith(s))
                   for s in SLIMMED):
                dropped += info.file_size
                continue
            data = z.read(info)
            member = tarfile.TarInfo(f"vllm-tree/{info.filename}")
            member.size, member.mode = len(data), 0o755 if info.filename.endswith(".so") else 0o644
            tar.addfile(member, io.BytesIO(data))
    return dropped


def pack(out: Path, part_mib: int) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        download([VLLM], tmp / "engine")
        download(COMMON, tmp / "common")
        for site, specs in SITES.items():
            download(specs, tmp / site)
        stream = tmp / "engines.tar.gz"
        with tarfile.open(stream, "w:gz", compresslevel=6) as tar:
            dropped = slim_vllm(next((tmp / "engine").glob("vllm-*.whl")), tar)
            for folder in ("common", *SITES):
                for whl in sorted((tmp / folder).glob("*.whl")):
                    tar.add(whl, f"wheels/{folder}/{whl.name}")
        data = stream.read_bytes()
    for old in out.glob("p*"):
        shutil.rmtree(old)
    size = part_mib << 20
    parts = []
    for i in range(0, len(data), size):
        chunk = data[i:i + size]
        folder = out / f"p{len(parts) + 1}"
        folder.mkdir()
        (folder / "chunk").write_bytes(chunk)
        parts.append({"name": folder.name, "bytes": len(chunk),
                      "sha256": hashlib.sha256(chunk).hexdigest()})
    manifest = {"vllm": VLLM, "common": COMMON, "sites": SITES, "python": PY,
                "slimmed": SLIMMED, "slimmed_bytes": dropped, "parts": parts,
                "sha256": hashlib.sha256(data).hexdigest()}
    text = json.dumps(manifest, indent=1)
    (out / "manifest.json").write_text(text)
    for p in parts:
        (out / p["name"] / "manifest.json").write_text(text)
    print(f"{len(data) / 2**20:.1f} MiB in {len(parts)} part(s) of at most {part_mib} MiB "
          f"under {out} ({dropped / 2**20:.0f} MiB of vLLM left out: SLIMMED)")


def receive(part: Path) -> int:
    manifest = json.loads((part / "manifest.json").read_text())
    if f"{sys.version_info[0]}.{sys.version_info[1]}" != manifest["python"]:
        print(f"engine_carry: the wheels are for python {manifest['python']}, this is "
              f"{sys.version.split()[0]}", file=sys.stderr)
        return 2
    # a machine still held keeps /tmp: a part carried again to it installs nothing again (on
    # 2026-12-01 five such calls reinstalled, 13-23 s of device time each)
    if (SITE_ROOT / INSTALLED).exists() and \
            (SITE_ROOT / INSTALLED).read_text() == manifest["sha256"]:
        print(f"engine_carry: already installed under {SITE_ROOT} from this manifest; "
              f"{part.name} not needed")
        return 0
    RECEIVED.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(part / "chunk", RECEIVED / part.name)
    have = [p for p in manifest["parts"] if (RECEIVED / p["name"]).exists()]
    print(f"engine_carry: {part.name} kept; {len(have)} of {len(manifest['parts'])} parts here")
    if len(have) < len(manifest["parts"]):
        return 0
    data = b"".join((RECEIVED / p["name"]).read_bytes() for p in manifest["parts"])
    if hashlib.sha256(data).hexdigest() != manifest["sha256"]:
        print("engine_carry: the parts do not match the manifest's sha256", file=sys.stderr)
        return 1
    shutil.rmtree(SITE_ROOT, ignore_errors=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        tar.extractall(RECEIVED / "x", filter="data")
    x = RECEIVED / "x"
    for folder in ("common", *manifest["sites"]):
        wheels = sorted(str(w) for w in (x / "wheels" / folder).glob("*.whl"))
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                        "--no-compile", "--target", str(SITE_ROOT / folder), *wheels],
                       check=True)
    shutil.move(str(x / "vllm-tree" / "vllm"), str(SITE_ROOT / "vllm" / "vllm"))
    for info in (x / "vllm-tree").glob("vllm-*.dist-info"):
        shutil.move(str(info), str(SITE_ROOT / "vllm" / info.name))
    (SITE_ROOT / INSTALLED).write_text(manifest["sha256"])  # last: only a whole install
    print(f"engine_carry: installed under {SITE_ROOT}")
    return 0


def env(engine: str) -> str:
    site = {"vllm": "vllm", "transformers": "hf"}[engine]
    return f"{SITE_ROOT / site}:{SITE_ROOT / 'common'}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="verb", required=True)
    p = sub.add_parser("pack", help="here: download and cut into parts")
    p.add_argument("--out", type=Path, default=Path(".gpu-carry"))
    p.add_argument("--part-mib", type=int, default=44)
    r = sub.add_parser("receive", help="there: keep one part; install once all are there")
    r.add_argument("part", type=Path)
    e = sub.add_parser("env", help="the PYTHONPATH of one engine's site")
    e.add_argument("engine", choices=("vllm", "transformers"))
    a = ap.parse_args(argv)
    if a.verb == "pack":
        pack(a.out, a.part_mib)
        return 0
    if a.verb == "receive":
        return receive(a.part)
    print(env(a.engine))
    return 0


if __name__ == "__main__":
    sys.exit(main())
