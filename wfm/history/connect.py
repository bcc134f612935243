"""A warm Spark Connect server beside a history store, so a query does not pay for starting a JVM.

A command that opens a store in local mode starts Spark first: 5-10 s before the first answer, paid
again by every ``wfm history --store`` and ``wfm report``. A Spark Connect server started once (by
``wfm up``, or by hand with ``wfm spark-connect``) keeps one JVM warm; it announces itself in the
store (``STORE/.spark-connect.json``: its URL, host and process id) once it listens, and commands that
open that store without an explicit master use it (:func:`warm_url`). An announcement whose process
has died or whose port does not answer is ignored, so a server killed with -9 costs nothing but the
JVM start-up it was saving.

The server binds the loopback address: Spark Connect has no authentication, and whoever reaches it
can read and write every file the server can.

The JVM comes from the ``bin/spark-submit`` that the pyspark package ships; its output goes to
``STORE/.spark-connect.log``. On Linux it is told to stop when its parent dies, so a killed
``wfm spark-connect`` leaves no JVM behind.
"""

from __future__ import annotations

import ctypes
import functools
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pyspark

from broker.errors import LocalError
from wfm.history.spark import MASTER_ENV, driver_settings

__all__ = [
    "ANNOUNCEMENT",
    "DEFAULT_PORT",
    "SparkServerError",
    "master_for",
    "serve_connect",
    "server_argv",
    "warm_url",
]

ANNOUNCEMENT = ".spark-connect.json"
LOG = ".spark-connect.log"
HOST = "127.0.0.1"
DEFAULT_PORT = 15002  # Spark's own default for Spark Connect
SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
_PR_SET_PDEATHSIG = 1


class SparkServerError(LocalError):
    """The Spark Connect server could not start or stopped on its own."""


def server_argv(port: int, master: str, host: str = HOST) -> list[str]:
    """The command line of a Connect server on ``host:port`` driving ``master``, with the settings
    of the store's own sessions (``driver_settings``)."""
    settings = {
        **driver_settings(master),
        "spark.connect.grpc.binding.address": host,
        "spark.connect.grpc.binding.port": str(port),
    }
    submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    confs = [item for key, value in settings.items() for item in ("--conf", f"{key}={value}")]
    return [str(submit), "--class", SERVER_CLASS, "--master", master, "--name", "wfm-spark-connect", *confs]


def master_for(store: Path, master: str | None) -> str | None:
    """The master to open ``store`` with: the one given, else $WFM_SPARK_MASTER, else the store's
    warm server, else None (local mode)."""
    return master or os.environ.get(MASTER_ENV) or warm_url(store)


def warm_url(store: Path) -> str | None:
    """The ``sc://`` URL of a live Connect server announced in ``store``, or None."""
    try:
        announced = json.loads((store / ANNOUNCEMENT).read_text())
        url, host, pid, port = announced["url"], announced["host"], announced["pid"], announced["port"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if host != socket.gethostname() or not _alive(pid) or not _listening(HOST, port):
        return None
    return str(url)


def serve_connect(
    store: Path,
    port: int,
    master: str,
    stopped: Callable[[float], bool],
    ready: Callable[[str], None],
    nice: int = 0,
    start_timeout: float = 120.0,
) -> None:
    """Run a Connect server for ``store`` until ``stopped(seconds)`` (a wait that says whether to
    stop) is true; ``ready(url)`` once it listens; its JVM ``nice`` steps below normal priority.
    SparkServerError if it does not start in ``start_timeout`` seconds or exits on its own; the
    announcement is removed either way."""
    store.mkdir(parents=True, exist_ok=True)
    if _listening(HOST, port):
        raise SparkServerError(f"port {port} on {HOST} is in use: give another --port")
    log_path = store / LOG
    with open(log_path, "ab") as log:
        server = subprocess.Popen(
            server_argv(port, master),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,  # Ctrl-C in a terminal is for wfm spark-connect, which stops the JVM
            preexec_fn=functools.partial(_prepare, nice) if sys.platform.startswith("linux") else None,
        )
    announcement = store / ANNOUNCEMENT
    url = f"sc://{HOST}:{port}"
    try:
        deadline = time.monotonic() + start_timeout
        while not _listening(HOST, port):
            _check(server, log_path)
            if stopped(0.2):
                return
            if time.monotonic() > deadline:
                raise SparkServerError(
                    f"Spark Connect did not listen on {url} within {start_timeout:g} s (log: {log_path})"
                )
        _announce(announcement, {"url": url, "host": socket.gethostname(), "pid": server.pid, "port": port})
        ready(url)
        while not stopped(0.5):
            _check(server, log_path)
    finally:
        announcement.unlink(missing_ok=True)
        if server.poll() is None:
            server.terminate()
            try:
                server.wait(10)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()


def _check(server: subprocess.Popen[bytes], log_path: Path) -> None:
    if server.poll() is not None:
        raise SparkServerError(f"Spark Connect exited with status {server.returncode} (log: {log_path})")


def _announce(path: Path, announcement: dict[str, object]) -> None:
    """Written whole or not at all: a reader never sees half an announcement."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(announcement))
    partial.replace(path)


def _alive(pid: object) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _listening(host: str, port: object) -> bool:
    if not isinstance(port, int) or not 0 < port < 65536:
        return False
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def _prepare(nice: int) -> None:
    """In the child before exec, a session leader: SIGTERM when the parent dies (Linux's
    PR_SET_PDEATHSIG), and ``nice``. With the kernel's autogroup scheduling niceness only weighs
    the processes of one session against each other, so the session's group is lowered too."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if nice:
        os.nice(nice)
        for _ in range(3):  # unprivileged, one autogroup change a tenth of a second, machine-wide
            try:
                with open("/proc/self/autogroup", "w") as autogroup:
                    autogroup.write(f"{nice}\n")
                return
            except BlockingIOError:  # EAGAIN: another's change came just before
                time.sleep(0.11)
            except OSError:  # no autogroup scheduling here: the nice is all there is
                return
