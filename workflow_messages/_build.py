"""What the shape modules share: a filter from equalities and presences, and a safe string value.

Shapes are built as model objects rather than parsed from text: the constructors check every value
just as the parser would, canonical ``str()`` gives the text, and a workflow of a thousand jobs
translates without a thousand parser runs (tests check that every text parses back to an equal
object).
"""

from __future__ import annotations

from collections.abc import Iterable

from broker.language import Filter, Predicate, Value, Var

__all__ = ["filter_of", "text_value"]


def filter_of(
    cls: str, equal: dict[str, Value | Var], present: Iterable[str] = (), numbers: Iterable[str] = ()
) -> Filter:
    """``cls`` with the ``equal`` values, and the ``present`` strings and ``numbers`` of any value."""
    predicates = [Predicate(name, "eq", value) for name, value in equal.items()]
    predicates += [Predicate(name, "isPresent", "") for name in present]
    predicates += [Predicate(name, "isPresent", 0) for name in numbers]
    return Filter(cls, tuple(predicates))


def text_value(text: str, limit: int = 500) -> str:
    """``text`` as a valid string value: line breaks become spaces, ``"`` becomes ``'`` when both
    quote kinds occur, and it is cut to ``limit`` characters (a detail, not a log)."""
    flat = " ".join(text.split())
    if "'" in flat and '"' in flat:
        flat = flat.replace('"', "'")
    return flat[:limit]
