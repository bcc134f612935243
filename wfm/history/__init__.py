"""History on Spark: the landing log, the Parquet store, historic queries and reports (issue 7)."""

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
