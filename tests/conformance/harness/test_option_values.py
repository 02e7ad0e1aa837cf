"""The option checks shared by `moecert run`, `moecert calibrate` and the pytest plugin: each
wrong value is a `UsageError` whose one-line message says what was wrong."""

from __future__ import annotations

import re

import pytest
from moecert.conformance.harness.case_filter import case_filter
from moecert.conformance.harness.option_values import (
    UsageError,
    check_backends,
    check_name,
    positive_int,
    positive_seconds,
    run_id,
    scheme_name,
    shard_spec,
    suite_name,
)


@pytest.mark.parametrize("expression, matches, misses", [
    ("g32", ["t/gptq-int4[g32]/M1"], ["t/gptq-int4[g64]/M1"]),
    ("GPTQ and not g32", ["t/gptq-int4[g64]/M1"], ["t/gptq-int4[g32]/M1", "t/bf16/M1"]),
    ("bf16 or g32 and M2", ["t/bf16/M1", "t/gptq-int4[g32]/M2"], ["t/gptq-int4[g32]/M1"]),
    ("(bf16 or g32) and M2", ["t/bf16/M2"], ["t/bf16/M1", "t/gptq-int4[g32]/M1"]),
    ("not not bias", ["t/bf16/M1/bf16.silu.bias"], ["t/bf16/M1/bf16.silu"]),
])
def test_k_is_substrings_with_and_or_not(expression, matches, misses):
    keep = case_filter(expression)
    assert all(keep(i) for i in matches) and not any(keep(i) for i in misses)


@pytest.mark.parametrize("expression", ["", "and", "a and", "(a or b", "a b", "a )", "not"])
def test_a_malformed_k_is_a_usage_error(expression):
    with pytest.raises(UsageError, match=re.escape(f"-k {expression!r}")):
        case_filter(expression)


@pytest.mark.parametrize("text, expected", [("0/1", (0, 1)), ("3/4", (3, 4)), (" 1 / 2 ", (1, 2))])
def test_shard_spec(text, expected):
    assert shard_spec(text) == expected


@pytest.mark.parametrize("check, text", [
    (shard_spec, "2/2"), (shard_spec, "0/0"), (shard_spec, "-1/2"), (shard_spec, "1"),
    (positive_int, "0"), (positive_int, "two"), (positive_seconds, "-1"),
    (positive_seconds, "nan"), (positive_seconds, "inf"), (run_id, "a/b"), (run_id, "all"),
    (run_id, ".hidden"), (check_name, "acuracy"), (scheme_name, "gptq"), (suite_name, "ic"),
    (check_backends, ["torch", "nope"]),
])
def test_a_wrong_value_is_one_line(check, text):
    with pytest.raises(UsageError) as info:
        check(text)
    assert "\n" not in str(info.value) and str(info.value)


def test_names_are_the_declared_ones():
    from moecert.conformance.harness.checks import CHECKS
    from moecert.conformance.harness.suites import SUITES
    from moecert.reference import SCHEME_NAMES

    assert [check_name(c) for c in CHECKS] == list(CHECKS)
    assert [scheme_name(s) for s in SCHEME_NAMES] == list(SCHEME_NAMES)
    assert [suite_name(s) for s in SUITES] == list(SUITES)
    assert check_backends(["torch"]) == ["torch"]
    with pytest.raises(UsageError, match=r"unknown check 'acuracy' \(did you mean 'accuracy'"):
        check_name("acuracy")
