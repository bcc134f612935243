"""What ``wfm history`` asks of its two sources: a store opened for queries (``--store``), and the
time windows of a query asked through the overlay (``--broker``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from broker.language import Atom, Filter
from wfm.history.asker import HistoryError, absolute
from wfm.history.connect import master_for
from wfm.history.groups import plain_filter
from wfm.history.historian import first_line
from wfm.history.spark import resolve_master, spark_session
from wfm.history.spark_filter import time_bounds
from wfm.history.store import HistoryStore, StoreError, require_store

__all__ = ["Window", "composite_windows", "open_store", "window"]

Window = tuple[Filter, float | None, float | None]  # a filter fixed at the asker's now, since, until


def open_store(path: Path, master: str | None) -> HistoryStore:
    """The store at ``path`` on the process's SparkSession; StoreError (one line) if ``path`` is
    not a store or Spark does not start (a bad master, no Java, no Spark Connect libraries).
    Without ``master`` (nor $WFM_SPARK_MASTER) the store's warm Spark Connect server is used when
    it has one, so the query does not start a JVM."""
    require_store(path)
    master = master_for(path, master)
    try:
        spark = spark_session(master)
    except Exception as error:  # Spark's many start-up errors
        raise StoreError(f"cannot start Spark ({resolve_master(master)}): {first_line(error)}") from None
    return HistoryStore(path, spark)


def window(wanted: Filter, now: float, since: float | None, until: float | None) -> Window:
    """The filter with its time reference fixed at ``now``, and the bounds of its time range."""
    fixed = absolute(wanted, now)
    return (fixed, *time_bounds(fixed, now, since, until))


def composite_windows(
    atoms: Sequence[Atom], now: float, since: float | None, until: float | None
) -> list[Window]:
    """The window of each atom's plain filter, every one ending at the same instant, though the
    historians answer them at different times. HistoryError if one would end later than ``now``:
    a composite historic query covers the past only."""
    windows: list[Window] = []
    for atom in atoms:
        fixed, low, high = window(plain_filter(atom), now, since, until)
        if high is not None and high > now:
            raise HistoryError(
                "a composite historic query covers the past only: it cannot end later than now"
            )
        windows.append((fixed, low, now if high is None else high))
    return windows
