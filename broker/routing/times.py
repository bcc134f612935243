"""Relative times in subscriptions (``[time,<,now+1h]``) become absolute at the edge broker.

The broker that accepts a subscription from its client fixes ``now`` in it with its own clock's
value, so every broker on the subscription's path agrees on what it means.
"""

from __future__ import annotations

from broker.language.model import And, Atom, Composite, Filter, Or, Predicate, Sequence, Times
from broker.language.values import TimeRef

__all__ = ["fix_composite_time", "fix_time"]


def fix_time(subscription: Filter, now: float) -> Filter:
    if not any(isinstance(p.value, TimeRef) and p.value.offset is not None for p in subscription.predicates):
        return subscription
    predicates = tuple(
        Predicate(p.attribute, p.op, p.value.absolute(now)) if isinstance(p.value, TimeRef) else p
        for p in subscription.predicates
    )
    return Filter(subscription.cls, predicates)


def fix_composite_time(composite: Composite, now: float) -> Composite:
    if isinstance(composite, Atom):
        return Atom(fix_time(composite.filter, now))
    if isinstance(composite, Times):
        operand = fix_composite_time(composite.operand, now)
        return Times(operand, composite.count, composite.attribute, composite.step)
    kind: type[And] | type[Or] | type[Sequence] = type(composite)
    return kind(tuple(fix_composite_time(o, now) for o in composite.operands))
