"""`-k`: cases selected by id the way pytest's `-k` selects tests: words matched as substrings
of the case id, case-insensitively, combined with `and`, `or`, `not` and parentheses, e.g.
`-k "gptq and g32 and not bias"`. A malformed expression is one `UsageError` line."""

from __future__ import annotations

import re
from collections.abc import Callable

from .option_values import UsageError

_TOKEN = re.compile(r"\s*(\(|\)|[^\s()]+)")


def case_filter(expression: str) -> Callable[[str], bool]:
    """A predicate on case ids from a pytest-like -k expression (see the module docstring)."""
    tokens = _TOKEN.findall(expression)
    if not tokens:
        raise UsageError(f"-k {expression!r}: empty expression")
    pos = 0

    def peek():
        return tokens[pos] if pos < len(tokens) else None

    def take(expected=None):
        nonlocal pos
        token = peek()
        if token is None or (expected and token != expected) or (
                not expected and token in ("and", "or", ")")):
            found = "the end" if token is None else repr(token)
            raise UsageError(f"-k {expression!r}: expected "
                             f"{repr(expected) if expected else 'a word'}, found {found}")
        pos += 1
        return token

    def chain(word, parse_term, combine):
        """term (word term)*: the terms' results combined (any for "or", all for "and")."""
        terms = [parse_term()]
        while peek() == word:
            take(word)
            terms.append(parse_term())
        return lambda s: combine(t(s) for t in terms)

    def parse_or():
        return chain("or", parse_and, any)

    def parse_and():
        return chain("and", parse_not, all)

    def parse_not():
        if peek() == "not":
            take("not")
            inner = parse_not()
            return lambda s: not inner(s)
        if peek() == "(":
            take("(")
            inner = parse_or()
            take(")")
            return inner
        word = take().lower()
        return lambda s: word in s

    predicate = parse_or()
    if pos != len(tokens):
        raise UsageError(f"-k {expression!r}: unexpected {tokens[pos]!r}")
    return lambda case_id: predicate(case_id.lower())


__all__ = ["case_filter"]
