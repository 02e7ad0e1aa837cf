"""Hypothesis strategies for valid random cases, beyond the suites' fixed shapes.

    from moecert.conformance.harness.strategies import cases
    @given(cases(backends=["torch"]))
    def test_...(case): ...

Two profiles: "ci" (derandomized: the same examples every run, so CI is reproducible) and
"long" (random, many examples, for nightly runs). `HYPOTHESIS_PROFILE=long` selects the
latter. A failing case's message carries the command that reruns exactly it.
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from moecert.kernels import Variant
from moecert.reference import SCHEME_NAMES, MoEProblem
from moecert.reference.schemes import ACTIVATIONS, scheme_variants

from .cases import DRAWN_ROUTINGS, Case

settings.register_profile("ci", derandomize=True, max_examples=25, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow], print_blob=True)
settings.register_profile("long", max_examples=500, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow], print_blob=True)


@st.composite
def problems(draw, quant: Variant, max_dim: int = 256) -> MoEProblem:
    """A problem whose shape every checkpoint of `quant` can hold."""
    unit = 32  # int4 packing, MX blocks and the group sizes below 128 all divide it
    if quant.packed and quant.group_size > 0:
        unit = max(unit, quant.group_size)
    K = unit * draw(st.integers(1, max(1, max_dim // unit)))
    N = unit * draw(st.integers(1, max(1, max_dim // unit)))
    E = draw(st.integers(1, 8))
    router_on_input = draw(st.booleans())
    topk = 1 if router_on_input else draw(st.integers(1, E))
    expert_map = None
    if draw(st.booleans()):  # expert parallel: this rank holds E of a larger set
        extra = draw(st.integers(1, 8))
        slots = draw(st.permutations(range(E + extra)))
        local = sorted(slots[:E])
        expert_map = tuple(local.index(g) if g in local else -1 for g in range(E + extra))
    return MoEProblem(
        M=draw(st.integers(0, 40)), K=K, N=N, E=E, topk=topk,
        dtype=draw(st.sampled_from(("bf16", "fp16"))),
        activation=draw(st.sampled_from(ACTIVATIONS)), bias=draw(st.booleans()),
        apply_router_weight_on_input=router_on_input, expert_map=expert_map,
        activation_format=draw(st.sampled_from(("standard", "standard", "batched"))))


@st.composite
def cases(draw, backends=("torch",), schemes=SCHEME_NAMES, max_dim: int = 256) -> Case:
    scheme = draw(st.sampled_from(tuple(schemes)))
    quant = draw(st.sampled_from(scheme_variants(scheme)))
    problem = draw(problems(quant, max_dim))
    routing = "random" if problem.activation_format == "batched" else draw(
        st.sampled_from(DRAWN_ROUTINGS))
    return Case(draw(st.sampled_from(tuple(backends))), quant, problem,
                seed=draw(st.integers(0, 2**16)), routing=routing, depth="light",
                strided=draw(st.booleans()))


def rerun_command(case: Case, device: str = "cpu") -> str:
    return f"moecert run --device {device} --case '{case.to_json()}'"
