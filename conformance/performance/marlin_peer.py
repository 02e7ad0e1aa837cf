"""The peer `moecert bench --marlin-lib` times in the same run: vLLM's Marlin MoE, bf16
activations, for GPTQ int4 (uint4b8, group 128) through the functions of `marlin_anchor.py`
(kept outside moecert, in ../shared/tools/; imported here by path, nothing of it copied), and
for FP4 weights (vLLM's `float4_e2m1f` codes with E8M0 scales per 32, MXFP4, or e4m3 scales
per 16 and a global scale, NVFP4) by calling the same library op, `moe_wna16_marlin_gemm`,
with those types (`time_marlin_e2m1`). Weights and scales are random bits in Marlin's shapes:
timing does not depend on their values. Marlin needs CUDA and vLLM's
`_moe_C_stable_libtorch.abi3.so`; anywhere else the peer says why it is not available.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from moecert.kernels import Variant
from moecert.reference.schemes.elements import EXPONENT

# The anchor beside the checkout (../shared/tools/ of the repository root), unless
# MOECERT_MARLIN_ANCHOR or --marlin-anchor names another (which must then exist).
DEFAULT_ANCHOR = Path(__file__).resolve().parents[3] / "shared/tools/marlin_anchor.py"
# The one configuration the anchor times: GPTQ int4, group 128, symmetric, no act-order.
MARLIN_QUANT = Variant("gptq-int4", group_size=128, sym=True, act_order=False)


ANCHOR_VARIABLE = "MOECERT_MARLIN_ANCHOR"


def default_anchor() -> Path:
    return Path(os.environ.get(ANCHOR_VARIABLE, DEFAULT_ANCHOR))


def named_anchor(flag_value: str | None) -> tuple[str, str] | None:
    """(where it was named, the path) of an anchor the user named, by --marlin-anchor or
    MOECERT_MARLIN_ANCHOR; None for the default beside a checkout, whose absence is only
    "not available"."""
    if flag_value:
        return "--marlin-anchor", flag_value
    named = os.environ.get(ANCHOR_VARIABLE, "")
    return (f"{ANCHOR_VARIABLE}=", named) if named.strip() else None


# FP4 weights Marlin takes (scheme defaults: W4A16, bf16 or fp16 activations unquantized)
MARLIN_E2M1 = {"mxfp4": Variant.defaults("mxfp4"), "nvfp4": Variant.defaults("nvfp4")}
FLOAT4_E2M1F = 562949953487106  # vLLM ScalarType id of float4_e2m1f (../shared/NOTES.md)
MARLIN_PAD = 256


def marlin_kind(quant: Variant, problem) -> str | None:
    """Which Marlin computes this layer ("uint4b8", "mxfp4", "nvfp4"), None when none
    does: its quantization, bf16, every expert local. The int4 anchor times a plain SiLU
    layer; the FP4 timing also takes biases and times gpt-oss's SwiGLU variants as SiLU-mul
    (one elementwise kernel either way, outside Marlin's GEMMs)."""
    kind = ("uint4b8" if quant == MARLIN_QUANT
            else next((k for k, q in MARLIN_E2M1.items() if q == quant), None))
    if kind is None or problem.dtype != "bf16" or problem.expert_map is not None:
        return None
    if problem.activation_format != "standard" or problem.apply_router_weight_on_input:
        return None
    if kind == "uint4b8":
        return kind if problem.activation == "silu" and not problem.bias else None
    return kind if problem.activation.startswith(("silu", "swiglu")) else None


def marlin_runs(quant: Variant, problem) -> bool:
    """Whether a Marlin of the peer computes this layer (`marlin_kind`)."""
    return marlin_kind(quant, problem) is not None


def time_marlin_e2m1(anchor, E, K, N, topk, M, quant: Variant, bias: bool) -> float:
    """Median us of Marlin's GEMM1 + SiLU-mul + GEMM2 + top-k sum with the e2m1 weights of
    `quant` (one of `MARLIN_E2M1`), as the anchor's `time_marlin` times int4: the same op and
    alignment (`anchor._align`), random bits in Marlin's shapes (4-bit codes take int4's
    [E, K / 16, 2 N * 16 / 8] words). The scheme record says the rest: its block (32 or 16),
    its scale element (E8M0 codes or e4m3 floats) and whether a global scale multiplies."""
    import torch
    import triton

    # Marlin's tiles need N and K in multiples of its thread tiles: pad as vLLM pads
    # gpt-oss-120b (2880 -> 3072) for Marlin, so the peer reads up to 7% more bytes
    K, N = -(-K // MARLIN_PAD) * MARLIN_PAD, -(-N // MARLIN_PAD) * MARLIN_PAD
    torch.manual_seed(0)
    dev = "cuda"
    w1 = torch.randint(-2**31, 2**31 - 1, (E, K // 16, 4 * N), dtype=torch.int32, device=dev)
    w2 = torch.randint(-2**31, 2**31 - 1, (E, N // 16, 2 * K), dtype=torch.int32, device=dev)
    info = quant.info
    group = info.scale_block
    power_of_two = info.scale_element.kind == EXPONENT

    def scales(rows, cols):
        if power_of_two:  # E8M0 codes 2^-9 .. 2^-1
            return torch.randint(118, 127, (E, rows // group, cols), dtype=torch.uint8,
                                 device=dev).view(torch.float8_e8m0fnu)
        return (torch.rand(E, rows // group, cols, device=dev) + 0.5).to(torch.float8_e4m3fn)

    s1, s2 = scales(K, 2 * N), scales(N, K)
    g1 = g2 = torch.ones(E, device=dev) if info.global_scale != "none" else None
    b1 = torch.randn(E, 2 * N, device=dev, dtype=torch.bfloat16) if bias else None
    b2 = torch.randn(E, K, device=dev, dtype=torch.bfloat16) if bias else None
    x = torch.randn(M, K, device=dev, dtype=torch.bfloat16)
    tw, ti = torch.softmax(torch.randn(M, E, device=dev), -1).topk(topk)
    tw, ti = (tw / tw.sum(-1, keepdim=True)).float(), ti.int()
    per_expert = M * topk / E
    bs = 8 if per_expert < 8 else 16 if per_expert < 16 else 32 if per_expert < 32 else 64
    sid, eid, ntp = anchor._align(ti, E, bs)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    ws = torch.zeros(sms * 4, dtype=torch.int, device=dev)
    c1 = torch.empty(M * topk, 2 * N, device=dev, dtype=torch.bfloat16)
    c2 = torch.empty(M * topk, N, device=dev, dtype=torch.bfloat16)
    c3 = torch.empty(M * topk, K, device=dev, dtype=torch.bfloat16)
    gemm = torch.ops._moe_C.moe_wna16_marlin_gemm

    def step():
        gemm(x, c1, w1, b1, s1, None, g1, None, ws, sid, eid, ntp, tw, bs, topk, False,
             FLOAT4_E2M1F, M, 2 * N, K, False, True, False, -1, -1, -1)
        g, u = c1.view(-1, 2 * N).chunk(2, -1)
        torch.mul(torch.nn.functional.silu(g), u, out=c2)
        gemm(c2, c3, w2, b2, s2, None, g2, None, ws, sid, eid, ntp, tw, bs, 1, True,
             FLOAT4_E2M1F, M * topk, K, N, False, True, False, -1, -1, -1)
        return c3.view(M, topk, K).sum(1)

    step()
    torch.cuda.synchronize()
    return triton.testing.do_bench(step, warmup=25, rep=200, return_mode="median") * 1e3


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

    def seconds(self, problem, quant: Variant = MARLIN_QUANT) -> float:
        P = problem
        kind = marlin_kind(quant, P) or "uint4b8"
        shape = (P.E, P.K, P.N, P.topk, P.M)
        key = (*shape, kind, bool(P.bias))
        if key not in self._seconds:
            if kind == "uint4b8":
                def once():
                    return self.anchor.time_marlin(*shape)[0]
            else:
                def once():
                    return time_marlin_e2m1(self.anchor, *shape, quant, bool(P.bias))
            self._seconds[key] = min(once() for _ in range(self.repeats)) / 1e6
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
