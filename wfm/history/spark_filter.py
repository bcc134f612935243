r"""Filters compiled into one Spark Column expression over the store's wide layout.

The layout (see docs/history.md): fixed columns ``id``, ``time`` (broker time, epoch seconds),
``publisher``, ``class``, ``date``, and per attribute ``s_NAME`` (string) and/or ``n_NAME`` (double):
an attribute's value sits in the column of its type, the other is null, and both are null where a
publication lacks it. Every number the language accepts is an exact double, so comparing doubles is
comparing the numbers; UTF-8 byte order, Spark's string order, is code point order, Python's.

So the semantics of ``broker.matching.oracle`` follow from null handling: a predicate on a missing
attribute, or on one of the other type, reads null, which is never true. ``time`` predicates
compare the broker time with their reference resolved at ``now`` (the asker's clock).

``str-regex`` is not Spark's ``rlike``: that is Java's regex, another dialect (its ``.`` refuses
``\u2028`` and ``\u0085``, ``[[:alpha:]]`` is a set of the characters ``:alph``, ``(?U)`` asks for
Unicode classes where RE2 reads "ungreedy") and a backtracking engine that one hostile pattern keeps
busy for hours on an executor. It is a Python UDF that searches with RE2 under the broker's
options, so history answers exactly what live matching does, in linear time. Its function carries
only the pattern and imports only ``re2`` (``google-re2``, a dependency of this package): an
executor's Python needs that, not this package nor pandas (a plain UDF, not a ``pandas_udf``). The
pattern was checked when the filter was made (``broker.language.regex``), so it compiles there too.
A local driver runs its Python workers with this process's interpreter (``spark.py``), a cluster
with its ``PYSPARK_PYTHON``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from datetime import UTC, date, datetime
from functools import reduce
from typing import Any

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType

from broker.language import Filter, Predicate, TimeRef, Var
from broker.language.operators import PRESENT, STRING_OPERATORS
from broker.language.regex import MAX_MEM, REGEX

__all__ = [
    "NUMBER_PREFIX",
    "STRING_PREFIX",
    "attribute_column",
    "compile_filter",
    "date_bounds",
    "utc_day",
    "value_column",
]

STRING_PREFIX = "s_"
NUMBER_PREFIX = "n_"

_COMPARE: dict[str, Callable[[Column, Any], Column]] = {
    "eq": lambda column, value: column == value,
    "neq": lambda column, value: column != value,
    "str-lt": lambda column, value: column < value,
    "str-le": lambda column, value: column <= value,
    "str-gt": lambda column, value: column > value,
    "str-ge": lambda column, value: column >= value,
    "str-prefix": Column.startswith,
    "str-postfix": Column.endswith,
    "str-contains": Column.contains,
}
_COMPARE |= {
    "=": _COMPARE["eq"],
    "<>": _COMPARE["neq"],
    "<": _COMPARE["str-lt"],
    "<=": _COMPARE["str-le"],
    ">": _COMPARE["str-gt"],
    ">=": _COMPARE["str-ge"],
}


def attribute_column(name: str, string: bool) -> str:
    """The column that holds attribute ``name``'s values of one type."""
    return (STRING_PREFIX if string else NUMBER_PREFIX) + name


def value_column(name: str, string: bool, columns: Collection[str]) -> Column:
    """That column, or a typed null when no stored publication has such a value."""
    column = attribute_column(name, string)
    return F.col(f"`{column}`") if column in columns else F.lit(None).cast("string" if string else "double")


def compile_filter(subscription: Filter, columns: Collection[str], now: float) -> Column:
    """One boolean Column, true exactly where ``oracle.matches`` is (``time`` resolved at ``now``)."""
    conditions = [F.col("class") == F.lit(subscription.cls)]
    conditions += [_predicate(p, columns, now) for p in subscription.predicates]
    return reduce(Column.__and__, conditions)


def _predicate(predicate: Predicate, columns: Collection[str], now: float) -> Column:
    op, expected = predicate.op, predicate.value
    if isinstance(expected, TimeRef):
        return _COMPARE[op](F.col("time"), F.lit(expected.resolve(now)))
    if isinstance(expected, Var):
        present = value_column(predicate.attribute, expected.kind == "S", columns)
        if expected.kind == "I":
            return present == F.floor(present)  # only integral numbers are ints in the model
        return present.isNotNull()
    string = isinstance(expected, str)
    column = value_column(predicate.attribute, string, columns)
    if op == PRESENT:
        return column.isNotNull()
    assert string == (op in STRING_OPERATORS)  # the model refuses any other pairing
    if op == REGEX:
        assert isinstance(expected, str)
        return _regex(column, expected)
    return _COMPARE[op](column, F.lit(expected))


def _regex(column: Column, pattern: str) -> Column:
    """``column`` searched with ``pattern`` by RE2 on the executors: null where the column is."""
    max_mem = MAX_MEM
    compiled: list[Any] = []  # per executor process: the closure is unpickled once per task

    # Defined here so that cloudpickle ships it by value: the pattern, a number and ``import re2``.
    def search(value: str | None) -> bool | None:
        if value is None:
            return None
        if not compiled:
            import re2

            options = re2.Options()
            options.max_mem, options.never_capture, options.log_errors = max_mem, True, False
            compiled.append(re2.compile(pattern, options))
        return compiled[0].search(value) is not None

    return F.udf(search, BooleanType(), useArrow=False)(column)  # plain: no pandas, no Arrow


def date_bounds(low: float | None, high: float | None) -> Column:
    """A condition on the ``date`` partition column alone, so Spark reads only the days in range."""
    conditions = [F.lit(True)]
    if low is not None:
        conditions.append(F.col("date") >= F.lit(utc_day(low)))
    if high is not None:
        conditions.append(F.col("date") <= F.lit(utc_day(high)))
    return reduce(Column.__and__, conditions)


def utc_day(seconds: float) -> date:
    """The ``date`` partition an instant falls in."""
    return datetime.fromtimestamp(seconds, UTC).date()
