"""Relations between filters that routing needs: overlap, covering and fit.

Each predicate is read as the set of values it accepts. Routing may be generous but never stingy:

* ``overlaps`` may say yes when unsure (the cost is a subscription forwarded where nothing will
  match), never no when a publication could satisfy both, or messages would be lost;
* ``covers`` may say no when unsure (the cost is a subscription forwarded that could have been
  held back), never yes wrongly, or the covered subscription would miss publications.

Numbers are real numbers here (``>50`` covers ``>=51``, ``>=51`` does not cover ``>50``: 50.5).

``str-regex`` is answered exactly where a single value is involved (an ``eq`` point is searched
with the pattern: covered or overlapping when it matches; ``neq v`` covers a pattern that refuses
``v``) and conservatively otherwise: a pattern covers only the same pattern (the general question,
language inclusion, costs exponential time in the worst case, and a broker decides it for every
subscription it forwards), is covered only by ``isPresent`` or ``neq``, and overlaps everything of
its type (emptiness of an intersection is decidable but as costly; the price is a subscription
forwarded towards a publisher that never sends a match).
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.language.model import Filter, Predicate, Publication
from broker.language.operators import PRESENT, TIME_ATTRIBUTE, holds
from broker.language.regex import REGEX
from broker.language.values import Value, Var

__all__ = [
    "Fit",
    "advertisement_covers",
    "fits",
    "overlaps",
    "predicate_covers",
    "predicate_overlaps",
    "subscription_covers",
]

_POINT = {"eq", "="}
_EXCEPT = {"neq", "<>"}


@dataclass(frozen=True, slots=True)
class _Range:
    """An interval; ``None`` is unbounded. Strings order by code point, numbers are reals."""

    low: Value | None
    low_closed: bool
    high: Value | None
    high_closed: bool

    def intersects(self, other: _Range) -> bool:
        low, low_closed = _tighter_low(self, other)
        high, high_closed = _tighter_high(self, other)
        if low is None or high is None:
            return True
        return low < high or (low == high and low_closed and high_closed)  # type: ignore[operator]

    def contains(self, other: _Range) -> bool:
        return _tighter_low(self, other) == (other.low, other.low_closed) and _tighter_high(self, other) == (
            other.high,
            other.high_closed,
        )


def _tighter_low(a: _Range, b: _Range) -> tuple[Value | None, bool]:
    if a.low is None:
        return b.low, b.low_closed
    if b.low is None or a.low > b.low:  # type: ignore[operator]
        return a.low, a.low_closed
    if b.low > a.low:  # type: ignore[operator]
        return b.low, b.low_closed
    return a.low, a.low_closed and b.low_closed


def _tighter_high(a: _Range, b: _Range) -> tuple[Value | None, bool]:
    if a.high is None:
        return b.high, b.high_closed
    if b.high is None or a.high < b.high:  # type: ignore[operator]
        return a.high, a.high_closed
    if b.high < a.high:  # type: ignore[operator]
        return b.high, b.high_closed
    return a.high, a.high_closed and b.high_closed


def _prefix_end(prefix: str) -> str | None:
    """The least string greater than every string starting with ``prefix`` (None: no bound)."""
    while prefix and prefix[-1] == "\U0010ffff":
        prefix = prefix[:-1]
    return prefix[:-1] + chr(ord(prefix[-1]) + 1) if prefix else None


_EVERYTHING = _Range(None, False, None, False)


def _value_type(predicate: Predicate) -> type:
    value = predicate.value
    if isinstance(value, Var):
        return str if value.kind == "S" else float
    return str if isinstance(value, str) else float


def _range(predicate: Predicate) -> _Range | None:
    """The predicate as an interval, or None when it is not one (neq, postfix, contains)."""
    op, value = predicate.op, predicate.value
    if isinstance(value, Var) or op == PRESENT:
        return _EVERYTHING
    if op in _POINT:
        return _Range(value, True, value, True)  # type: ignore[arg-type]
    if op in ("<", "str-lt"):
        return _Range(None, False, value, False)  # type: ignore[arg-type]
    if op in ("<=", "str-le"):
        return _Range(None, False, value, True)  # type: ignore[arg-type]
    if op in (">", "str-gt"):
        return _Range(value, False, None, False)  # type: ignore[arg-type]
    if op in (">=", "str-ge"):
        return _Range(value, True, None, False)  # type: ignore[arg-type]
    if op == "str-prefix":
        assert isinstance(value, str)
        return _Range(value, True, _prefix_end(value), False)
    return None


def _point(predicate: Predicate) -> Value | None:
    return predicate.value if predicate.op in _POINT and not isinstance(predicate.value, Var) else None  # type: ignore[return-value]


def predicate_overlaps(a: Predicate, b: Predicate) -> bool:
    """Could one value satisfy both predicates (on the same attribute)?"""
    if _value_type(a) is not _value_type(b):
        return False
    for one, other in ((a, b), (b, a)):
        point = _point(one)
        if point is not None:
            return holds(other.op, other.value, point)
    range_a, range_b = _range(a), _range(b)
    if range_a is not None and range_b is not None:
        return range_a.intersects(range_b)
    return True  # neq, postfix, contains, regex: infinitely many values may remain; be generous


def predicate_covers(wide: Predicate, narrow: Predicate) -> bool:
    """Does every value satisfying ``narrow`` satisfy ``wide``?"""
    if _value_type(wide) is not _value_type(narrow):
        return False
    point = _point(narrow)
    if point is not None:
        return holds(wide.op, wide.value, point)
    if isinstance(wide.value, Var) and wide.value.kind == "I":
        return False  # only integers; narrow is not a single point
    if _range(wide) is _EVERYTHING:
        return True
    if wide.op in _EXCEPT:
        return not holds(narrow.op, narrow.value, wide.value)  # type: ignore[arg-type]
    if isinstance(narrow.value, Var) and narrow.value.kind == "I":
        return _range(wide) is _EVERYTHING
    wide_range, narrow_range = _range(wide), _range(narrow)
    if wide_range is not None and narrow_range is not None:
        return wide_range.contains(narrow_range)
    wide_text, narrow_text = wide.value, narrow.value
    if not isinstance(wide_text, str) or not isinstance(narrow_text, str):
        return False
    if wide.op == REGEX:
        return narrow.op == REGEX and narrow_text == wide_text  # the same pattern; no more is proven
    if wide.op == "str-postfix":
        return narrow.op == "str-postfix" and narrow_text.endswith(wide_text)
    if wide.op == "str-contains":
        return narrow.op in ("str-contains", "str-postfix", "str-prefix") and wide_text in narrow_text
    return False


def overlaps(subscription: Filter, advertisement: Filter) -> bool:
    """Route the subscription towards the advertisement? Same class, and every attribute of the
    subscription (but ``time``, which is the broker's) advertised with an overlapping predicate."""
    if subscription.cls != advertisement.cls:
        return False
    for predicate in subscription.predicates:
        if predicate.attribute == TIME_ATTRIBUTE:
            continue
        if predicate.attribute not in advertisement:
            return False
        if not predicate_overlaps(predicate, advertisement[predicate.attribute]):
            return False
    return True


def subscription_covers(wide: Filter, narrow: Filter) -> bool:
    """Does every publication matching ``narrow`` match ``wide``?"""
    if wide.cls != narrow.cls:
        return False
    for predicate in wide.predicates:
        if predicate.attribute not in narrow:
            return False
        other = narrow[predicate.attribute]
        if predicate.attribute == TIME_ATTRIBUTE:
            if other != predicate:
                return False
        elif not predicate_covers(predicate, other):
            return False
    return True


def advertisement_covers(wide: Filter, narrow: Filter) -> bool:
    """Does every publication fitting ``narrow`` fit ``wide``? A fitting publication may carry any
    subset of the advertised attributes, so ``wide`` must advertise all of ``narrow``'s, wider."""
    if wide.cls != narrow.cls:
        return False
    for predicate in narrow.predicates:
        if predicate.attribute not in wide:
            return False
        if not predicate_covers(wide[predicate.attribute], predicate):
            return False
    return True


def fits(publication: Publication, advertisement: Filter) -> bool:
    """May a client that advertised this publish that? Same class, and every attribute of the
    publication advertised and satisfied (advertised attributes may be left out)."""
    return Fit.of(advertisement)(publication)


@dataclass(frozen=True, slots=True)
class Fit:
    """``fits`` for one advertisement, compiled once: an edge broker checks every publication
    of a client against the client's advertisements. Plain data, so that a broker's snapshot
    holds it; ``isPresent`` (what advertisements mostly say) is a type test."""

    cls: str
    tests: dict[str, tuple[str, object]]  # attribute -> (op, value); isPresent: (op, a string?)

    @classmethod
    def of(cls, advertisement: Filter) -> Fit:
        tests: dict[str, tuple[str, object]] = {}
        for predicate in advertisement.predicates:
            chosen = advertisement[predicate.attribute]  # the predicate fits() would ask
            value = isinstance(chosen.value, str) if chosen.op == PRESENT else chosen.value
            tests[chosen.attribute] = (chosen.op, value)
        return cls(advertisement.cls, tests)

    def __call__(self, publication: Publication) -> bool:
        if publication.cls != self.cls:
            return False
        tests = self.tests
        for name, value in publication.fields.items():
            test = tests.get(name)
            if test is None:
                return False
            op, expected = test
            if op == PRESENT:
                if isinstance(value, str) is not expected:
                    return False
            elif not holds(op, expected, value):  # type: ignore[arg-type]
                return False
        return True
