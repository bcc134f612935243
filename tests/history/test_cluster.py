"""History on a real Spark cluster and through Spark Connect gives the answers of local mode.

A standalone Master and Worker and a Spark Connect server are started on loopback from the
installed pyspark; ``wfm history`` (a filter and a composite), ``wfm report`` and ``wfm compact``
then run as processes against copies of one store through each, and their output is compared with
local mode's, byte for byte. The store holds both a compacted table and a landing log, so queries
read both, and compaction has something to do.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, NamedTuple

import pyspark
import pytest
from click.testing import CliRunner
from pyspark.sql import SparkSession

from broker.language import parse_publication
from tests.history.ports import is_loopback, listening, unauthenticated_rpc
from tests.processes import WFM
from tests.transport.harness import free_port
from wfm.cli import cli
from wfm.history.connect import ANNOUNCEMENT, LOG, TOKEN, warm_url
from wfm.history.landing import Landing
from wfm.history.spark import with_token_file
from wfm.history.store import HistoryStore

SPARK_HOME = Path(pyspark.__file__).parent
JAVA = os.environ.get("JAVA_HOME") or shutil.which("java")

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.skipif(not JAVA, reason="no Java: neither JAVA_HOME nor java on PATH"),
]

T0 = 1_779_000_000.0  # 2026-05-17
FILTER = "[class,eq,JOBSTATUS],[duration,>,20]"
COMPOSITE = (
    "{[class,eq,JOBSTATUS],[applname,eq,LEDGER],[jobname,eq,Load],[GID,eq,$S$G]}"
    "&{[class,eq,JOBSTATUS],[applname,eq,LEDGER],[jobname,eq,Check],[status,eq,FAILURE],[GID,eq,$S$G]}"
)
# each step's command line (--store and --spark-master are added); compaction then the queries again
STEPS = [
    ("history", FILTER, "-o", "json"),
    ("history", COMPOSITE, "-o", "json"),
    ("report", "-o", "json"),
    ("report", "PAYROLL", "--by", "week", "-o", "json"),
    ("compact",),
    ("history", FILTER, "-o", "json"),
    ("report", "-o", "json"),
]


def _publications() -> Iterator[tuple[float, str]]:
    """Triggers and job statuses of three workflows over ten days, with seeded durations."""
    rng = random.Random(17)
    for generation in range(120):
        start = T0 + generation * 7200
        for workflow in ("PAYROLL", "LEDGER", "RECOVERY"):
            yield start, f"[class,Trigger],[applname,{workflow}],[GID,g{generation}]"
            for n, job in enumerate(("Load", "Check", "Post")):
                status = "FAILURE" if rng.random() < 0.15 else "SUCCESS"
                duration = round(rng.uniform(1, 40), 3)
                yield (
                    start + n + 1,
                    f"[class,JOBSTATUS],[applname,{workflow}],[jobname,{job}],[GID,g{generation}],"
                    f"[status,{status}],[duration,{duration}]",
                )


@pytest.fixture(scope="module")
def base_store(tmp_path_factory: pytest.TempPathFactory, spark: SparkSession) -> Path:
    """Two thirds compacted into the table (in local mode), the rest in the landing log."""
    path = tmp_path_factory.mktemp("cluster") / "store"
    rows = [(n, time_, text) for n, (time_, text) in enumerate(_publications())]
    cut = len(rows) * 2 // 3
    for part in (rows[:cut], rows[cut:]):
        with Landing(path / "landing") as landing:
            for n, time_, text in part:
                landing.append(parse_publication(text), time_, "agentA", f"id{n}")
        if len(part) == cut:
            HistoryStore(path, spark).compact()
    return path


def _run_in_process(store: Path, master: str) -> list[str]:
    """The steps' outputs, every command run in this process, so they share one Spark session."""
    runner = CliRunner()
    outputs = []
    for step in STEPS:
        done = runner.invoke(cli, [*step, "--store", str(store), "--spark-master", master])
        assert done.exit_code == 0, done.output
        outputs.append(done.stdout)
    return outputs


