"""Where and with what a row was produced: the problem's columns, the device (its name and
UUID, so rows of a multi-GPU run say which GPU ran them), the host, and package and backend
versions (SPEC section 4)."""

from __future__ import annotations

import functools
import platform as host_platform
import tomllib
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path


def problem_columns(case) -> dict:
    P = case.problem
    return {"M": P.M, "K": P.K, "N": P.N, "E": P.E, "topk": P.topk, "dtype": P.dtype,
            "activation": P.activation, "bias": P.bias,
            "router_on_input": P.apply_router_weight_on_input,
            "expert_map": "" if P.expert_map is None else ",".join(map(str, P.expert_map)),
            "activation_format": P.activation_format, "routing": case.routing,
            "seed": case.seed, "depth": case.depth}


def environment(device: str, backend: str) -> dict:
    return {**_device_columns(str(device)), **_versions(),
            "backend_version": _backend_version(backend)}


@functools.cache
def _versions() -> dict:
    return {"moecert_version": moecert_version(), "torch_version": _version("torch"),
            "triton_version": _version("triton"), "host": host_platform.node()}


def versions() -> dict:
    """moecert's and its runtime's versions (`moecert --version`)."""
    return {"moecert": moecert_version() or "unknown", "torch": _version("torch") or "-",
            "triton": _version("triton") or "-", "python": host_platform.python_version()}


@functools.cache
def _device_columns(device: str) -> dict:
    import torch

    dev = torch.device(device)
    name, uuid, platform = host_platform.processor() or "cpu", "", "cpu"
    if dev.type == "cuda" and torch.cuda.is_available():
        props = torch.cuda.get_device_properties(dev)
        name, uuid = props.name, str(getattr(props, "uuid", ""))
        platform = (f"rocm {props.gcnArchName}" if torch.version.hip else
                    f"cuda sm{props.major}{props.minor}")
    return {"platform": platform, "device": device, "device_name": name, "device_uuid": uuid}


@functools.cache
def _backend_version(name: str) -> str:
    try:
        from moecert.kernels import get_backend
        return str(getattr(get_backend(name), "version", ""))
    except Exception:
        return ""


@functools.cache
def moecert_version() -> str:
    """The installed distribution's version; a checkout run through PYTHONPATH without
    installing (the GPU machines) has none: the version its pyproject.toml declares."""
    found = _version("moecert")
    if found:
        return found
    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    try:
        return tomllib.loads(pyproject.read_text())["project"]["version"] + " (checkout)"
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        return ""


def _version(dist: str) -> str:
    try:
        return version(dist)
    except PackageNotFoundError:
        return ""


def environment_record(device: str, backend: str) -> dict:
    """Everything a certificate records about where its run ran: the device columns of a
    row, the packages' versions, the CUDA/ROCm runtime and driver, the OS."""
    import torch

    return {**_device_columns(str(device)), **versions(), "host": host_platform.node(),
            "os": host_platform.platform(), "backend": backend,
            "backend_version": _backend_version(backend),
            "cuda_runtime": torch.version.cuda or "", "hip_runtime": torch.version.hip or "",
            "driver": _driver_version(str(device))}


def _driver_version(device: str) -> str:
    """The GPU driver's version (nvidia-smi's), "" on a CPU or where it cannot be read."""
    import subprocess

    if not device.startswith("cuda"):
        return ""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout.splitlines()[0].strip() if out.returncode == 0 and out.stdout else ""


def source_state() -> tuple[dict, str]:
    """The moecert source that ran: for a git checkout its commit, whether the tree is clean,
    and the patch (`git diff HEAD` plus the names of untracked files) as text; otherwise the
    installed version and no patch."""
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]  # conformance/ sits at the checkout's root

    def git(*args) -> str:
        out = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                             timeout=60)
        if out.returncode:
            raise OSError(out.stderr.strip())
        return out.stdout

    try:
        top = Path(git("rev-parse", "--show-toplevel").strip()).resolve()
        if top != root or not (root / "pyproject.toml").is_file():
            raise OSError("not the moecert checkout")
        commit = git("rev-parse", "HEAD").strip()
        patch = git("diff", "HEAD", "--binary")
        untracked = git("ls-files", "--others", "--exclude-standard").split()
    except (OSError, subprocess.TimeoutExpired):
        return {"kind": "installed", "version": versions()["moecert"]}, ""
    if untracked:
        patch += "".join(f"# untracked: {name}\n" for name in untracked)
    return {"kind": "git", "commit": commit, "clean": not patch}, patch
