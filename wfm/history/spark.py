"""The one SparkSession of a process, built on first use from ``--spark-master`` / ``$WFM_SPARK_MASTER``.

``local[*]`` by default; ``spark://HOST:PORT``, ``yarn`` or any master URL Spark accepts runs on a
cluster, and ``sc://HOST:PORT`` connects to a Spark Connect server. The store's path must then be
one the cluster sees (a shared file system); nothing else changes.

A local driver serves nobody but its own process: its RPC and block manager ports listen on
loopback only, and in local mode they ask for Spark's own secret (``spark.authenticate``), so
another local user can neither fetch its blocks nor talk to it. A cluster master's driver is left
as Spark makes it: its executors must reach it.

A Spark Connect URL may name a file holding the server's token, ``sc://HOST:PORT/;token_file=PATH``
(a store's warm server is given its own by ``connect.master_for``): the token is read from the file
when the session is made and never put in a URL, a command line or a message. Over loopback it
travels on the plain connection (pyspark asks for TLS with a token unless the host is spelled
``localhost``).
"""

from __future__ import annotations

import ipaddress
import os
import re
import sys
import urllib.parse
from functools import lru_cache
from pathlib import Path
from typing import Any, cast

from pyspark.sql import SparkSession

from broker.errors import LocalError

__all__ = [
    "DEFAULT_MASTER",
    "LOOPBACK",
    "MASTER_ENV",
    "TOKEN_FILE",
    "SparkTokenRejected",
    "driver_settings",
    "first_line",
    "resolve_master",
    "spark_session",
    "with_token_file",
]

MASTER_ENV = "WFM_SPARK_MASTER"
DEFAULT_MASTER = "local[*]"
LOOPBACK = "127.0.0.1"
TOKEN_FILE = "token_file"  # the URL parameter naming a Spark Connect server's token file

# Runtime settings every query relies on: attribute names are case-sensitive in the language, and
# dates (the partition column) are UTC days.
_SQL_CONF = {
    "spark.sql.caseSensitive": "true",
    "spark.sql.session.timeZone": "UTC",
}
# the masters for which Spark makes its authentication secret itself (SecurityManager.initializeAuth)
_SELF_SECRET = re.compile(r"local(\[(\d+|\*)(\s*,\s*\d+)?\])?")


class SparkTokenRejected(LocalError):
    """A Spark Connect server refused this client: a wrong token, or none."""


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
        # listing Spark starts past 32 folders takes seconds
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
        return _connect(master)
    builder = SparkSession.builder.master(master).appName("wfm-history")
    for key, value in driver_settings(master, shuffle_partitions).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    if master.startswith("local") and "PYSPARK_PYTHON" not in os.environ:
        # Python UDFs (str-regex, spark_filter.py) run in this interpreter, which has google-re2,
        # rather than whatever ``python3`` is first on the PATH
        spark.sparkContext.pythonExec = sys.executable
    for key, value in _SQL_CONF.items():
        spark.conf.set(key, value)
    return spark


def with_token_file(url: str, path: Path) -> str:
    """``url`` (``sc://``) with the parameter that makes :func:`spark_session` present the token in
    ``path``."""
    parameter = f"{TOKEN_FILE}={urllib.parse.quote(str(path), safe='/')}"
    return f"{url};{parameter}" if "/;" in url else f"{url.rstrip('/')}/;{parameter}"


def _connect(url: str) -> SparkSession:
    """A Spark Connect session, its token read from the URL's ``token_file``; SparkTokenRejected (one
    line, no token in it) if the server refuses it."""
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    location, token_file = _split_token_file(url)
    channel = _channel(location)
    if token_file is not None:
        channel.set("token", _read_token(token_file))
    # what pyspark's builder.remote() marks too: pyspark.sql.functions then build Connect columns
    os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"
    spark = ConnectSession.builder.channelBuilder(channel).getOrCreate()
    try:
        for key, value in _SQL_CONF.items():  # the first calls: a refused token is heard of here
            spark.conf.set(key, value)
    except Exception as error:
        # forgotten, so that the next call makes a new session (a historian retries at its next
        # compaction); nothing to release on a server that did not take it
        spark.release_session_on_close = False
        spark.stop()
        refused = _refusal(channel, token_file, error)
        if refused is None:
            raise
        raise refused from None
    return cast(SparkSession, spark)  # a Connect session is no subclass of the classic one


def _split_token_file(url: str) -> tuple[str, Path | None]:
    """``url`` without its ``token_file`` parameter, and that parameter's path."""
    base, separator, parameters = url.partition("/;")
    kept, token_file = [], None
    for parameter in parameters.split(";") if separator else []:
        key, _, value = parameter.partition("=")
        if key == TOKEN_FILE:
            token_file = Path(urllib.parse.unquote(value))
        else:
            kept.append(parameter)
    return (f"{base}/;{';'.join(kept)}" if kept else base), token_file


def _read_token(path: Path) -> str:
    try:
        token = path.read_text().strip()
    except OSError as error:
        raise SparkTokenRejected(
            f"cannot read the Spark Connect token {path}: {error.strerror or error}"
        ) from None
    if not token:
        raise SparkTokenRejected(f"the Spark Connect token file {path} is empty")
    return token


def _channel(location: str) -> Any:
    """pyspark's channel to ``location``; to a loopback host (without ``use_ssl=true``) grpc's local
    credentials, which carry a token over the plain connection, as pyspark does for ``localhost``."""
    import grpc
    from pyspark.sql.connect.client import DefaultChannelBuilder

    class LoopbackChannel(DefaultChannelBuilder):
        def toChannel(self) -> grpc.Channel:
            credentials = grpc.local_channel_credentials()
            if self.token is not None:
                credentials = grpc.composite_channel_credentials(
                    credentials, grpc.access_token_call_credentials(self.token)
                )
            return self._secure_channel(self.endpoint, credentials)

    channel = DefaultChannelBuilder(location)
    if _is_loopback(channel.host.strip("[]")) and not channel.use_ssl:
        channel = LoopbackChannel(location)
    return channel


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _refusal(channel: Any, token_file: Path | None, error: Exception) -> SparkTokenRejected | None:
    import grpc

    code = getattr(error, "getGrpcStatusCode", lambda: None)()
    if code != grpc.StatusCode.UNAUTHENTICATED:
        return None
    server = f"the Spark Connect server at sc://{channel.endpoint}"
    found = re.search(r'details = "([^"]*)"', str(error))
    details = found.group(1) if found else "unauthenticated"
    if token_file is not None:
        return SparkTokenRejected(f"{server} refused the token in {token_file}: {details}")
    if channel.token is not None:
        return SparkTokenRejected(
            f"{server} refused the token of $SPARK_CONNECT_AUTHENTICATE_TOKEN or the URL: {details}"
        )
    return SparkTokenRejected(f"{server} wants a token ({details}): add ;{TOKEN_FILE}=FILE to the URL")


def first_line(error: BaseException) -> str:
    """Spark's errors span pages; a log line or an answer takes the first line."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
