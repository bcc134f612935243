"""History on Spark: the landing log, the Parquet store, historic queries and reports (issue 7).

The names below are imported when first used (PEP 562): most processes that import a module of
this package (an agent, ``wfm deploy``, the monitor asking the historian) need no Spark, and
importing PySpark cost each of them about 0.1 s at start.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from broker.lazy import lazy_names

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

__getattr__ = lazy_names(
    __name__,
    {
        "HistoryStore": "store",
        "Landing": "landing",
        "StoreError": "store",
        "StoredPublication": "landing",
        "compile_filter": "spark_filter",
        "read_landing": "landing",
        "spark_session": "spark",
    },
)
