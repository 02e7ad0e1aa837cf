"""Expected failures select rows by their case's fields (issue 45 item 4): the scheme, the
variant's resolved attributes, the problem's, the case's routing, model and folder
(conformance/harness/case_fields.py), so an entry says what it covers and a new case is
covered only where its fields are, whatever its id looks like."""

from __future__ import annotations

from pathlib import Path

import pytest
from moecert.conformance.harness.cases import Case
from moecert.conformance.harness.xfail import XfailList
from moecert.reference import MoEProblem
from moecert.reference.schemes import Variant

HARNESS = Path(__file__).resolve().parents[3] / "conformance" / "harness"
EXPECT = 'backend = "v"\nchecks = ["accuracy"]\nstatus = ["fail"]\nmessage = "m"\n'


def _row(case: Case, status="fail") -> dict:
    return {"backend": case.backend, "case_id": case.case_id, "check": "accuracy",
            "status": status, "message": "m", "case_json": case.to_json()}


def _list(tmp_path, fields: str) -> XfailList:
    path = tmp_path / "x.toml"
    path.write_text(f'[[xfail]]\n{EXPECT}{fields}\nreason = "tracked in v#1"\n')
    return XfailList.load(path)


def _case(scheme="gptq-int4", M=4, **attrs) -> Case:
    return Case("v", Variant(scheme, **attrs), MoEProblem(M=M, K=128, N=64, E=4, topk=2))


def test_a_variant_field_matches_the_resolved_variant_not_the_id(tmp_path):
    # sym is not in the id of a gptq_v2 case (the format's default), yet the entry names it
    xf = _list(tmp_path, 'scheme = "gptq-int4"\nvariant = { checkpoint_format = "gptq_v2", '
                         'sym = true }')
    v2 = _case(checkpoint_format="gptq_v2")
    assert "sym" not in v2.case_id
    assert xf.apply([_row(v2)])[0]["status"] == "xfail"
    for other in (_case(), _case(checkpoint_format="gptq_v2", sym=False),
                  _case("awq-int4")):
        assert xf.apply([_row(other)])[0]["status"] == "fail", other.case_id


def test_problem_bounds_and_lists_and_the_folder(tmp_path):
    xf = _list(tmp_path, 'scheme = ["gptq-int4", "awq-int4"]\nfolder = false\n'
                         'problem = { M = { min = 1 }, dtype = ["bf16"] }')
    assert xf.apply([_row(_case(M=1))])[0]["status"] == "xfail"
    assert xf.apply([_row(_case("awq-int4", M=9))])[0]["status"] == "xfail"
    assert xf.apply([_row(_case(M=0))])[0]["status"] == "fail"  # below the bound
    assert xf.apply([_row(_case("ct-int4"))])[0]["status"] == "fail"  # not listed


def test_a_row_without_its_case_matches_no_field_entry(tmp_path):
    xf = _list(tmp_path, 'scheme = "gptq-int4"')
    row = {k: v for k, v in _row(_case()).items() if k != "case_json"}
    assert xf.apply([row])[0]["status"] == "fail"


@pytest.mark.parametrize(("fields", "error"), [
    ('variant = { group = 32 }', "unknown variant field 'group'; fields: group_size"),
    ('problem = { rows = 1 }', "unknown problem field 'rows'"),
    ('scheme = "gptq-int3"', "unknown scheme 'gptq-int3'"),
    ('problem = { M = { least = 1 } }', r"problem.M bounds must be \{ min = ..., max = ... \}"),
    ('variant = 3', "variant must be a table of fields"),
])
def test_a_bad_field_is_refused_naming_the_entry(tmp_path, fields, error):
    with pytest.raises(ValueError, match=r"x\.toml: xfail entry 0: " + error):
        _list(tmp_path, fields)


@pytest.mark.parametrize("path", sorted(HARNESS.glob("xfail*.toml")), ids=lambda p: p.name)
def test_the_packaged_lists_select_by_fields_not_by_case_id_patterns(path):
    xf = XfailList.load(path)  # parses: every field and scheme named is known
    assert all(e.case_id == "*" for e in xf.entries), \
        f"{path.name}: an entry matches a case_id pattern; name the fields it covers"
