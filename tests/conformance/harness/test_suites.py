"""Suites: every backend x scheme variant, the edge shapes in every suite, stable shards."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from moecert.conformance.cli.app import main
from moecert.conformance.harness.suites import SPECS, SUITES, build_suite, shard
from moecert.kernels.registry import unregister_backend
from moecert.reference import SCHEME_NAMES
from moecert.reference.schemes import checkpoint_shape_issue, scheme_variants
from moecert.reports import load

HELPERS = Path(__file__).parents[1] / "helpers"


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
    # below, at and off the group size where a checkpoint can hold them (16-bit weights:
    # group 32 stands in); group 128's N = 64 and 192 hold no gptq-int4 checkpoint
    assert {16, 32, 48} <= {c.problem.N for c in cases if c.scheme == "bf16"}
    assert 128 in {p.N for p in P} and not {64, 192} & {p.N for p in P if p.K == 128}
    assert any(p.K % 64 for p in P)
    assert {c.routing for c in cases} == {"random", "skewed", "sparse"}
    assert any(p.expert_map is not None and -1 in p.expert_map for p in P)
    assert any(p.topk == 1 and p.apply_router_weight_on_input for p in P)
    assert {"standard", "batched"} <= {p.activation_format for p in P}


def test_no_case_is_one_no_checkpoint_can_hold(suite):
    _, cases = suite
    held = [c for c in cases if checkpoint_shape_issue(c.variant, c.problem) is None]
    assert len(held) == len(cases)
    # and the rule drops only those: every other variant and option is still there
    assert len(cases) > 100


def test_a_vendor_claiming_every_gptq_case_gets_no_errors(tmp_path, monkeypatch):
    """A backend that claims every gptq-int4 case (whatever the shape) is never handed one no
    checkpoint can exist for; a subset of the torch backend runs through `moecert run`."""
    monkeypatch.syspath_prepend(str(HELPERS))
    try:
        code = main(["run", "--suite", "smoke", "--backend", "vendor-gptq-all", "--backend",
                     "vendor-subset", "--import", "vendor_backends", "--scheme", "gptq-int4",
                     "--check", "claims", "--in-process", "--results", str(tmp_path)])
    finally:
        for name in ("vendor-gptq-all", "vendor-subset"):
            unregister_backend(name)
        sys.modules.pop("vendor_backends", None)
    rows = load(tmp_path)
    assert code == 0
    assert set(rows["backend"]) == {"vendor-gptq-all", "vendor-subset"}
    everything = rows[rows["backend"] == "vendor-gptq-all"]
    assert set(everything["status"]) == {"pass"}, everything["message"].tolist()
    subset = rows[rows["backend"] == "vendor-subset"]
    biased = subset["case_id"].str.contains(".bias")
    assert biased.any() and (~biased).sum() > 10
    assert set(subset[biased]["status"]) == {"unsupported"}
    assert subset[biased]["message"].str.contains("not claimed: bias not supported").all()
    assert set(subset[~biased]["status"]) == {"pass"}
    assert subset[~biased]["message"].str.contains("claimed, and it ran").all()


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


def test_grouped_schemes_have_n_at_or_below_the_group_over_two_k_groups(suite):
    """vLLM's Marlin MoE permuted w13's scales with N where K belongs: wrong only when
    N <= g and K holds at least two groups. Each grouped scheme needs a case the torch
    backend claims with that shape (the smoke suite once had K = g there)."""
    from moecert.kernels import get_backend

    name, cases = suite
    torch_backend = get_backend("torch")
    for scheme in ("gptq-int4", "awq-int4", "w4a8-int8"):
        quant = scheme_variants(scheme)[0]
        g = quant.group_size
        hits = [c for c in cases if c.backend == "torch" and c.scheme == scheme and not c.attrs
                and c.problem.N <= g and c.problem.K >= 2 * g
                and torch_backend.supports(quant, c.problem) is None]
        assert hits, (name, scheme)


def test_a_model_runs_only_in_the_schemes_it_ships_in(monkeypatch):
    from moecert.conformance.harness import suites
    from moecert.reference.models import MODELS, ModelRelease

    monkeypatch.setitem(suites.RELEASES, "qwen3-30b-a3b",
                        ModelRelease("fp8-w8a16", ("swigluoai",), bias=True))
    assert suites.model_problem("qwen3-30b-a3b", "bf16", 16) is None
    P = suites.model_problem("qwen3-30b-a3b", "fp8-w8a16", 16)
    assert (P.activation, P.bias, (P.E, P.K, P.N, P.topk)) == (
        "swigluoai", True, tuple(MODELS["qwen3-30b-a3b"]))
    assert suites.model_problem("gpt-oss-120b", "bf16", 1) is None


def test_a_released_scheme_runs_its_models_pairing():
    """gpt-oss ships in mxfp4 with interleaved swigluoai and biases: every mxfp4 variant runs
    at full depth with them, the split layout is an option, and the gpt-oss layer size runs
    in mxfp4 only (in the GPU suites: smoke holds no model size)."""
    smoke = build_suite("smoke", ["torch"], ["mxfp4", "gptq-int4"])
    full = [c for c in smoke if c.scheme == "mxfp4" and c.depth == "full"]
    assert full and all(c.problem.activation == "swigluoai" and c.problem.bias for c in full)
    mx_acts = {(c.problem.activation, c.problem.bias) for c in smoke if c.scheme == "mxfp4"}
    assert {("swigluoai-split", True), ("silu", False)} <= mx_acts
    assert all(c.problem.activation == "silu" for c in smoke
               if c.scheme == "gptq-int4" and c.depth == "full")
    assert all(c.problem.K < 1024 for c in smoke)
    for name in ("ci", "certify"):
        gpt_oss = {c.scheme: c.problem for c in build_suite(name, ["torch"])
                   if (c.problem.E, c.problem.K, c.problem.N) == (128, 2880, 2880)}
        assert set(gpt_oss) == {"mxfp4"}, name
        assert gpt_oss["mxfp4"].activation == "swigluoai" and gpt_oss["mxfp4"].bias
        assert gpt_oss["mxfp4"].topk == 4
