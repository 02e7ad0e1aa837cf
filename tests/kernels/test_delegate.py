"""`claim_subset` / `DelegatingBackend`: a vendor backend that runs a built-in backend's code
for part of what it claims, through the registry and the oracle."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from moecert.kernels import (
    Backend,
    DelegatingBackend,
    NoBackendError,
    Platform,
    UnsupportedError,
    Variant,
    claim_subset,
    get_backend,
    register_backend,
    select_backend,
)
from moecert.kernels import oracle as oracle_module
from moecert.kernels.registry import BUILTINS, unregister_backend
from moecert.reference import MoEProblem, make_inputs, synthesize

PROBLEM = MoEProblem(M=5, K=128, N=128, E=4, topk=2)


@pytest.fixture
def vendor(monkeypatch):
    """Register `backend` as the only candidate of every platform."""
    registered = []

    def install(backend):
        register_backend(backend)
        registered.append(backend.name)
        monkeypatch.setattr(oracle_module, "PRIORITY", {k: (backend.name,)
                                                        for k in oracle_module.PRIORITY})
        monkeypatch.setattr(oracle_module, "BUILTINS", {**BUILTINS, backend.name: ""})
        return backend
    yield install
    for name in registered:
        unregister_backend(name)


def _quant(scheme, **kw):
    return replace(Variant.defaults(scheme), **kw)


def test_the_subset_is_claimed_and_the_rest_refused_with_a_reason(vendor):
    subset = vendor(claim_subset("torch", "vendor-x", schemes=("gptq-int4", "bf16")))
    assert isinstance(subset, Backend)
    assert get_backend("vendor-x") is subset
    for scheme in ("gptq-int4", "bf16"):
        assert select_backend(scheme, PROBLEM, Platform.cpu()).backend is subset
    with pytest.raises(NoBackendError) as info:
        select_backend("awq-int4", PROBLEM, Platform.cpu())
    # backends installed by entry point (vllm) add their own reasons: ours is the vendor's
    assert info.value.reasons["vendor-x"] == (
        "awq-int4 not claimed by vendor-x (it claims bf16, gptq-int4)")


def test_the_delegates_own_refusals_and_platform_pass_through(vendor):
    subset = vendor(claim_subset("xpu", "vendor-xpu", schemes=("gptq-int4", "awq-int4")))
    assert subset.supports(_quant("gptq-int4"), PROBLEM) is None
    assert subset.supports(_quant("awq-int4"), PROBLEM) == (
        "scheme awq-int4 not supported (symmetric int4 GPTQ or compressed-tensors only)")
    assert subset.supports(_quant("gptq-int4", sym=False), PROBLEM) == (
        "zero points not supported (symmetric int4 only)")
    triton = claim_subset("triton", "vendor-triton", schemes=("bf16",))
    assert triton.supports(_quant("bf16"), PROBLEM, platform=Platform.cuda((9, 0))) is None
    assert triton.supports(_quant("bf16"), PROBLEM, platform=Platform.xpu()) == (
        "platform cuda or rocm only")


def test_a_rule_beyond_scheme_names(vendor):
    def no_bias(quant, problem, platform):
        return "bias not supported" if problem.bias else None

    subset = vendor(claim_subset("torch", "vendor-nb", where=no_bias))
    biased = replace(PROBLEM, bias=True)
    assert subset.supports(_quant("fp8-w8a16"), PROBLEM) is None
    assert subset.supports(_quant("fp8-w8a16"), biased) == "bias not supported"

    class Narrow(DelegatingBackend):  # the same as a subclass
        def narrow(self, quant, problem, platform):
            return super().narrow(quant, problem, platform) or (
                "group 32 only" if quant.group_size != 32 else None)

    narrow = Narrow("torch", "vendor-narrow", schemes=("gptq-int4",))
    assert narrow.supports(_quant("gptq-int4", group_size=32), PROBLEM) is None
    assert narrow.supports(_quant("gptq-int4", group_size=64), PROBLEM) == "group 32 only"


def test_it_runs_the_delegates_code_and_refuses_what_it_does_not_claim():
    subset = claim_subset(get_backend("torch"), "vendor-run", schemes=("gptq-int4",))
    ckpt = synthesize("gptq-int4", PROBLEM, group_size=32)
    layer = subset.create_layer(ckpt, PROBLEM)
    subset.process_weights_after_loading(layer)
    x, w, ids = make_inputs(PROBLEM, seed=0)
    torch_backend = get_backend("torch")
    ref_layer = torch_backend.create_layer(ckpt, PROBLEM)
    torch_backend.process_weights_after_loading(ref_layer)
    assert torch.equal(subset.apply(layer, x, w, ids), torch_backend.apply(ref_layer, x, w, ids))
    assert subset.canonical_weights(layer)["w2"].codes.shape == (4, 128, 128)
    with pytest.raises(UnsupportedError, match="backend 'vendor-run'.*bf16 not claimed by "
                       "vendor-run"):
        subset.create_layer(synthesize("bf16", PROBLEM), PROBLEM)


def test_scheme_names_are_checked():
    with pytest.raises(ValueError, match="schemes: expected scheme names .* found 'gptq_int4'"):
        claim_subset("torch", "vendor-typo", schemes=("gptq_int4",))
    assert claim_subset("torch", "vendor-one", schemes="bf16").schemes == {"bf16"}
