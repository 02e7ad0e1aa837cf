"""Case ids: stable across runs and processes, distinct for every field that differs."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace

import pytest
from moecert.conformance.harness.cases import Case
from moecert.reference import MoEProblem
from moecert.reference.schemes import Variant

BASE = Case("triton", Variant("gptq-int4", group_size=64, sym=False, checkpoint_format="gptq_v2"),
            MoEProblem(M=33, K=256, N=128, E=8, topk=2), seed=0)


def test_id_reads_as_documented():
    assert BASE.case_id == "triton/gptq-int4[gptq_v2,g64,asym]/M33.K256.N128.E8.k2/bf16.silu/s0"


def test_a_strided_id_says_so():
    assert replace(BASE, strided=True).case_id == \
        "triton/gptq-int4[gptq_v2,g64,asym]/M33.K256.N128.E8.k2/bf16.silu.strided/s0"


def test_id_is_stable_across_processes():
    code = ("from moecert.conformance.harness.cases import Case; from moecert.reference import "
            "MoEProblem; from moecert.reference.schemes import Variant; print(Case('triton', "
            "Variant('gptq-int4', sym=False), MoEProblem(M=3, K=64, N=32, E=4, "
            "topk=2, expert_map=(0, -1, 1, -1, 2, 3)), seed=2).case_id)")
    out = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout for _ in range(2)}
    assert len(out) == 1 and "ep-" in out.pop()


VARIANTS = {
    "backend": replace(BASE, backend="torch"),
    "scheme": replace(BASE, variant=BASE.variant.replace(scheme="gptq-int8")),
    "attr": replace(BASE, variant=BASE.variant.replace(act_order=True)),
    "M": replace(BASE, problem=replace(BASE.problem, M=34)),
    "dtype": replace(BASE, problem=replace(BASE.problem, dtype="fp16")),
    "activation": replace(BASE, problem=replace(BASE.problem, activation="gelu")),
    "bias": replace(BASE, problem=replace(BASE.problem, bias=True)),
    "router": replace(BASE, problem=replace(BASE.problem, topk=1,
                                            apply_router_weight_on_input=True)),
    "expert_map": replace(BASE, problem=replace(BASE.problem, E=4,
                                                expert_map=(0, -1, 1, -1, 2, -1, 3, -1))),
    "other_map": replace(BASE, problem=replace(BASE.problem, E=4,
                                               expert_map=(-1, 0, -1, 1, -1, 2, -1, 3))),
    "batched": replace(BASE, problem=replace(BASE.problem, activation_format="batched")),
    "seed": replace(BASE, seed=1),
    "routing": replace(BASE, routing="skewed"),
    "strided": replace(BASE, strided=True),
}


def test_every_field_changes_the_id():
    ids = [BASE.case_id] + [c.case_id for c in VARIANTS.values()]
    assert len(set(ids)) == len(ids), ids


def test_unknown_attribute():
    text = BASE.to_json().replace('"group_size"', '"groupsize"')
    with pytest.raises(ValueError, match="unknown checkpoint attributes"):
        Case.from_json(text)


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_json_round_trip_keeps_the_case(name):
    case = VARIANTS[name]
    again = Case.from_json(case.to_json())
    assert again == case and again.case_id == case.case_id


def test_unknown_routing_is_refused():
    with pytest.raises(ValueError, match="routing"):
        replace(BASE, routing="round-robin")


def test_strided_must_be_a_bool():
    with pytest.raises(ValueError, match="strided"):
        replace(BASE, strided="yes")


def test_a_case_holds_its_variant_through_its_text():
    # a GPTQ file of w4a8-int8 told sym=False: False is the scheme's default sym, but not this
    # format's, so the case's text must carry it (it fell out of `attrs` before issue 45)
    v = Variant("w4a8-int8", checkpoint_format="gptq", sym=False)
    case = Case("torch", v, BASE.problem)
    assert case.variant is v and case.scheme == "w4a8-int8"
    again = Case.from_json(case.to_json())
    assert again.variant == v and again.case_id == case.case_id
    assert "asym" in case.case_id
