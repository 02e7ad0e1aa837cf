"""The suites: which cases run, on which shapes, with which checks.

    smoke    CPU, every backend x every scheme variant on small shapes, Triton interpreted
    ci       GPU, the model shapes plus the edge shapes at realistic sizes
    certify  everything: all variants x options x shapes, several seeds

A scheme a model is released in (reference/models.py's RELEASES: gpt-oss in mxfp4) runs its
variants with that model's activation and biases, and its other gate/up layouts as options;
the released model's layer size runs in that scheme only.

Every suite has the edge shapes: M = 0, 1, block-1, block+1; N below, at and off the group
size, with at least two groups along K; K off the kernel tile; an expert with every token and
experts with none; an expert_map with holes; topk = 1 with the router weight on the input;
every tensor non-contiguous (a strided case). A shape no checkpoint of the variant can hold
(N below or off group 128) is dropped (`schemes.checkpoint_shape_issue`). A case's `depth`
says which checks run: "full" runs all of them, "light" those that share the one accuracy
call.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace

from moecert.kernels import backend_names
from moecert.reference import SCHEME_NAMES, SCHEMES, MoEProblem
from moecert.reference.models import MODELS, RELEASES, ships_in
from moecert.reference.schemes import (
    FP8_BLOCK,
    STRATEGY_BLOCK,
    Variant,
    checkpoint_shape_issue,
    scheme_variants,
)

from .cases import Case

SUITES = ("smoke", "ci", "certify")

# Row tile of the grouped GEMMs (triton's smallest BLOCK_M): M = 15 and 17 straddle it.
BLOCK_M = 16
# A hole in every other global expert: local experts 0..E-1 at the even global ids.
_EP_STRIDE = 2


@dataclass(frozen=True)
class SuiteSpec:
    base: MoEProblem  # every scheme variant runs here with every check
    edge_base: MoEProblem  # the edge shapes are variations of this one
    models: tuple[tuple[str, int], ...] = ()  # (model, M) at full layer size
    seeds: tuple[int, ...] = (0,)
    options_everywhere: bool = False  # options on every variant, not only the defaults
    # M values a model folder's layer runs at (`moecert run --checkpoint`): its size and
    # scheme are the file's
    model_ms: tuple[int, ...] = (1, 17, 64)


SPECS = {
    "smoke": SuiteSpec(MoEProblem(M=17, K=128, N=128, E=4, topk=2),
                       MoEProblem(M=9, K=128, N=128, E=4, topk=2)),
    "ci": SuiteSpec(MoEProblem(M=64, K=1024, N=512, E=16, topk=4),
                    MoEProblem(M=33, K=512, N=256, E=8, topk=2),
                    models=(("qwen3-30b-a3b", 64), ("mixtral-8x7b", 16),
                            ("deepseek-v3", 64), ("gpt-oss-120b", 64)),
                    model_ms=(1, 17, 64, 256)),
    "certify": SuiteSpec(MoEProblem(M=64, K=1024, N=512, E=16, topk=4),
                         MoEProblem(M=33, K=512, N=256, E=8, topk=2),
                         # decode and prefill ends; model-size cases hold the GPU alone,
                         # so each (model, M) costs serial time (certify on one H100 ran
                         # 12 min with M = 64 added)
                         models=tuple((m, M) for m in MODELS for M in (1, 256)),
                         seeds=(0, 1, 2), options_everywhere=True,
                         model_ms=(1, 17, 64, 256, 1024)),
}


def build_suite(name: str, backends=None, schemes=None) -> list[Case]:
    """The cases of suite `name` for `backends` (default: every registered one) and `schemes`
    (default: all), unique by case id, in a stable order."""
    if name not in SPECS:
        raise ValueError(f"unknown suite {name!r}; known: {', '.join(SUITES)}")
    spec = SPECS[name]
    backends = list(backends or backend_names())
    schemes = list(schemes or SCHEME_NAMES)
    unknown = sorted(set(schemes) - set(SCHEME_NAMES))
    if unknown:
        raise ValueError(f"unknown schemes {unknown}; known: {', '.join(SCHEME_NAMES)}")
    cases: dict[str, Case] = {}

    def add(case: Case) -> None:
        # a shape no checkpoint of the variant can hold (group 128 at N = 64) is no case for
        # any backend: dropped here, once, before a backend is asked
        if checkpoint_shape_issue(case.variant, case.problem) is None:
            cases.setdefault(case.case_id, case)

    for seed in spec.seeds:
        for scheme in schemes:
            for i, variant in enumerate(scheme_variants(scheme)):
                base = _released(_variant_base(spec.base, variant), scheme)
                for backend in backends:
                    add(Case(backend, variant, base, seed, depth="full"))
                    # every variant gets the options once; the later seeds repeat them on
                    # each scheme's default (certify fits 10 minutes on one GPU that way)
                    if i == 0 or (spec.options_everywhere and seed == spec.seeds[0]):
                        for case in _edge_cases(spec, backend, variant, seed):
                            add(case)
                    if i == 0 and seed == spec.seeds[0]:
                        for case in _model_cases(spec, backend, scheme, seed):
                            add(case)
    return list(cases.values())


def build_model_suite(name: str, folder: str, layers: list[int], backends,
                      inputs: str | None = None) -> list[Case]:
    """The cases of suite `name` on layers `layers` of the model folder `folder`: the layer
    fixes the scheme and variant, E, K, N, top-k, activation, bias and dtype; the suite gives
    the M values (`model_ms`; with `inputs`, those the file's rows cover and its row count)
    and seeds, every check at each M, and the middle M once more with every tensor strided.
    Tokens are routed by the layer's own router where the reference knows its routing
    function, else as a synthesized case's. Only configs, headers and each layer's router
    and first expert are read here (the workers read the layers)."""
    from .model_layers import LayerSource, layer_summaries, read_inputs, router_known

    spec = SPECS[name]
    summaries = layer_summaries(folder)
    cases: dict[str, Case] = {}
    for layer in layers:
        summary = summaries[layer]
        source = LayerSource.of(folder, layer, inputs)
        routing = "router" if router_known(folder, layer) else "random"
        ms = list(spec.model_ms)
        if inputs is not None:
            rows = read_inputs(inputs, summary.K).shape[0]
            ms = sorted({m for m in ms if m <= rows} | {rows})
        for seed in spec.seeds:
            for backend in backends:
                for M in ms:
                    case = Case(backend, summary.variant, summary.problem(M), seed,
                                routing, depth="full", source=source)
                    cases.setdefault(case.case_id, case)
                if seed == spec.seeds[0]:
                    middle = ms[len(ms) // 2]
                    case = Case(backend, summary.variant, summary.problem(middle), seed,
                                routing, depth="light", strided=True, source=source)
                    cases.setdefault(case.case_id, case)
    return list(cases.values())


def _variant_base(P: MoEProblem, quant: Variant) -> MoEProblem:
    """The base shape, grown where a variant would otherwise hold a single group or block:
    act-order with one group makes g_idx all zero, and one 128-column fp8 block makes a
    transposed block-scale tensor read the same (both bugs would pass unseen)."""
    unit = 0
    if quant.act_order and quant.group_size > 0:
        unit = quant.group_size
    if quant.weight_strategy == STRATEGY_BLOCK:
        unit = FP8_BLOCK
    if unit and min(P.K, P.N) < 2 * unit:
        return replace(P, K=max(P.K, 2 * unit), N=max(P.N, 2 * unit))
    return P


def _releases(scheme: str):
    return [r for r in RELEASES.values() if r.scheme == scheme]


def _released(P: MoEProblem, scheme: str) -> MoEProblem:
    """P with the activation and biases of the model released in `scheme`, if one is."""
    for release in _releases(scheme):
        return replace(P, activation=release.activations[0], bias=release.bias)
    return P


def _edge_cases(spec: SuiteSpec, backend: str, variant: Variant, seed: int):
    P, scheme = spec.edge_base, variant.scheme
    group = variant.group_size if variant.packed and variant.group_size > 0 else 32
    # a group that divides the edge shapes' K and N, so only the named dimension is odd
    small = variant.replace(group_size=32) if variant.packed and group > 32 else variant

    def case(problem=P, routing="random", case_variant=variant):
        return Case(backend, case_variant, problem, seed, routing, depth="light")

    for M in (0, 1, BLOCK_M - 1, BLOCK_M + 1):
        yield case(replace(P, M=M))
    # N below, at and off the group size, over at least two groups along K: a scale indexed
    # with N where K belongs (vLLM's Marlin w13 scale permutation) is wrong only there
    K = max(P.K, 2 * group)
    for N in (group // 2, group, group + group // 2):
        if (N, K) != (P.N, P.K):
            yield case(replace(P, N=N, K=K))
    yield case(replace(P, K=160), case_variant=small)  # not a multiple of 64 or 128
    yield case(routing="skewed")
    yield case(routing="sparse")
    # every tensor non-contiguous (conformance/harness/strides.py)
    yield replace(case(), strided=True)
    global_map = tuple(i // _EP_STRIDE if i % _EP_STRIDE == 0 else -1
                       for i in range(P.E * _EP_STRIDE))
    yield case(replace(P, expert_map=global_map))
    yield case(replace(P, topk=1, apply_router_weight_on_input=True))
    yield case(replace(P, dtype="fp16", bias=True))
    yield case(replace(P, activation="swigluoai", bias=True))
    yield case(replace(P, activation="relu2"))
    yield case(replace(P, activation_format="batched"))
    for release in _releases(scheme):  # the released model's other gate/up layouts
        for activation in release.activations[1:]:
            yield case(replace(P, activation=activation, bias=release.bias))
    if spec.models:  # realistic sizes: the options again on a larger layer
        yield case(replace(spec.base, activation="gelu", bias=True))
        yield case(replace(spec.base, activation="swigluoai-split"))


def _model_cases(spec: SuiteSpec, backend: str, scheme: str, seed: int):
    """Each scheme's default at the model layer sizes (one seed: the checkpoints are big),
    for the models that ship in the scheme."""
    for model, M in spec.models:
        problem = model_problem(model, scheme, M)
        if problem is not None:
            yield Case(backend, scheme, problem, seed, depth="light", model=model)


def model_problem(model: str, scheme: str, M: int) -> MoEProblem | None:
    """`model`'s layer at M tokens as `scheme` runs it (None: the model is released in
    another scheme only, reference/models.py), with the release's activation and biases.
    16-bit weights of DeepSeek-V3 (22 GB a copy) run as one expert-parallel rank's share, as
    they are deployed: every 8th expert local."""
    if not ships_in(model, scheme):
        return None
    E, K, N, topk = MODELS[model]
    release = RELEASES.get(model)
    extra = {} if release is None else {"activation": release.activations[0],
                                        "bias": release.bias}
    expert_map = None
    if model == "deepseek-v3" and SCHEMES[scheme].weight_bits == 16:
        expert_map = tuple(i // 8 if i % 8 == 0 else -1 for i in range(E))
        E //= 8
    return MoEProblem(M=M, K=K, N=N, E=E, topk=topk, expert_map=expert_map, **extra)


def shard(cases: list[Case], index: int, count: int) -> list[Case]:
    """Shard `index` of `count` (0-based): a deterministic split by case id, the same on
    every host, so CI jobs each take one shard and the report merges them."""
    if not 0 <= index < count:
        raise ValueError(f"shard index {index} outside 0..{count - 1}")
    return [c for c in cases if _bucket(c.case_id, count) == index]


def _bucket(case_id: str, count: int) -> int:
    return int.from_bytes(hashlib.sha256(case_id.encode()).digest()[:8], "big") % count
