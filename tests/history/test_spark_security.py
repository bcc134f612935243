"""What another local user can reach of this process's Spark, and the warm server's token file.

The session-scoped ``spark`` fixture is a real local driver: its ports are read from /proc and
probed over loopback. The warm Spark Connect server itself is tested in ``test_cluster.py``."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from tests.history.ports import is_loopback, listening, unauthenticated_rpc
from wfm.history.connect import ANNOUNCEMENT, TOKEN, master_for, server_token
from wfm.history.spark import driver_settings


def _spark_ports(spark: SparkSession) -> tuple[int, list[tuple[str, int]]]:
    """The JVM's pid and its listening sockets but py4j's gateway (this process's own, with a secret)."""
    gateway = spark.sparkContext._gateway
    pid = gateway.proc.pid
    return pid, [(a, p) for a, p in listening(pid) if p != gateway.gateway_parameters.port]


def test_a_local_session_listens_on_loopback_only(spark: SparkSession) -> None:
    """Spark bound its driver and block manager to the host name's address, or to the first
    non-loopback one when the name resolves to loopback (as on this machine)."""
    pid, ports = _spark_ports(spark)
    assert len(ports) >= 2, ports  # the driver's RPC and the block manager
    assert [(a, p) for a, p in listening(pid) if not is_loopback(a)] == []


def test_a_local_sessions_ports_refuse_a_client_that_does_not_authenticate(spark: SparkSession) -> None:
    """On loopback another local user could still fetch the blocks (the history's rows) or talk to
    the driver: both ask for the secret Spark makes in local mode."""
    _, ports = _spark_ports(spark)
    for address, port in ports:
        assert "Expected SaslMessage" in unauthenticated_rpc(address, port), port


@pytest.mark.parametrize(
    ("master", "loopback", "authenticate"),
    [
        ("local[*]", True, True),
        ("local[2]", True, True),
        ("local", True, True),
        ("local[4, 3]", True, True),
        ("local-cluster[2,1,1024]", True, False),  # its executors need the secret too: not made
        ("spark://10.0.0.5:7077", False, False),  # the executors must reach the driver
        ("yarn", False, False),
        ("k8s://https://10.0.0.1:6443", False, False),
    ],
)
def test_only_a_local_driver_is_kept_to_loopback(master: str, loopback: bool, authenticate: bool) -> None:
    settings = driver_settings(master)
    bound = {settings.get("spark.driver.bindAddress"), settings.get("spark.driver.host")}
    assert bound == ({"127.0.0.1"} if loopback else {None})
    assert settings.get("spark.authenticate") == ("true" if authenticate else None)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_the_token_file_is_the_owners_alone_whatever_the_umask(tmp_path: Path, umask_zero: None) -> None:
    token = server_token(tmp_path)
    assert _mode(tmp_path / TOKEN) == 0o600
    assert (tmp_path / TOKEN).read_text() == token + "\n" and len(token) >= 43
    assert server_token(tmp_path) == token, "kept across restarts"
    assert not (tmp_path / (TOKEN + ".partial")).exists()


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o620])
def test_a_token_file_others_could_read_or_write_is_replaced(
    tmp_path: Path, mode: int, umask_zero: None
) -> None:
    known = "k" * 43
    (tmp_path / TOKEN).write_text(known)
    (tmp_path / TOKEN).chmod(mode)
    token = server_token(tmp_path)
    assert token != known and _mode(tmp_path / TOKEN) == 0o600


def test_a_symlink_in_place_of_the_token_file_is_replaced_not_followed(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("not a token\n")
    store = tmp_path / "store"
    store.mkdir()
    (store / TOKEN).symlink_to(elsewhere)
    token = server_token(store)
    assert not (store / TOKEN).is_symlink() and (store / TOKEN).read_text() == token + "\n"
    assert elsewhere.read_text() == "not a token\n"


@pytest.fixture
def announced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, int]]:
    """A store whose announcement names a live process listening on loopback (this one)."""
    monkeypatch.delenv("WFM_SPARK_MASTER", raising=False)
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        announcement = {"url": f"sc://127.0.0.1:{port}", "host": socket.gethostname(), "pid": os.getpid()}
        (tmp_path / ANNOUNCEMENT).write_text(json.dumps({**announcement, "port": port}))
        yield tmp_path, port


def test_the_warm_server_is_used_with_its_stores_token(announced: tuple[Path, int]) -> None:
    store, port = announced
    server_token(store)
    with_token = f"sc://127.0.0.1:{port}/;token_file={store / TOKEN}"
    assert master_for(store, None) == with_token
    assert master_for(store, f"sc://127.0.0.1:{port}") == with_token  # wfm up gives the historian the URL
    assert master_for(store, f"sc://localhost:{port}/;user_id=x") == (
        f"sc://localhost:{port}/;user_id=x;token_file={store / TOKEN}"
    )


def test_no_other_server_is_given_the_stores_token(announced: tuple[Path, int]) -> None:
    store, port = announced
    server_token(store)
    for master in (
        f"sc://127.0.0.1:{port + 1}",  # another server
        f"sc://10.0.0.5:{port}",  # another host
        f"sc://127.0.0.1:{port}/;token_file=/elsewhere",  # a token of its own
        f"sc://127.0.0.1:{port}/;use_ssl=true;token=abc",
        "local[2]",
    ):
        assert master_for(store, master) == master


def test_a_warm_server_without_its_token_file_is_not_used(announced: tuple[Path, int]) -> None:
    store, _ = announced
    assert master_for(store, None) is None  # local mode, as with no server


SYSTEM_PYTHON = "/usr/bin/python3"  # one user nobody may run (the project's may be in root's home)


@pytest.mark.skipif(
    os.geteuid() != 0 or not os.path.exists(SYSTEM_PYTHON),
    reason="listening as another user needs root and a Python that user may run",
)
def test_the_token_goes_to_no_server_of_another_user(tmp_path: Path) -> None:
    """An announcement outlives a killed server: another local user holding its port (the pid
    reused, a listener of theirs) must not be handed the store's token."""
    listener = subprocess.Popen(
        [SYSTEM_PYTHON, "-c", LISTEN_AS_NOBODY], stdout=subprocess.PIPE, text=True, user=65534
    )
    try:
        assert listener.stdout is not None
        port = int(listener.stdout.readline())
        announcement = {"url": f"sc://127.0.0.1:{port}", "host": socket.gethostname(), "pid": listener.pid}
        (tmp_path / ANNOUNCEMENT).write_text(json.dumps({**announcement, "port": port}))
        server_token(tmp_path)
        assert master_for(tmp_path, None) is None  # not the announced server: local mode, no token sent
    finally:
        listener.kill()
        listener.communicate()


LISTEN_AS_NOBODY = """
import socket, sys, time
server = socket.socket()
server.bind(("127.0.0.1", 0))
server.listen()
print(server.getsockname()[1], flush=True)
time.sleep(60)
"""