def _run_in_a_process(store: Path, master: str) -> list[str]:
    """:func:`_run_in_process` in a new process: a remote master's driver must not share a JVM or
    a Connect session with this process's local one (pyspark chooses per process)."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.history.test_cluster", str(store), master],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return list(json.loads(done.stdout.splitlines()[-1]))


def _run_processes(
    store: Path, master: str | None, env: dict[str, str] | None = None, steps: int = len(STEPS)
) -> list[str]:
    """The first ``steps`` steps' outputs, each step a ``wfm`` process of its own."""
    outputs = []
    for step in STEPS[:steps]:
        argv = [WFM, *step, "--store", str(store), *(["--spark-master", master] if master else [])]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env)
        assert done.returncode == 0 and "Traceback" not in done.stderr, (step, done.stderr[-3000:])
        outputs.append(done.stdout)
    return outputs


@pytest.fixture(scope="module")
def local_answers(base_store: Path, tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    store = tmp_path_factory.mktemp("local") / "store"
    shutil.copytree(base_store, store)
    answers = _run_in_process(store, "local[2]")
    assert all(answers[i] for i in (0, 1, 2, 3, 5, 6)), "every query and report has rows to compare"
    return answers


def _wait_for(log: Path, text: str, process: subprocess.Popen[bytes], timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while text not in log.read_text(errors="replace"):
        assert process.poll() is None, f"exited with {process.returncode}: {log.read_text()[-2000:]}"
        assert time.monotonic() < deadline, f"no {text!r} in {timeout:g} s: {log.read_text()[-2000:]}"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A standalone Master and one Worker on loopback; yields the master URL."""
    work = tmp_path_factory.mktemp("standalone")
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    port = free_port()
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    started = []
    try:
        master = ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port)]
        worker = [
            "org.apache.spark.deploy.worker.Worker",
            "--host",
            "127.0.0.1",
            "--cores",
            "2",
            "--memory",
            "2g",
        ]
        worker += ["--work-dir", str(work / "work"), f"spark://127.0.0.1:{port}"]
        for name, argv, ready in [
            ("master", master, "I have been elected leader"),
            ("worker", worker, "Successfully registered with master"),
        ]:
            log = work / f"{name}.log"
            with open(log, "wb") as out:
                argv += ["--webui-port", str(free_port())]
                process = subprocess.Popen([spark_class, *argv], stdout=out, stderr=out, env=env)
            started.append(process)
            _wait_for(log, ready, process)
        yield f"spark://127.0.0.1:{port}"
    finally:
        for process in reversed(started):
            process.terminate()
            process.wait(30)


class ConnectServer(NamedTuple):
    """A ``wfm spark-connect`` command serving a store, and the line it printed once it listened."""

    store: Path
    url: str
    line: str
    process: subprocess.Popen[str]


@pytest.fixture(scope="module")
def connect_server(base_store: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectServer]:
    """``wfm spark-connect`` on a copy of the store, started under umask 000, serving the whole
    module (its JVM starts once); stopped by SIGTERM at the end, which must stop it cleanly: exit
    status 0, its announcement removed and its JVM gone."""
    store = tmp_path_factory.mktemp("connect") / "store"
    shutil.copytree(base_store, store)
    port = free_port()
    with (store.parent / "spark-connect.err").open("w+") as err:
        server, line = _spark_connect(store, port, umask=0, stderr=err, master="local[2]")
        try:
            assert line.startswith("Spark Connect"), (line, (store / LOG).read_text()[-2000:])
            yield ConnectServer(store, f"sc://127.0.0.1:{port}", line, server)
        finally:
            server.send_signal(signal.SIGTERM)
            server.communicate(timeout=60)
        err.seek(0)
        errors = err.read()
    assert server.returncode == 0 and "Traceback" not in errors, errors
    assert not (store / ANNOUNCEMENT).exists()
    assert warm_url(store) is None, "a stopped server is no longer announced"
    assert _closed(port, 10), "the JVM stopped with its command"


@pytest.fixture(scope="module")
def connect_store(connect_server: ConnectServer) -> tuple[Path, str]:
    """The store with a warm Spark Connect server announced in it, and the server's URL."""
    return connect_server.store, connect_server.url


def test_standalone_cluster_answers_like_local_mode(
    base_store: Path, local_answers: list[str], standalone: str, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    shutil.copytree(base_store, store)
    assert _run_in_a_process(store, standalone) == local_answers


def test_spark_connect_answers_like_local_mode(
    connect_store: tuple[Path, str], local_answers: list[str], tmp_path: Path
) -> None:
    store, url = connect_store
    other = tmp_path / "store"  # the server reads any path it can see, not only the announcing store
    shutil.copytree(store, other, ignore=shutil.ignore_patterns(".spark-connect*"))
    assert _run_in_a_process(other, with_token_file(url, store / TOKEN)) == local_answers


def _history(store: Path, master: str) -> subprocess.CompletedProcess[str]:
    """``wfm history`` of the first step, its environment without a token of its own."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("WFM_SPARK_MASTER", "SPARK_CONNECT_AUTHENTICATE_TOKEN")
    }
    argv = [WFM, *STEPS[0], "--store", str(store), "--spark-master", master]
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)


def test_the_warm_server_takes_only_clients_with_its_token(
    connect_store: tuple[Path, str], local_answers: list[str], tmp_path: Path
) -> None:
    """As any local user could: pyspark's own client, and wfm history on a store that does not
    announce the server (so it has no token to give), are refused; the store's token is taken."""
    store, url = connect_store
    port = int(url.rsplit(":", 1)[1])
    env = {k: v for k, v in os.environ.items() if k != "SPARK_CONNECT_AUTHENTICATE_TOKEN"}
    bare = "from pyspark.sql import SparkSession as S; S.builder.remote({!r}).getOrCreate().range(3).count()"
    for client in (url, f"sc://localhost:{port}/;token=guessed"):
        attack = subprocess.run(
            [sys.executable, "-c", bare.format(client)], capture_output=True, text=True, env=env, timeout=120
        )
        assert attack.returncode != 0 and "UNAUTHENTICATED" in attack.stderr, (client, attack.stderr[-2000:])

    other = tmp_path / "store"
    shutil.copytree(store, other, ignore=shutil.ignore_patterns(".spark-connect*"))
    server = f"the Spark Connect server at sc://127.0.0.1:{port}"
    none = _history(other, url)
    assert (none.returncode, none.stdout) == (1, "")
    assert none.stderr == (
        f"wfm: error: cannot start Spark: {server} wants a token"
        " (No authentication token provided): add ;token_file=FILE to the URL\n"
    )
    wrong = tmp_path / "wrong.token"
    wrong.write_text("0" * 43)
    refused = _history(other, with_token_file(url, wrong))
    assert (refused.returncode, refused.stdout) == (1, "")
    assert refused.stderr == (
        f"wfm: error: cannot start Spark: {server} refused the token in {wrong}:"
        " Invalid authentication token\n"
    )
    assert refused.stderr.count("\n") == 1, refused.stderr

    taken = _history(other, with_token_file(url, store / TOKEN))
    assert (taken.returncode, taken.stdout) == (0, local_answers[0]), taken.stderr

    token = (store / TOKEN).read_text().strip()
    assert stat.S_IMODE((store / TOKEN).stat().st_mode) == 0o600
    pid = json.loads((store / ANNOUNCEMENT).read_text())["pid"]
    shown = [
        Path(f"/proc/{pid}/cmdline").read_text(),
        (store / ANNOUNCEMENT).read_text(),
        (store / LOG).read_text(),
    ]
    assert not any(token in text for text in shown), (
        "the token is on the command line, or in a file others read"
    )


def test_the_warm_server_listens_on_loopback_only(connect_store: tuple[Path, str]) -> None:
    """Its driver and block manager too, not only the Connect port; and they ask for Spark's secret."""
    store, url = connect_store
    pid = json.loads((store / ANNOUNCEMENT).read_text())["pid"]
    ports = listening(pid)
    assert len(ports) >= 3 and [(a, p) for a, p in ports if not is_loopback(a)] == [], ports
    connect_port = int(url.rsplit(":", 1)[1])
    for address, port in ports:
        if port != connect_port:  # the Connect port speaks gRPC: the test above
            assert "Expected SaslMessage" in unauthenticated_rpc(address, port), port


def test_a_store_with_a_warm_server_uses_it(
    connect_store: tuple[Path, str], local_answers: list[str], tmp_path: Path
) -> None:
    """No --spark-master and no Java: only the announced server can answer. Queries and a report
    as processes of their own (that every step answers alike through the server is
    ``test_spark_connect_answers_like_local_mode``'s)."""
    store, url = connect_store
    assert warm_url(store) == url
    without_java = {**os.environ, "JAVA_HOME": "/nonexistent"}
    without_java.pop("WFM_SPARK_MASTER", None)
    unannounced = tmp_path / "store"
    shutil.copytree(store, unannounced, ignore=shutil.ignore_patterns(".spark-connect*"))
    refused = subprocess.run(
        [WFM, *STEPS[0], "--store", str(unannounced)],
        capture_output=True,
        text=True,
        env=without_java,
        timeout=120,
    )
    assert refused.returncode != 0 and "cannot start Spark (local[*])" in refused.stderr, refused.stderr
    assert _run_processes(store, None, without_java, steps=3) == local_answers[:3]


if __name__ == "__main__":  # python -m tests.history.test_cluster STORE MASTER: see _run_in_a_process
    print(json.dumps(_run_in_process(Path(sys.argv[1]), sys.argv[2])))


def _spark_connect(
    store: Path,
    port: int,
    umask: int = -1,
    stderr: IO[str] | int = subprocess.PIPE,
    master: str | None = None,
) -> tuple[subprocess.Popen[str], str]:
    """``wfm spark-connect`` started and listening; returns the process and the line it printed."""
    server = subprocess.Popen(
        [
            WFM,
            "spark-connect",
            "--store",
            str(store),
            "--port",
            str(port),
            *(["--spark-master", master] if master else []),
        ],
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        umask=umask,
    )
    assert server.stdout is not None
    return server, server.stdout.readline()


def _closed(port: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) != 0:
                return True
        time.sleep(0.2)
    return False


def test_spark_connect_command_announces_itself(connect_server: ConnectServer) -> None:
    """Started under umask 000, it still keeps its token to its owner. (It stops on SIGTERM, its
    announcement removed and its JVM gone: checked when the module's ``connect_server`` stops.)"""
    store, url = connect_server.store, connect_server.url
    token = store / TOKEN
    assert connect_server.line == f"Spark Connect {url} for {store} (token in {token}; Ctrl-C stops it)\n"
    assert warm_url(store) == url
    assert stat.S_IMODE(token.stat().st_mode) == 0o600


def test_a_killed_spark_connect_command_takes_its_jvm_along(tmp_path: Path) -> None:
    """kill -9 leaves an announcement behind, but no JVM: a query then runs in local mode."""
    port = free_port()
    server, line = _spark_connect(tmp_path / "store", port)
    assert line.startswith("Spark Connect"), line
    server.kill()
    server.communicate(timeout=30)
    assert (tmp_path / "store" / ".spark-connect.json").exists()
    assert _closed(port, 30), "the JVM outlived its killed parent"
    assert warm_url(tmp_path / "store") is None


def test_spark_connect_refuses_a_port_in_use(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [WFM, "spark-connect", "--store", str(tmp_path), "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 1
    assert done.stderr == f"wfm: error: port {port} on 127.0.0.1 is in use: give another --port\n"
