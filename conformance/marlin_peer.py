"""The peer `moecert bench --marlin-lib` times in the same run: vLLM's Marlin MoE (W4A16,
uint4b8, group 128, bf16), through the functions of `marlin_anchor.py` (kept outside moecert,
in ../shared/tools/; imported here by path, nothing of it copied). Marlin needs CUDA and
vLLM's `_moe_C_stable_libtorch.abi3.so`; anywhere else the peer says why it is not available.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import replace
from pathlib import Path

from moecert.kernels import QuantConfig

# The anchor beside the checkout (../shared/tools/ of the repository root), unless
# MOECERT_MARLIN_ANCHOR or --marlin-anchor names another.
DEFAULT_ANCHOR = Path(__file__).resolve().parents[1].parent / "shared/tools/marlin_anchor.py"
# The one configuration the anchor times: GPTQ int4, group 128, symmetric, no act-order.
MARLIN_QUANT = replace(QuantConfig.defaults("gptq-int4"), group_size=128, sym=True,
                       act_order=False)


def default_anchor() -> Path:
    return Path(os.environ.get("MOECERT_MARLIN_ANCHOR", DEFAULT_ANCHOR))


def marlin_runs(quant: QuantConfig, problem) -> bool:
    """Whether the anchor's Marlin computes this layer: its quantization and a plain bf16
    SiLU layer with every expert local."""
    return (quant == MARLIN_QUANT and problem.dtype == "bf16" and problem.activation == "silu"
            and not problem.bias
            and problem.expert_map is None and problem.activation_format == "standard"
            and not problem.apply_router_weight_on_input)


# The anchor's time per call is a median over calls launched from Python without a CUDA
# graph: where the GPU work is short the host's launches set it, and it moved between runs
# of the same code on an H100 (Qwen3-30B-A3B at M = 1: 43 to 158 us over eight runs, at
# M = 16 122 to 336 us; within 3% from Mixtral's M = 16 on). The peer takes the fastest of
# a few such medians: Marlin at its best observed, never flattering the ratio.
PEER_REPEATS = 3


class MarlinPeer:
    """Marlin's seconds per (shape, M): the fastest of `repeats` of the anchor's medians,
    measured once per run."""

    def __init__(self, anchor, repeats: int = PEER_REPEATS):
        self.anchor, self.repeats = anchor, repeats
        self._seconds: dict[tuple, float] = {}

    def seconds(self, problem) -> float:
        P = problem
        key = (P.E, P.K, P.N, P.topk, P.M)
        if key not in self._seconds:
            self._seconds[key] = min(self.anchor.time_marlin(*key)[0]
                                     for _ in range(self.repeats)) / 1e6
        return self._seconds[key]


def load_marlin(lib: str | os.PathLike, anchor: str | os.PathLike, device
                ) -> tuple[MarlinPeer | None, str | None]:
    """(the peer, None), or (None, why it is not available)."""
    if device.type != "cuda":
        return None, f"Marlin runs on CUDA only, not on {device}"
    anchor = Path(anchor)
    if not anchor.is_file():
        return None, f"no marlin_anchor.py at {anchor} (give --marlin-anchor FILE)"
    try:
        spec = importlib.util.spec_from_file_location("marlin_anchor", anchor)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        module.load(str(lib))
    except Exception as e:  # a library built for another torch, no triton: the reason
        return None, f"{anchor} did not load {lib}: {type(e).__name__}: {e}"
    return MarlinPeer(module), None
