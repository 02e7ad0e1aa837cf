"""The peer `moecert bench --marlin-lib` times in the same run: vLLM's Marlin MoE, bf16
activations, for GPTQ int4 (uint4b8, group 128) and for FP4 weights (vLLM's `float4_e2m1f`
codes with E8M0 scales per 32, MXFP4, or e4m3 scales per 16 and a global scale, NVFP4), by
calling the library's op `moe_wna16_marlin_gemm` (`time_marlin_w4`). Weights and scales are
random bits in Marlin's shapes: timing does not depend on their values. Marlin needs CUDA and
vLLM's `_moe_C_stable_libtorch.abi3.so`; anywhere else the peer says why it is not available.

The op's arguments are passed by the names of the library's own schema (`marlin_arguments`):
vLLM 0.25.1 (the one that fits the GPU machines' torch) takes 29, among them `g_idx`, `perm`
and `is_zp_float`, where the calls written for 0.33 (the anchor's, this module's before)
passed 26 in order: in 0.25.1's order they bind the workspace to `g_idx`. The library is
loaded and the tokens sorted by `marlin_anchor.py`'s `load` and `_align` where an anchor file
is there (../shared/tools/, imported by path, nothing of it copied), else by the library's own
ops (`LibraryOps`): on the GPU machine, where the checkout's neighbours do not travel,
`--marlin-lib` alone is enough.
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


def scale_group(quant: Variant) -> int:
    """Rows of K one scale covers in the peer's weights: the scheme record's block (FP4: 32,
    16), else the variant's group (int4: 128; its record's block is 0, groups being a variant
    attribute). Reading the record's alone divided by zero for every int4 row from 2026-11-28
    (issue 35's record read) until 2026-11-30, a 'Marlin failed' in each row's message."""
    return quant.info.scale_block or quant.group_size


def marlin_runs(quant: Variant, problem) -> bool:
    """Whether a Marlin of the peer computes this layer (`marlin_kind`)."""
    return marlin_kind(quant, problem) is not None


# What the peer passes to `moe_wna16_marlin_gemm` besides the tensors and sizes, by the names
# of vLLM 0.25.1's schema (read from its `_moe_C_stable_libtorch.abi3.so`), with the values
# vLLM 0.25.1's fused_marlin_moe passes for a layer without act order; any other argument
# the schema has must be optional (Tensor?) and gets None (act order, zero points, activation
# scales: none here).
MARLIN_FLAGS = {"is_full_k": True, "use_atomic_add": False, "use_fp32_reduce": True,
                "is_zp_float": False, "thread_k": -1, "thread_n": -1, "blocks_per_sm": -1}


def marlin_arguments(schema, values: dict) -> list:
    """The positional arguments of an op with this schema (torch.FunctionSchema) from
    `values` by argument name; an optional argument not in `values` is None. ValueError
    naming the argument when the schema asks for one that is neither, or has no place for
    a value given (another vLLM's op: its schema printed in the message)."""
    names = [a.name for a in schema.arguments]
    unplaced = sorted(k for k, v in values.items() if k not in names and v is not None)
    if unplaced:
        raise ValueError(f"{schema.name}: the library's schema has no argument "
                         f"{', '.join(unplaced)} ({schema})")
    args = []
    for a in schema.arguments:
        if a.name in values:
            args.append(values[a.name])
        elif a.type.kind() == "OptionalType":
            args.append(None)
        else:
            raise ValueError(f"{schema.name}: the library's schema asks for {a.name} "
                             f"({a.type}), which the peer does not fill ({schema})")
    return args


class LibraryOps:
    """The anchor's two library calls, through the library itself: `load` it into torch and
    `_align` the top-k ids into Marlin's sorted blocks (the library's moe_align_block_size:
    sorted ids, each block's expert, the padded count)."""

    @staticmethod
    def load(path):
        import torch

        torch.ops.load_library(str(path))

    @staticmethod
    def _align(topk_ids, E, bs):
        import torch

        n = topk_ids.numel()
        padded = n + E * (bs - 1) if n >= E else min(n * bs, n + E * (bs - 1))
        dev = topk_ids.device
        sorted_ids = torch.empty(padded, dtype=torch.int32, device=dev)
        expert_ids = torch.empty(-(-padded // bs), dtype=torch.int32, device=dev)
        ntp = torch.empty(1, dtype=torch.int32, device=dev)
        torch.ops._moe_C.moe_align_block_size(topk_ids, E, bs, sorted_ids, expert_ids, ntp,
                                              None)
        return sorted_ids, expert_ids, ntp


# vLLM ScalarType ids of the weight types the peer times (vllm/scalar_type.py; ../shared/NOTES.md)
MARLIN_TYPE_IDS = {"uint4b8": 1125899907892224, "mxfp4": FLOAT4_E2M1F, "nvfp4": FLOAT4_E2M1F}


def time_marlin_w4(ops, E, K, N, topk, M, quant: Variant, bias: bool,
                   graph: bool = False) -> float:
    """Median us of Marlin's GEMM1 + SiLU-mul + GEMM2 + top-k sum with the 4-bit weights of
    `quant` (`MARLIN_QUANT`'s int4 or one of `MARLIN_E2M1`): `ops` loaded the library and
    sorts the tokens (`ops._align`: the anchor's or `LibraryOps`), random bits in Marlin's
    shapes (4-bit codes as [E, K / 16, 2 N * 16 / 8] int32 words). The scheme record says
    the rest: its block (128, 32 or 16), its scale element (bf16 values, E8M0 codes or e4m3
    floats) and whether a global scale multiplies. `graph`: the step captured in a CUDA
    graph and its replay timed, as the bench's graph rows time the backend (`graph_replays`);
    else launched from Python."""
    import torch
    import triton

    from .timing import graph_replays

    # Marlin's tiles need N and K in multiples of its thread tiles: pad as vLLM pads
    # gpt-oss-120b (2880 -> 3072) for Marlin, so the peer reads up to 7% more bytes
    K, N = -(-K // MARLIN_PAD) * MARLIN_PAD, -(-N // MARLIN_PAD) * MARLIN_PAD
    torch.manual_seed(0)
    dev = "cuda"
    w1 = torch.randint(-2**31, 2**31 - 1, (E, K // 16, 4 * N), dtype=torch.int32, device=dev)
    w2 = torch.randint(-2**31, 2**31 - 1, (E, N // 16, 2 * K), dtype=torch.int32, device=dev)
    kind = "uint4b8" if quant == MARLIN_QUANT else next(
        k for k, q in MARLIN_E2M1.items() if q == quant)
    info = quant.info
    group = scale_group(quant)

    def scales(rows, cols):
        shape = (E, rows // group, cols)
        if kind == "uint4b8":  # bf16 scales around 0.005
            return (torch.rand(shape, device=dev) * 0.01 + 0.001).to(torch.bfloat16)
        if info.scale_element.kind == EXPONENT:  # E8M0 codes 2^-9 .. 2^-1
            return torch.randint(118, 127, shape, dtype=torch.uint8,
                                 device=dev).view(torch.float8_e8m0fnu)
        return (torch.rand(shape, device=dev) + 0.5).to(torch.float8_e4m3fn)

    s1, s2 = scales(K, 2 * N), scales(N, K)
    g1 = g2 = torch.ones(E, device=dev) if info.global_scale != "none" else None
    b1 = torch.randn(E, 2 * N, device=dev, dtype=torch.bfloat16) if bias else None
    b2 = torch.randn(E, K, device=dev, dtype=torch.bfloat16) if bias else None
    x = torch.randn(M, K, device=dev, dtype=torch.bfloat16)
    tw, ti = torch.softmax(torch.randn(M, E, device=dev), -1).topk(topk)
    tw, ti = (tw / tw.sum(-1, keepdim=True)).float(), ti.int()
    per_expert = M * topk / E
    bs = 8 if per_expert < 8 else 16 if per_expert < 16 else 32 if per_expert < 32 else 64
    sid, eid, ntp = ops._align(ti, E, bs)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    ws = torch.zeros(sms * 4, dtype=torch.int, device=dev)
    c1 = torch.empty(M * topk, 2 * N, device=dev, dtype=torch.bfloat16)
    c2 = torch.empty(M * topk, N, device=dev, dtype=torch.bfloat16)
    c3 = torch.empty(M * topk, K, device=dev, dtype=torch.bfloat16)
    gemm = torch.ops._moe_C.moe_wna16_marlin_gemm
    schema = gemm.default._schema
    common = {"workspace": ws, "sorted_token_ids": sid, "expert_ids": eid,
              "num_tokens_past_padded": ntp, "topk_weights": tw, "moe_block_size": bs,
              "b_type_id": MARLIN_TYPE_IDS[kind], **MARLIN_FLAGS}
    gemm1 = marlin_arguments(schema, {
        **common, "a": x, "c_or_none": c1, "b_q_weight": w1, "b_bias_or_none": b1,
        "b_scales": s1, "global_scale": g1, "top_k": topk, "mul_topk_weights": False,
        "size_m": M, "size_n": 2 * N, "size_k": K})
    gemm2 = marlin_arguments(schema, {
        **common, "a": c2, "c_or_none": c3, "b_q_weight": w2, "b_bias_or_none": b2,
        "b_scales": s2, "global_scale": g2, "top_k": 1, "mul_topk_weights": True,
        "size_m": M * topk, "size_n": K, "size_k": N})

    def step():
        gemm(*gemm1)
        g, u = c1.view(-1, 2 * N).chunk(2, -1)
        torch.mul(torch.nn.functional.silu(g), u, out=c2)
        gemm(*gemm2)
        return c3.view(M, topk, K).sum(1)

    step()
    torch.cuda.synchronize()
    run = graph_replays([step], x.device)[0] if graph else step
    return triton.testing.do_bench(run, warmup=25, rep=200, return_mode="median") * 1e3


# Launched from Python, where the GPU work is short the host's launches set the time, and
# it moved between runs of the same code (an H100, Qwen3-30B-A3B at M = 1: 43 to 158 us
# over eight runs, at M = 16 122 to 336 us; an H200 on 2026-12-01, M = 16: 129-131 us in
# three processes, 187-202 us in two; within 3% from Mixtral's M = 16 on). So a graph row's
# peer is timed as a graph replay too (`MarlinPeer.seconds(graph=True)`; before 2026-12-01
# every row's peer was launched from Python, which flattered moecert's graph rows on small
# layers), and the peer takes the fastest of a few medians: Marlin at its best observed.
PEER_REPEATS = 3


class MarlinPeer:
    """Marlin's seconds per (shape, M): the fastest of `repeats` of `timer`'s medians
    (`time_marlin_w4` through `ops`), measured once per run."""

    def __init__(self, ops, repeats: int = PEER_REPEATS, timer=time_marlin_w4):
        self.ops, self.repeats, self.timer = ops, repeats, timer
        self._seconds: dict[tuple, float] = {}

    def seconds(self, problem, quant: Variant = MARLIN_QUANT, graph: bool = False) -> float:
        """`graph`: timed as a CUDA graph's replay (the bench's graph rows), else launched
        from Python (its apply rows)."""
        P = problem
        kind = marlin_kind(quant, P) or "uint4b8"
        shape = (P.E, P.K, P.N, P.topk, P.M)
        key = (*shape, kind, bool(P.bias), graph)
        if key not in self._seconds:
            quant = MARLIN_QUANT if kind == "uint4b8" else quant
            self._seconds[key] = min(self.timer(self.ops, *shape, quant, bool(P.bias),
                                                graph=graph)
                                     for _ in range(self.repeats)) / 1e6
        return self._seconds[key]


def load_marlin(lib: str | os.PathLike, anchor: str | os.PathLike, device
                ) -> tuple[MarlinPeer | None, str | None]:
    """(the peer, None), or (None, why it is not available)."""
    if device.type != "cuda":
        return None, f"Marlin runs on CUDA only, not on {device}"
    anchor = Path(anchor)
    loader = anchor if anchor.is_file() else "torch.ops.load_library"
    try:
        if anchor.is_file():  # (a named anchor that is missing is a usage error before)
            spec = importlib.util.spec_from_file_location("marlin_anchor", anchor)
            ops = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(ops)
        else:
            ops = LibraryOps()
        ops.load(str(lib))
        import torch

        _ = torch.ops._moe_C.moe_wna16_marlin_gemm.default  # the op this peer calls
    except Exception as e:  # a library built for another torch or CUDA: the reason
        return None, f"{loader} did not load {lib}: {type(e).__name__}: {e}"
    return MarlinPeer(ops), None
