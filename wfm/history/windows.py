"""The time window of a historic query: its filter fixed at the asker's ``now``, and the range its
``time`` predicate and ``--since``/``--until`` allow. Pure (no Spark): ``wfm history --broker``
computes windows without loading pyspark, and the store compiles the same bounds to Spark."""

from __future__ import annotations

from collections.abc import Sequence

from broker.errors import LocalError
from broker.language import Atom, Filter, TimeRef
from broker.language.operators import TIME_ATTRIBUTE
from wfm.history.asker import absolute
from wfm.history.groups import plain_filter

__all__ = ["QueryError", "Window", "composite_windows", "time_bounds", "window"]

Window = tuple[Filter, float | None, float | None]  # a filter fixed at the asker's now, since, until


class QueryError(LocalError):
    """A historic query that cannot be asked as written."""


def time_bounds(
    subscription: Filter | None, now: float, since: float | None = None, until: float | None = None
) -> tuple[float | None, float | None]:
    """The narrowest [low, high] the filter's ``time`` predicate and the window allow (None: open)."""
    low, high = since, until
    if subscription is not None and TIME_ATTRIBUTE in subscription:
        predicate = subscription[TIME_ATTRIBUTE]
        assert isinstance(predicate.value, TimeRef)
        at = predicate.value.resolve(now)
        if predicate.op in (">", ">="):
            low = at if low is None else max(low, at)
        else:
            high = at if high is None else min(high, at)
    return low, high


def window(wanted: Filter, now: float, since: float | None, until: float | None) -> Window:
    """The filter with its time reference fixed at ``now``, and the bounds of its time range."""
    fixed = absolute(wanted, now)
    return (fixed, *time_bounds(fixed, now, since, until))


def composite_windows(
    atoms: Sequence[Atom], now: float, since: float | None, until: float | None
) -> list[Window]:
    """The window of each atom's plain filter, every one ending at the same instant, though the
    historians answer them at different times. QueryError if one would end later than ``now``:
    a composite historic query covers the past only."""
    windows: list[Window] = []
    for atom in atoms:
        fixed, low, high = window(plain_filter(atom), now, since, until)
        if high is not None and high > now:
            raise QueryError("a composite historic query covers the past only: it cannot end later than now")
        windows.append((fixed, low, now if high is None else high))
    return windows
