"""What another local user can reach of this process's Spark.

The session-scoped ``spark`` fixture is a real local driver: its ports are read from /proc and
probed over loopback."""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession

from tests.history.ports import is_loopback, listening, unauthenticated_rpc
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
