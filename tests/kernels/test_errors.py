"""kernels.errors.exception_text: what a result row or a refusal says of an exception
(PYTEST_DONT_REWRITE: the bare assert below must stay bare, as in an engine's code)."""

from __future__ import annotations

from moecert.kernels.errors import exception_text


def _bare_assert(flag):
    assert flag > 1


def test_a_bare_assert_says_where_it_fired_and_what_it_asserts():
    """vLLM 0.25.1's MXFP6 layer on an H200 raised an assert with no message: the row read
    "AssertionError: " and nothing else, which no one can triage."""
    try:
        _bare_assert(0)
    except AssertionError as e:
        text = exception_text(e)
    assert text.startswith("AssertionError: at test_errors.py:")
    assert text.endswith("(assert flag > 1)")


def test_an_exception_with_a_message_keeps_it():
    assert exception_text(ValueError("scale: expected > 0")) == "ValueError: scale: expected > 0"
    assert exception_text(KeyError("w13")) == "KeyError: 'w13'"
