"""`Variant`: what `supports` receives. Comparing it with a scheme name fails loudly, so a
vendor backend written against a bare name does not silently claim nothing."""

from __future__ import annotations

from dataclasses import replace

import pytest
from moecert.kernels import Platform, Variant, register_backend, select_backend
from moecert.kernels import oracle as oracle_module
from moecert.kernels.registry import unregister_backend
from moecert.reference import MoEProblem


def test_equal_configs_compare_and_hash_as_values():
    a, b = Variant.defaults("gptq-int4"), Variant.of("gptq-int4")
    assert a == b and {a: 1}[b] == 1
    assert a != replace(a, group_size=32) and a != Variant.defaults("awq-int4")
    assert a != 3


@pytest.mark.parametrize("compare", [
    lambda q: q == "gptq-int4",
    lambda q: q != "gptq-int4",
    lambda q: "gptq-int4" == q,
    lambda q: q in ("awq-int4", "gptq-int4"),
], ids=["==", "!=", "reflected", "in tuple"])
def test_comparing_with_a_scheme_name_raises(compare):
    # (a set or dict of names is found by hash, which is over every field: it never asks)
    with pytest.raises(TypeError, match=r"compare its scheme name, variant.scheme == "
                       r"'[a-z0-9-]+' \(supports\(\) receives a Variant"):
        compare(Variant.defaults("gptq-int4"))


def test_a_backend_written_against_names_fails_at_its_first_question(monkeypatch):
    class ByName:
        name = "vendor-by-name"

        def available(self):
            return None

        def supports(self, scheme, problem):
            return None if scheme == "gptq-int4" else "gptq-int4 only"

        def create_layer(self, checkpoint, problem): ...
        def load_weights(self, layer, checkpoint): ...
        def process_weights_after_loading(self, layer): ...
        def apply(self, layer, hidden_states, topk_weights, topk_ids, *, out=None, **opts): ...

    register_backend(ByName())
    monkeypatch.setattr(oracle_module, "PRIORITY", {k: ("vendor-by-name",)
                                                    for k in oracle_module.PRIORITY})
    try:
        with pytest.raises(TypeError, match="variant.scheme == 'gptq-int4'"):
            select_backend("awq-int4", MoEProblem(M=1, K=128, N=128, E=2, topk=1),
                           Platform.cpu())
    finally:
        unregister_backend("vendor-by-name")
