"""The platform model the oracle selects for: cuda (with a compute capability), rocm (with a
gfx architecture), xpu or cpu. Read from the running torch, or built explicitly so that
selection can be tested for every platform on any machine."""

from __future__ import annotations

from dataclasses import dataclass

import torch

KINDS = ("cuda", "rocm", "xpu", "cpu")


@dataclass(frozen=True)
class Platform:
    kind: str
    capability: tuple[int, int] | None = None  # cuda only, e.g. (9, 0)
    arch: str | None = None  # rocm only, e.g. "gfx942"
    simulated: bool = True  # False only for Platform.current()

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"platform kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if self.kind == "cuda" and self.capability is None:
            raise ValueError("a cuda platform needs a compute capability, e.g. (9, 0)")

    @classmethod
    def cuda(cls, capability: tuple[int, int] = (9, 0)) -> Platform:
        return cls("cuda", capability=tuple(capability))

    @classmethod
    def rocm(cls, arch: str = "gfx942") -> Platform:
        return cls("rocm", arch=arch)

    @classmethod
    def xpu(cls) -> Platform:
        return cls("xpu")

    @classmethod
    def cpu(cls) -> Platform:
        return cls("cpu")

    @classmethod
    def current(cls) -> Platform:
        """The platform torch runs on here (its first accelerator, else the CPU)."""
        if torch.cuda.is_available():
            if torch.version.hip is not None:
                arch = torch.cuda.get_device_properties(0).gcnArchName.split(":")[0]
                return cls("rocm", arch=arch, simulated=False)
            return cls("cuda", capability=torch.cuda.get_device_capability(0), simulated=False)
        if hasattr(torch, "xpu") and torch.xpu.is_available():
            return cls("xpu", simulated=False)
        return cls("cpu", simulated=False)

    def __str__(self) -> str:
        if self.kind == "cuda":
            return f"cuda sm{self.capability[0]}{self.capability[1]}"
        if self.kind == "rocm":
            return f"rocm {self.arch}"
        return self.kind


# The platforms `moecert list` tabulates: one per distinct set of backend claims.
SIMULATED_PLATFORMS = (
    Platform.cuda((7, 5)), Platform.cuda((8, 0)), Platform.cuda((8, 9)), Platform.cuda((9, 0)),
    Platform.cuda((10, 0)), Platform.rocm("gfx942"), Platform.rocm("gfx950"), Platform.xpu(),
    Platform.cpu(),
)


def platform_of_device(device: torch.device) -> Platform:
    """The (real) platform a tensor on `device` runs on."""
    if torch.device(device).type == "cpu":
        return Platform("cpu", simulated=False)
    return Platform.current()
