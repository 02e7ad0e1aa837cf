"""Planted bugs: backends that are a correct backend with one realistic bug each, to test
that the harness catches what it claims to catch.

    from moecert.conformance.mutants import MUTANTS, register_mutants, detection_table

Every mutant subclasses a correct backend (the torch backend unless the bug lives only in
another backend's format) and keeps its claims, except the one whose bug is its claims.
`targets` are the schemes the bug lives in: running the smoke suite on those must flag the
mutant; `expected_checks` are the checks expected to catch it.

`LEGIT` holds the opposite: correct backends with a production kernel's numerics (weights and
scales rounded to the activation dtype, mutants/legit.py), on which the smoke suite must flag
nothing: the false-alarm side of the same test.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from moecert.kernels.registry import backend_names, register_backend
from moecert.reports.schema import FAILING

from . import conversion, legit, protocol, steps

# Row statuses that count as the harness flagging a backend.
FLAGGED = FAILING


@dataclass(frozen=True)
class Mutant:
    name: str
    # the backend class, or "triton:ClassName" in mutants/triton.py (imported on demand)
    factory: Callable[[], object] | str
    bug: str  # one sentence; the class docstring says how it happens in an engine
    targets: tuple[str, ...]  # scheme names the bug lives in
    expected_checks: tuple[str, ...]  # at least one of these must catch it
    base: str = "torch"  # the registered correct backend it is a copy of


_ACC = ("accuracy", "exact")
_M = [
    # --- conversion ---------------------------------------------------------------------
    Mutant("mutant-awq-order", conversion.AwqOrderKept,
           "AWQ's nibble pack order (0,2,4,6,1,3,5,7) not undone when unpacking.",
           ("awq-int4",), ("canonical", *_ACC)),
    Mutant("mutant-gptq-v1-zero", conversion.GptqV1ZeroOffsetMissing,
           "GPTQ v1 zero points read without the +1 offset (as if v2).",
           ("gptq-int4",), ("canonical", *_ACC)),
    Mutant("mutant-zero-points-ignored", conversion.ZeroPointsIgnored,
           "Asymmetric int weights dequantized with the symmetric zero, zero points unused.",
           ("awq-int4",), ("canonical", *_ACC)),
    Mutant("mutant-act-order-ignored", conversion.ActOrderIgnored,
           "Act-order g_idx ignored: column k takes group k // g.",
           ("gptq-int4",), ("canonical", *_ACC)),
    Mutant("mutant-act-order-w2-ignored", conversion.ActOrderW2Ignored,
           "Act-order g_idx honoured for w13 but ignored for w2.",
           ("gptq-int4",), ("canonical", *_ACC)),
    Mutant("mutant-w4afp8-codes-as-uint4b8", conversion.Int4CodesAsUint4b8,
           "W4AFP8 signed int4 codes (one per int8) read as uint4b8 (stored u means u - 8).",
           ("w4a8-fp8",), ("canonical", *_ACC)),
    Mutant("mutant-group-shift", conversion.GroupScalesShifted,
           "Group scales and zeros indexed one group late (group i reads i + 1).",
           ("gptq-int4",), ("canonical", *_ACC)),
    Mutant("mutant-w13-scales-swapped", conversion.W13ScalesSwapped,
           "w1's weight scales loaded into w3's slot and vice versa.",
           ("fp8-w8a16", "int8-w8a16"), ("canonical", *_ACC)),
    Mutant("mutant-w13-shard-scales-collapsed", conversion.W13ShardScalesCollapsed,
           "Per-tensor fp8 w1/w3 shard scales collapsed to their max, weights not requantized.",
           ("fp8-w8a8",), ("canonical", *_ACC)),
    Mutant("mutant-gate-up-swapped", conversion.GateUpSwapped,
           "w13 laid out as [up; gate] instead of [gate; up].",
           ("bf16",), ("canonical", *_ACC)),
    Mutant("mutant-int8-weight-sign", conversion.Int8WeightAsUint8b128,
           "Signed int8 weights decoded as uint8b128 (byte - 128), flipping the sign bit.",
           ("int8-w8a16",), ("canonical", *_ACC)),
    Mutant("mutant-fp8-block-scales-transposed", conversion.Fp8BlockScalesTransposed,
           "FP8 128x128 block scales stored column-major and read row-major.",
           ("fp8-w8a16",), ("canonical", *_ACC)),
    # systematic where rounding is random: the norm-ratio band, not rel_fro, must see it
    Mutant("mutant-nvfp4-shard-global-collapsed", conversion.Nvfp4ShardGlobalScalesCollapsed,
           "NVFP4: w1's and w3's global scales collapsed to w1's (one scale_2 per expert).",
           ("nvfp4",), ("canonical", *_ACC)),
    Mutant("mutant-nvfp4-ct-global-not-inverted", conversion.CtGlobalScaleNotInverted,
           "NVFP4 compressed-tensors: the stored global scale (a reciprocal) read as-is.",
           ("nvfp4",), ("canonical", *_ACC)),
    Mutant("mutant-fp4-nibbles-swapped", conversion.Fp4NibblesSwapped,
           "FP4 bytes unpacked with element 2j in the high nibble (odd index low).",
           ("mxfp4",), ("canonical", *_ACC)),
    Mutant("mutant-fp6-element-swapped", conversion.Fp6ElementSwapped,
           "FP6 codes decoded as the other FP6 element (E2M3 as E3M2, E3M2 as E2M3).",
           ("mxfp6-e2m3", "mxfp6-e3m2"), ("canonical", *_ACC)),
    Mutant("mutant-fp6-codes-reversed", conversion.Fp6GroupReversed,
           "FP6 codes 4j..4j+3 unpacked from the top of their 24-bit group (reversed).",
           ("mxfp6-e2m3",), ("canonical", *_ACC)),
    Mutant("mutant-e8m0-0xff-as-scale", conversion.E8M0NanReadAsScale,
           "E8M0 0xFF (NaN / padding) scale bytes decoded as 2^128 instead of refused.",
           ("mxfp4",), ("malformed",)),
    Mutant("mutant-scales-x1.005", conversion.ScalesScaled,
           "Every weight scale multiplied by 1.005.",
           ("gptq-int4", "fp8-w8a16"), ("accuracy",)),
    Mutant("mutant-w13-scales-perm-n-for-k", conversion.W13ScalesPermutedAsChannelwise,
           "w13's group scales permuted with N where K belongs (Marlin, N <= g < K).",
           ("awq-int4",), _ACC),
    # --- forward --------------------------------------------------------------------------
    Mutant("mutant-router-weight-twice", steps.RouterWeightTwice,
           "With apply_router_weight_on_input the router weight scales the output again.",
           ("bf16",), _ACC),
    Mutant("mutant-expert-map-ignored", steps.ExpertMapIgnored,
           "expert_map ignored: global topk ids used as local expert ids.",
           ("bf16",), _ACC),
    Mutant("mutant-batched-counts-ignored", steps.BatchedCountsIgnored,
           "Batched format: expert_num_tokens ignored, rows past each count computed.",
           ("bf16",), _ACC),
    Mutant("mutant-per-token-as-per-tensor", steps.PerTokenAsPerTensor,
           "q1's per-token int8 activation scale replaced by one per-tensor scale.",
           ("int8-w8a8",), _ACC),
    Mutant("mutant-fp8-groups-along-m", steps.GroupsAlongM,
           "fp8 1x128 activation groups taken along the tokens (M), not along K.",
           ("fp8-w8a8",), _ACC),
    Mutant("mutant-a2-static-scale-unloaded", steps.StaticA2ScaleUnloaded,
           "Static int8: the w2 input scale never loaded, GEMM2's input quantized with 1.0.",
           ("int8-w8a8",), _ACC),
    Mutant("mutant-nvfp4-a2-gscale-from-a1", steps.Nvfp4A2GlobalScaleFromA1,
           "NVFP4 activations: GEMM2's input quantized with a1's global scale.",
           ("nvfp4",), _ACC),
    Mutant("mutant-mxfp8-scale-rule", steps.MxScaleRuleWrong,
           "MXFP8 activation scales rounded with the wrong exponent rule.",
           ("mxfp8",), _ACC),
    Mutant("mutant-pre-quant-scale-dropped", steps.PreQuantScaleDropped,
           "ModelOpt AWQ's pre_quant_scale not applied to the GEMM inputs.",
           ("modelopt-int4-awq",), _ACC),
    Mutant("mutant-mxfp4-act-as-mxfp8", steps.Mxfp4ActivationsAsMxfp8,
           "MXFP4 W4A4: activations quantized as MXFP8 (e4m3 elements) instead of e2m1.",
           ("mxfp4",), _ACC),
    Mutant("mutant-bias-in-scale-slot", steps.BiasScaledByActivationScale,
           "int8 activations: the w13 bias added before the activation scale multiplies.",
           ("int8-w8a8",), _ACC),
    Mutant("mutant-bias-dropped", steps.BiasDropped,
           "The w13 bias dropped on the way to the kernel.",
           ("bf16",), _ACC),
    Mutant("mutant-biases-not-loaded", steps.BiasesNotLoaded,
           "Both expert biases never loaded: the layer computes with zero biases.",
           ("mxfp4", "fp8-w8a16"), _ACC),
    Mutant("mutant-w2-bias-after-router", steps.W2BiasAfterRouterWeight,
           "The w2 bias added after the router weight (r*y + b2, not r*(y + b2)).",
           ("bf16",), _ACC),
    Mutant("mutant-swigluoai-alpha", steps.SwigluoaiAlphaDropped,
           "swigluoai without its alpha: sigmoid(g) instead of sigmoid(1.702 g).",
           ("bf16",), _ACC),
    Mutant("mutant-swigluoai-layout", steps.SwigluoaiDeinterleaved,
           "swigluoai's interleaved gate/up rows read as [gate; up] halves.",
           ("bf16",), _ACC),
    Mutant("mutant-swigluoai-gate-up-swapped", steps.SwigluoaiGateUpSwapped,
           "swigluoai's interleaved rows read with gate and up exchanged (gate = h[1::2]).",
           ("mxfp4",), _ACC),
    Mutant("mutant-e8m0-bias", steps.E8M0Bias126,
           "E8M0 weight scales decoded with bias 126 instead of 127 (every scale x2).",
           ("mxfp8", "mxfp4", "mxfp6-e3m2"), _ACC),
    Mutant("mutant-nondeterministic-sum", steps.NondeterministicSum,
           "Top-k sum accumulated in the output dtype in a random expert order each call.",
           ("bf16",), ("determinism", "token_order")),
    Mutant("mutant-last-row-unwritten", steps.LastRowUnwritten,
           "The last output row is never written.",
           ("bf16",), ("fully_written", "accuracy")),
    Mutant("mutant-partial-block-dropped", steps.PartialBlockDropped,
           "Rows of the last partial 16-row tile are never written.",
           ("bf16",), ("fully_written", "accuracy")),
    # --- protocol ---------------------------------------------------------------------------
    Mutant("mutant-process-not-idempotent", protocol.ProcessNotIdempotent,
           "A second process_weights_after_loading swaps gate and up again.",
           ("bf16",), ("process_twice",)),
    Mutant("mutant-reload-ignored", protocol.ReloadIgnored,
           "load_weights into a processed layer does nothing.",
           ("bf16",), ("reload",)),
    Mutant("mutant-input-mutated", protocol.InputOverwritten,
           "The output is also written into hidden_states (inplace=True).",
           ("bf16",), ("no_mutation",)),
    Mutant("mutant-claims-asym", protocol.ClaimsAsymmetric,
           "The XPU int4 path claims asymmetric int4 and raises when loading it.",
           ("gptq-int4",), ("claims",), base="xpu"),
    # --- triton ---------------------------------------------------------------------------
    Mutant("mutant-w4a8-a1-gscale-dropped", "triton:W4A8GlobalScaleDropped",
           "Triton W4A8: GEMM1's activation global scale a1_gscale not passed to the kernel.",
           ("w4a8-int8",), _ACC, base="triton"),
]
MUTANTS: dict[str, Mutant] = {m.name: m for m in _M}
BASES = tuple(sorted({m.base for m in _M}))
# legitimate twins: name -> backend class (each a copy of the torch backend)
LEGIT: dict[str, Callable[[], object]] = {
    legit.ActDtypeWeightsTwin.name: legit.ActDtypeWeightsTwin,
    legit.MarlinScalesTwin.name: legit.MarlinScalesTwin,
}


def make_backend(mutant: Mutant):
    """A fresh instance of the mutant's backend (the triton module imported on demand: its
    kernels must not be defined before a caller chooses interpreted or compiled)."""
    factory = mutant.factory
    if isinstance(factory, str):
        from . import triton

        factory = getattr(triton, factory.partition(":")[2])
    return factory()


# The module whose import registers every mutant and twin (what `--import` takes; importing
# this package registers none: a library caller picks with register_mutants).
REGISTER_MODULE = f"{__name__}.all"


def register_mutants(names: Iterable[str] | None = None) -> list[str]:
    """Register the mutants and legitimate twins (all, or `names`) with the backend
    registry; registering one already there is a no-op. Returns the names."""
    chosen = [*MUTANTS, *LEGIT] if names is None else list(names)
    known = set(backend_names())
    for name in chosen:
        if name not in known:
            backend = LEGIT[name]() if name in LEGIT else make_backend(MUTANTS[name])
            assert backend.name == name, (backend.name, name)
            register_backend(backend)
    return chosen


def base_of(backend: str) -> str:
    """The correct backend a mutant is a copy of (a backend that is no mutant: itself)."""
    if backend in LEGIT:
        return "torch"
    mutant = MUTANTS.get(backend)
    return mutant.base if mutant else backend


def _key(row, backend: str) -> tuple[str, str, str]:
    """(backend, the case id without its backend, check): the same row on another backend."""
    return backend, row["case_id"].split("/", 1)[1], row["check"]


def detections(rows, base_rows=()) -> list[dict]:
    """The rows of `rows` that flag their backend, less those whose counterpart in
    `base_rows` (the same suite on the mutant's correct base backend) was flagged too: a
    harness problem both share is not a detection."""
    on_base = {_key(r, r["backend"]) for r in base_rows if r["status"] in FLAGGED}
    return [r for r in rows
            if r["status"] in FLAGGED and _key(r, base_of(r["backend"])) not in on_base]


def detection_table(rows, base_rows=()):
    """pandas DataFrame: backend x check -> number of flagged rows (`detections`), with a
    'flagged' column totalling each backend; every backend of `rows` appears, a mutant the
    suite missed as a row of zeros."""
    import pandas as pd

    rows = list(rows)
    hits = detections(rows, base_rows)
    backends = sorted({r["backend"] for r in rows})
    checks = sorted({r["check"] for r in rows})
    table = pd.DataFrame(0, index=pd.Index(backends, name="backend"),
                         columns=pd.Index(checks, name="check"))
    for r in hits:
        table.loc[r["backend"], r["check"]] += 1
    table["flagged"] = table.sum(axis=1)
    return table


__all__ = ["BASES", "FLAGGED", "LEGIT", "MUTANTS", "Mutant", "base_of", "detection_table",
           "detections", "make_backend", "register_mutants"]
