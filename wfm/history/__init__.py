"""History on Spark: the landing log, the Parquet store, historic queries and reports (issue 7).

The names below are imported when first used (PEP 562): most processes that import a module of
this package (an agent, ``wfm deploy``, the monitor asking the historian) need no Spark, and
importing PySpark cost each of them about 0.1 s at start.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from wfm.history.landing import Landing, StoredPublication, read_landing
    from wfm.history.spark import spark_session
    from wfm.history.spark_filter import compile_filter
    from wfm.history.store import HistoryStore, StoreError

__all__ = [
    "HistoryStore",
    "Landing",
    "StoreError",
    "StoredPublication",
    "compile_filter",
    "read_landing",
    "spark_session",
]

_HOMES = {
    "HistoryStore": "store",
    "Landing": "landing",
    "StoreError": "store",
    "StoredPublication": "landing",
    "compile_filter": "spark_filter",
    "read_landing": "landing",
    "spark_session": "spark",
}


def __getattr__(name: str) -> object:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value
