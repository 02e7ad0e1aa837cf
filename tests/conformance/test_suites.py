"""Suites: every backend x scheme variant, the edge shapes in every suite, stable shards."""

from __future__ import annotations

import pytest
from moecert.conformance.suites import SPECS, SUITES, build_suite, shard
from moecert.kernels.oracle import scheme_variants
from moecert.reference import SCHEME_NAMES


@pytest.fixture(scope="module", params=SUITES)
def suite(request):
    return request.param, build_suite(request.param, ["torch", "triton"])


def test_ids_are_unique_and_stable(suite):
    name, cases = suite
    ids = [c.case_id for c in cases]
    assert len(ids) == len(set(ids))
    assert ids == [c.case_id for c in build_suite(name, ["torch", "triton"])]


def test_every_backend_runs_every_scheme_variant_with_every_check(suite):
    _, cases = suite
    full = {(c.backend, c.scheme, tuple(sorted(c.attrs.items())))
            for c in cases if c.depth == "full"}
    for backend in ("torch", "triton"):
        for scheme in SCHEME_NAMES:
            assert sum(1 for b, s, _ in full if (b, s) == (backend, scheme)) == \
                len(scheme_variants(scheme))


def test_edge_shapes_are_in_every_suite(suite):
    _, cases = suite
    P = [c.problem for c in cases if c.scheme == "gptq-int4" and c.backend == "torch"]
    assert {0, 1, 15, 17} <= {p.M for p in P}
    assert {64, 128, 192} <= {p.N for p in P}  # below, at and off group 128
    assert any(p.K % 64 for p in P)
    assert {c.routing for c in cases} == {"random", "skewed", "sparse"}
    assert any(p.expert_map is not None and -1 in p.expert_map for p in P)
    assert any(p.topk == 1 and p.apply_router_weight_on_input for p in P)
    assert {"standard", "batched"} <= {p.activation_format for p in P}


def test_every_scheme_default_has_a_strided_case(suite):
    name, cases = suite
    strided = [c for c in cases if c.strided]
    assert {(c.backend, c.scheme) for c in strided} == \
        {(b, s) for b in ("torch", "triton") for s in SCHEME_NAMES}
    assert {c.problem for c in strided} == {SPECS[name].edge_base}
    if not SPECS[name].options_everywhere:
        assert all(c.attrs == {} for c in strided)


def test_gpu_suites_hold_the_model_shapes():
    for name in ("ci", "certify"):
        shapes = {(c.problem.E, c.problem.K, c.problem.N) for c in build_suite(name, ["torch"])}
        assert {(128, 2048, 768), (8, 4096, 14336), (256, 7168, 2048)} <= shapes


def test_certify_has_several_seeds():
    assert len({c.seed for c in build_suite("certify", ["torch"], ["bf16"])}) >= 3


def test_shards_partition_the_cases():
    cases = build_suite("smoke", ["torch", "triton"])
    parts = [shard(cases, i, 3) for i in range(3)]
    assert sorted(c.case_id for p in parts for c in p) == sorted(c.case_id for c in cases)
    assert all(len(p) > len(cases) // 6 for p in parts)  # a hash split, roughly even
    assert [c.case_id for c in shard(cases, 1, 3)] == [c.case_id for c in parts[1]]


def test_bad_names_are_refused():
    with pytest.raises(ValueError, match="unknown suite"):
        build_suite("nightly")
    with pytest.raises(ValueError, match="unknown schemes"):
        build_suite("smoke", ["torch"], ["int3"])
