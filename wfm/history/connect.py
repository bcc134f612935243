"""A warm Spark Connect server beside a history store, so a query does not pay for starting a JVM.

A command that opens a store in local mode starts Spark first: seconds before the first answer, paid
again by every ``wfm history --store`` and ``wfm report``. A Spark Connect server started once (by
``wfm up``, or by hand with ``wfm spark-connect``) keeps one JVM warm; it announces itself in the
store (``STORE/.spark-connect.json``: its URL, host and process id) once it listens, and commands that
open that store without an explicit master use it (:func:`warm_url`). An announcement whose process
has died or whose port does not answer is ignored, so a server killed with -9 costs nothing but the
JVM start-up it was saving.

Whoever a Spark Connect server takes can read and write every file its user can and run code as
that user, so the server binds the loopback address and asks every client for a token: made with
``secrets`` once per store, kept in ``STORE/.spark-connect.token`` (mode 0600, this user's only) and
handed to the JVM in its environment, never on its command line. :func:`master_for` gives a URL
naming the store's warm server the parameter that presents that file's token (``;token_file=``,
read by ``spark.py``); a user who cannot read the file does not use the server.

The JVM comes from the ``bin/spark-submit`` that the pyspark package ships; its output goes to
``STORE/.spark-connect.log``. On Linux it is told to stop when its parent dies, so a killed
``wfm spark-connect`` leaves no JVM behind.
"""

from __future__ import annotations

import ctypes
import functools
import json
import os
import re
import secrets
import signal
import socket
import stat
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path

import pyspark

from broker.errors import LocalError
from wfm.history.spark import LOOPBACK, MASTER_ENV, TOKEN_FILE, driver_settings, with_token_file

__all__ = [
    "ANNOUNCEMENT",
    "DEFAULT_PORT",
    "TOKEN",
    "SparkServerError",
    "master_for",
    "serve_connect",
    "server_argv",
    "server_token",
    "warm_url",
]

ANNOUNCEMENT = ".spark-connect.json"
LOG = ".spark-connect.log"
TOKEN = ".spark-connect.token"
TOKEN_ENV = "SPARK_CONNECT_AUTHENTICATE_TOKEN"  # where the server takes its token from
HOST = LOOPBACK
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
    warm server if this user may read its token, else None (local mode). A URL of the store's warm
    server (given or found) that carries no token of its own presents the store's."""
    chosen = master or os.environ.get(MASTER_ENV)
    warm = warm_url(store)
    if warm is None:
        return chosen
    token = store / TOKEN
    if chosen is None:
        if not os.access(token, os.R_OK):
            return None  # a server this user may not use is no server for it
        chosen = warm
    return with_token_file(chosen, token) if _names(chosen, warm) else chosen


def _names(url: str, warm: str) -> bool:
    """Whether ``url`` is the warm server's (a loopback host, its port) and brings no token."""
    if not url.startswith("sc://") or re.search(rf";({TOKEN_FILE}|token)=", url):
        return False
    parsed, announced = (urllib.parse.urlsplit("http" + u[2:]) for u in (url, warm))
    try:
        port = parsed.port
    except ValueError:
        return False
    return parsed.hostname in ("localhost", "127.0.0.1", "::1") and port == announced.port


def warm_url(store: Path) -> str | None:
    """The ``sc://`` URL of a live Connect server announced in ``store``, or None."""
    try:
        announced = json.loads((store / ANNOUNCEMENT).read_text())
        url, host, pid, port = announced["url"], announced["host"], announced["pid"], announced["port"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if host != socket.gethostname() or not _alive(pid) or not _listening(HOST, port):
        return None
    if _listener_uid(port) != os.geteuid():  # the token goes with the URL: only to our own server
        return None
    return str(url)


def _listener_uid(port: object) -> int | None:
    """Whose socket listens on ``port`` on this host (Linux's /proc/net/tcp and tcp6), or None:
    an announcement outlives a killed server, and another local user could then hold its port."""
    if not isinstance(port, int):
        return None
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                return int(fields[7])
    return None


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
    token = server_token(store)
    log_path = store / LOG
    env = {**os.environ, TOKEN_ENV: token}  # /proc/PID/environ is its user's alone; argv is not
    if master.startswith("local"):  # its Python UDFs (str-regex) in this interpreter, with google-re2
        env.setdefault("PYSPARK_PYTHON", sys.executable)
    with open(log_path, "ab") as log:
        server = subprocess.Popen(
            server_argv(port, master),
            env=env,
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


def server_token(store: Path) -> str:
    """The token of ``store``'s server: the one in ``STORE/.spark-connect.token`` if that is a file of
    this user's that nobody else may read or write, else a new one written there with mode 0600
    (whatever the umask). Kept across restarts, so a client's session outlives one; delete the
    file and restart the server to change it."""
    path = store / TOKEN
    try:
        status = os.stat(path, follow_symlinks=False)
        if stat.S_ISREG(status.st_mode) and status.st_uid == os.geteuid() and not status.st_mode & 0o077:
            token = path.read_text().strip()
            if re.fullmatch(r"[A-Za-z0-9_-]{43,}", token):
                return token
    except FileNotFoundError:
        pass
    except OSError as error:
        raise SparkServerError(f"cannot read the token {path}: {error.strerror or error}") from None
    token = secrets.token_urlsafe(32)  # 43 characters
    partial = path.with_name(path.name + ".partial")
    try:
        partial.unlink(missing_ok=True)
        descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(descriptor, "w") as file:
            os.fchmod(descriptor, 0o600)  # the umask may have taken bits of 0600 too
            file.write(token + "\n")
        partial.replace(path)
    except OSError as error:
        raise SparkServerError(f"cannot write the token {path}: {error.strerror or error}") from None
    return token


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
