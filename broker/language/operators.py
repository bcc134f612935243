"""Operators of the language and what each one means, written out literally.

Everything that decides which value an operator accepts and when a predicate holds lives here:
the parser uses it to refuse bad pairings, the brute-force oracle to match, and the matcher's
tests compare the fast index against it.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

from broker.language.regex import REGEX, search
from broker.language.values import TimeRef, Value, Var, is_number

__all__ = [
    "ALL_OPERATORS",
    "NUMERIC_OPERATORS",
    "PRESENT",
    "STRING_OPERATORS",
    "TIME_ATTRIBUTE",
    "TIME_OPERATORS",
    "VARIABLE_OPERATORS",
    "holds",
]

PRESENT = "isPresent"
TIME_ATTRIBUTE = "time"

_COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}

STRING_OPERATORS: dict[str, Callable[[str, str], bool]] = {
    "eq": operator.eq,
    "neq": operator.ne,
    "str-lt": operator.lt,
    "str-le": operator.le,
    "str-gt": operator.gt,
    "str-ge": operator.ge,
    "str-prefix": lambda actual, expected: actual.startswith(expected),
    "str-postfix": lambda actual, expected: actual.endswith(expected),
    "str-contains": lambda actual, expected: expected in actual,
    REGEX: lambda actual, expected: search(expected, actual),  # RE2, anywhere in the value: regex.py
}

NUMERIC_OPERATORS: dict[str, Callable[[float, float], bool]] = {
    "=": operator.eq,
    "<>": operator.ne,
    **_COMPARE,
}

TIME_OPERATORS = frozenset(_COMPARE)
VARIABLE_OPERATORS = {"S": "eq", "I": "=", "F": "="}
ALL_OPERATORS = frozenset(STRING_OPERATORS) | frozenset(NUMERIC_OPERATORS) | {PRESENT}


def holds(op: str, expected: Value | Var | TimeRef, actual: Value, now: float = 0.0) -> bool:
    """Whether ``actual`` satisfies ``op expected``; ``now`` (epoch seconds) resolves time refs.

    A string operator never holds for a number and a numeric operator never for a string. A
    variable only asks for a value of its type here; equal bindings are the join's business.
    """
    if isinstance(expected, Var):
        return expected.accepts(actual)
    if isinstance(expected, TimeRef):
        return is_number(actual) and _COMPARE[op](actual, expected.resolve(now))
    if op == PRESENT:
        return isinstance(actual, str) == isinstance(expected, str)
    if op in STRING_OPERATORS:
        return isinstance(actual, str) and STRING_OPERATORS[op](actual, expected)  # type: ignore[arg-type]
    return is_number(actual) and NUMERIC_OPERATORS[op](actual, expected)  # type: ignore[arg-type]
