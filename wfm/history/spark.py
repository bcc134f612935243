"""The one SparkSession of a process, built on first use from ``--spark-master`` / ``$WFM_SPARK_MASTER``.

``local[*]`` by default; ``spark://HOST:PORT``, ``yarn`` or any master URL Spark accepts runs on a
cluster, and ``sc://HOST:PORT`` connects to a Spark Connect server. The store's path must then be
one the cluster sees (a shared file system); nothing else changes.

A local driver serves nobody but its own process: its RPC and block manager ports listen on
loopback only, and in local mode they ask for Spark's own secret (``spark.authenticate``), so
another local user can neither fetch its blocks nor talk to it. A cluster master's driver is left
as Spark makes it: its executors must reach it.
"""

from __future__ import annotations

import os
import re
from functools import lru_cache

from pyspark.sql import SparkSession

__all__ = [
    "DEFAULT_MASTER",
    "LOOPBACK",
    "MASTER_ENV",
    "driver_settings",
    "first_line",
    "resolve_master",
    "spark_session",
]

MASTER_ENV = "WFM_SPARK_MASTER"
DEFAULT_MASTER = "local[*]"
LOOPBACK = "127.0.0.1"

# Runtime settings every query relies on: attribute names are case-sensitive in the language, and
# dates (the partition column) are UTC days.
_SQL_CONF = {
    "spark.sql.caseSensitive": "true",
    "spark.sql.session.timeZone": "UTC",
}
# the masters for which Spark makes its authentication secret itself (SecurityManager.initializeAuth)
_SELF_SECRET = re.compile(r"local(\[(\d+|\*)(\s*,\s*\d+)?\])?")


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
        # the driver's RPC and block manager ports (the block manager binds the driver's address):
        # left alone, Spark binds the host name's address, or the first non-loopback one when the
        # name resolves to loopback
        settings["spark.driver.bindAddress"] = LOOPBACK
        settings["spark.driver.host"] = LOOPBACK
    if _SELF_SECRET.fullmatch(master):
        settings["spark.authenticate"] = "true"  # even on loopback, other local users are refused
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
