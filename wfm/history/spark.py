"""The one SparkSession of a process, built on first use from ``--spark-master`` / ``$WFM_SPARK_MASTER``.

``local[*]`` by default; ``spark://HOST:PORT``, ``yarn`` or any master URL Spark accepts runs on a
cluster, and ``sc://HOST:PORT`` connects to a Spark Connect server. The store's path must then be
one the cluster sees (a shared file system); nothing else changes.
"""

from __future__ import annotations

import os
from functools import lru_cache

from pyspark.sql import SparkSession

__all__ = ["DEFAULT_MASTER", "MASTER_ENV", "driver_settings", "first_line", "resolve_master", "spark_session"]

MASTER_ENV = "WFM_SPARK_MASTER"
DEFAULT_MASTER = "local[*]"

# Runtime settings every query relies on: attribute names are case-sensitive in the language, and
# dates (the partition column) are UTC days.
_SQL_CONF = {
    "spark.sql.caseSensitive": "true",
    "spark.sql.session.timeZone": "UTC",
}


def resolve_master(master: str | None = None) -> str:
    return master or os.environ.get(MASTER_ENV) or DEFAULT_MASTER


def driver_settings(master: str, shuffle_partitions: int = 8) -> dict[str, str]:
    """What a Spark driver for the store is started with, in this process or as a Spark Connect
    server (``connect.py``); the runtime settings of ``_SQL_CONF`` included."""
    settings = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(shuffle_partitions),
        "spark.sql.adaptive.enabled": "true",
        **_SQL_CONF,
    }
    if master.startswith("local"):
        # listing a local table's day folders one by one takes milliseconds; the parallel
        # listing Spark starts past 32 folders takes seconds (measured: 4-7 s for 365 days)
        settings["spark.sql.sources.parallelPartitionDiscovery.threshold"] = "100000"
    return settings


@lru_cache(maxsize=1)
def spark_session(master: str | None = None, shuffle_partitions: int = 8) -> SparkSession:
    """The process's session; later calls return the same one whatever they ask for."""
    master = resolve_master(master)
    if master.startswith("sc://"):
        spark = SparkSession.builder.remote(master).getOrCreate()
    else:
        builder = SparkSession.builder.master(master).appName("wfm-history")
        for key, value in driver_settings(master, shuffle_partitions).items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
    for key, value in _SQL_CONF.items():
        spark.conf.set(key, value)
    return spark


def first_line(error: BaseException) -> str:
    """Spark's errors span pages; a log line or an answer takes the first line."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
