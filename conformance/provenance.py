"""Where and with what a row was produced: the problem's columns, the device (its name and
UUID, so rows of a multi-GPU run say which GPU ran them), the host, and package and backend
versions (SPEC section 4)."""

from __future__ import annotations

import functools
import platform as host_platform
from importlib.metadata import PackageNotFoundError, version


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
    return {"moecert_version": _version("moecert"), "torch_version": _version("torch"),
            "triton_version": _version("triton"), "host": host_platform.node()}


def versions() -> dict:
    """moecert's and its runtime's versions (`moecert --version`)."""
    return {"moecert": _version("moecert") or "unknown", "torch": _version("torch") or "-",
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


def _version(dist: str) -> str:
    try:
        return version(dist)
    except PackageNotFoundError:
        return ""
