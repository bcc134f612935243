"""A store opened for queries (``wfm history --store``, ``wfm report``, ``wfm compact``): which
Spark it uses, and one line for every way that can fail."""

from __future__ import annotations

from pathlib import Path

from wfm.history.connect import master_for
from wfm.history.spark import SparkTokenRejected, first_line, resolve_master, spark_session
from wfm.history.store import HistoryStore, StoreError, require_store

__all__ = ["open_store"]


def open_store(path: Path, master: str | None) -> HistoryStore:
    """The store at ``path`` on the process's SparkSession; StoreError (one line) if ``path`` is
    not a store or Spark does not start (a bad master, no Java, no Spark Connect libraries).
    Without ``master`` (nor $WFM_SPARK_MASTER) the store's warm Spark Connect server is used when
    it has one, so the query does not start a JVM."""
    path = path.absolute()  # a Spark Connect server resolves paths against its own directory
    require_store(path)
    master = master_for(path, master)
    try:
        spark = spark_session(master)
    except SparkTokenRejected as error:  # says which server and which token file
        raise StoreError(f"cannot start Spark: {error}") from None
    except Exception as error:  # Spark's many start-up errors
        shown = resolve_master(master).split(";")[0]  # never a ;token=... a user wrote in the URL
        raise StoreError(f"cannot start Spark ({shown}): {first_line(error)}") from None
    return HistoryStore(path, spark)
