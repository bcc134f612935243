"""``wfm up``: three brokers, agents and deployments as child processes, stopped cleanly; a child
that dies is named, and the others are stopped."""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest

import wfm.up as up_module
from broker.transport.uri import BrokerURI
from tests.processes import WFM, status, watcher
from tests.transport.harness import free_port
from wfm.cli.serving import stop_event
from wfm.up import Child, Processes, Started, UpError, serve

WORKFLOWS = Path(__file__).parents[2] / "workflows"


def free_ports(count: int = 3) -> int:
    """A base port P with P .. P+count-1 all free."""
    while True:
        base = free_port()
        if all(_free(base + i) for i in range(count)):
            return base


def _free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except OSError:
        return False
    return True


def workflow_dir(tmp_path: Path) -> Path:
    shutil.copy(WORKFLOWS / "payroll.xml", tmp_path)
    shutil.copytree(WORKFLOWS / "scripts", tmp_path / "scripts")
    return tmp_path


def test_up_reports_an_agent_that_dies_and_stops_the_rest(tmp_path: Path) -> None:
    port = free_ports(5)  # Spark Connect on P+3, the dashboard on P+4
    state = workflow_dir(tmp_path) / ".wfm" / "agents"
    state.mkdir(parents=True)
    (state / "agentA").touch()  # a file where agentA's state directory must go: it cannot start
    done = subprocess.run(
        [WFM, "up", "--dir", str(tmp_path), "--port", str(port)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1
    *steps, error = done.stderr.splitlines()
    assert re.match(r"wfm: error: agent-agentA exited with status 2: .*is a file", error), done.stderr
    assert all(step.startswith("wfm: starting: ") for step in steps), "progress, then one error"
    logs = tmp_path / ".wfm" / "logs"
    assert {p.name for p in logs.iterdir()} >= {"broker-B1.log", "broker-B2.log", "broker-B3.log"}
    assert not any(_listening(port + i) for i in range(3))  # the brokers were stopped


def start_up(
    directory: Path, port: int, stream: str = "stdout"
) -> tuple[subprocess.Popen[str], queue.Queue[str]]:
    """``wfm up`` as a process, and the lines of its ``stream`` as they come."""
    up = subprocess.Popen(
        [WFM, "up", "--dir", str(directory), "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    read = getattr(up, stream)
    threading.Thread(target=lambda: [lines.put(line) for line in read], daemon=True).start()
    return up, lines


def _processes(marker: str) -> list[int]:
    """The pids of the processes whose command line holds ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            command = (entry / "cmdline").read_bytes() if entry.name.isdigit() else b""
        except OSError:  # it ended meanwhile
            continue
        if marker.encode() in command.replace(b"\0", b" "):
            found.append(int(entry.name))
    return found


def _children(parent: int) -> list[int]:
    """The pids of ``parent``'s descendants."""
    parents = {}
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit():
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
    found: list[int] = []
    wanted = {parent}
    while wanted:
        wanted = {pid for pid, ppid in parents.items() if ppid in wanted}
        found += wanted
    return found


def test_up_starts_and_stops_on_sigterm(tmp_path: Path) -> None:
    port = free_ports(5)  # Spark Connect on P+3, the dashboard on P+4
    up, lines = start_up(workflow_dir(tmp_path), port)
    try:
        seen = []
        while not seen or not seen[-1].startswith("try: "):
            seen.append(lines.get(timeout=60))
        certs = tmp_path / ".wfm" / "certs"
        assert [line.strip() for line in seen[-4:]] == [
            f"export WFM_TLS={certs}",
            "export WFM_IDENTITY=deployer",
            f"export WFM_BROKER=socket://127.0.0.1:{port}/B1",
            'try: wfm monitor PAYROLL --gid "$(wfm trigger PAYROLL)"',
        ]
        middle = BrokerURI("127.0.0.1", port + 1, "B2")
        assert status(middle) == {}, "over TLS only"
        assert sorted(status(middle, watcher(certs))["neighbors"]) == ["B1", "B3"]  # type: ignore[call-overload]
        assert f"socket://127.0.0.1:{port}/B1" in seen[0] and "PAYROLL" in seen[-1]
        assert any(line.startswith(f"spark    sc://127.0.0.1:{port + 3} ") for line in seen), seen
        (spark,) = _processes(f"spark-connect --store {tmp_path / '.wfm' / 'history'}")
        jvm = _children(spark)  # Spark's JVM, which warms up for seconds beside the workflows
        assert jvm and {os.getpriority(os.PRIO_PROCESS, pid) for pid in jvm} == {10}
        for pid in jvm:  # where the kernel weighs sessions against each other, not nice
            autogroup = Path(f"/proc/{pid}/autogroup")
            assert not autogroup.exists() or autogroup.read_text().split()[-2:] == ["nice", "10"]
        (web,) = [line.strip() for line in seen if line.startswith("web ")]
        dashboard = re.fullmatch(
            rf"web +(http://127\.0\.0\.1:{port + 4}/)\?token=([\w-]{{43}}) \(the dashboard\)", web
        )
        assert dashboard is not None, web
        url, token = dashboard.groups()
        asked = urllib.request.Request(url + "api/runs", headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(asked, timeout=10) as runs:
            assert "generations" in json.load(runs)
        with pytest.raises(urllib.error.HTTPError, match="401"):
            urllib.request.urlopen(url + "api/runs", timeout=10)  # without the token
        other = subprocess.run(
            [WFM, "up", "--dir", str(tmp_path), "--port", str(free_ports(5))],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert (other.returncode, other.stdout) == (1, "")
        home = tmp_path / ".wfm"
        assert other.stderr == (
            f"wfm: error: another wfm up (pid {up.pid}) is running in {home}: stop it, or use another --dir\n"
        )
    finally:
        up.send_signal(signal.SIGTERM)
        _, err = up.communicate(timeout=30)
    assert up.returncode == 0, err
    assert "Traceback" not in err
    assert not any(_listening(port + i) for i in range(3))


def test_serve_links_three_brokers_and_stops_them_on_sigterm(tmp_path: Path) -> None:
    """The process management of ``wfm up`` without agents or workflows (runs today)."""
    port, said = free_ports(), []

    def ready(started: Started) -> None:
        said.extend(started.lines())
        threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGTERM)).start()

    with stop_event() as stop:
        serve([], [], tmp_path, port, ready, stop)
    assert said[0] == "brokers  " + " ".join(f"socket://127.0.0.1:{port + i}/B{i + 1}" for i in range(3))
    assert not any(_listening(port + i) for i in range(3))
    for log in (tmp_path / "logs").iterdir():
        assert "Traceback" not in log.read_text()


def test_a_dashboard_port_in_use_is_a_warning_and_no_url(tmp_path: Path) -> None:
    """Another program listening there answered the check that the dashboard listens, and wfm up
    printed a URL that opened that program."""
    port, started, warnings = free_ports(5), [], []
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port + 4))
        taken.listen()

        def ready(up: Started) -> None:
            started.append(up)
            threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGTERM)).start()

        with stop_event() as stop:
            serve([], [], tmp_path, port, ready, stop, web_port=port + 4, warn=warnings.append)
    [up] = started
    assert up.web is None and not any(line.startswith("web") for line in up.lines())
    said = f"warning: port {port + 4} on 127.0.0.1 is in use: no dashboard (it takes --port + 4)"
    assert warnings == [said]


def test_up_carries_on_without_spark_connect(tmp_path: Path) -> None:
    """Brokers and agents need no Java: a Spark Connect server that cannot start is a warning."""
    port = free_ports(4)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port + 3))
        taken.listen()
        up, lines = start_up(workflow_dir(tmp_path), port, "stderr")  # warnings are not data
        try:
            seen: list[str] = []
            while not any(s.startswith("wfm: warning:") for s in seen):
                seen.append(lines.get(timeout=60))
            [warning] = [s for s in seen if s.startswith("wfm: warning:")]
            assert warning.startswith("wfm: warning: spark-connect exited with status 1: "), seen
            assert f"port {port + 3} on 127.0.0.1 is in use" in warning
            assert up.poll() is None, "wfm up goes on"
        finally:
            up.send_signal(signal.SIGTERM)
            _, err = up.communicate(timeout=30)
    assert up.returncode == 0, err


def test_what_runs_as_text_and_as_json(tmp_path: Path) -> None:
    uris = [BrokerURI("127.0.0.1", 7100 + i, f"B{i + 1}") for i in range(3)]
    started = Started(
        uris,
        ["agentA"],
        tmp_path / "logs",
        ["PAYROLL"],
        tmp_path / "h",
        None,
        "http://h:1/",
        tmp_path / "certs",
    )
    record = started.record()
    assert json.loads(json.dumps(record))["environment"] == {
        "WFM_TLS": str(tmp_path / "certs"),
        "WFM_IDENTITY": "deployer",
        "WFM_BROKER": "socket://127.0.0.1:7100/B1",
    }
    assert record["brokers"] == [str(uri) for uri in uris] and record["spark"] is None
    assert record["web"] == "http://h:1/" and "web      http://h:1/ (the dashboard)" in started.lines()
    assert started.lines()[-1] == 'try: wfm monitor PAYROLL --gid "$(wfm trigger PAYROLL)"'


def test_up_places_brokers_and_agents_as_a_topology_file_says(tmp_path: Path) -> None:
    """A star of three sites (ports chosen by wfm up), agentC on the hub's site, the others on
    the leaves' brokers round-robin; the workflows still run end to end."""
    topology = tmp_path / "star.txt"
    topology.write_text(
        "Site hub Parent none\nSite east Parent hub\nSite west Parent hub\n"
        "Process central Is broker On hub URL tcp://127.0.0.1:0/b\n"
        "Process eastern Is broker On east URL tcp://127.0.0.1:0/b\n"
        "Process western Is broker On west URL tcp://127.0.0.1:0/b\n"
        "Process agentC Is agent On west URL tcp://127.0.0.1:0/a\n"
    )
    port = free_ports(5)
    up = subprocess.Popen(
        [WFM, "up", "--dir", str(workflow_dir(tmp_path)), "--port", str(port), "--topology", str(topology)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert up.stdout is not None
        seen = [up.stdout.readline()]
        while not seen[-1].startswith("try: "):
            seen.append(up.stdout.readline())
            assert seen[-1], "wfm up ended early"
        brokers = seen[0].split()[1:]
        assert [b.rsplit("/", 1)[1] for b in brokers] == ["central", "eastern", "western"]
        certs = tmp_path / ".wfm" / "certs"
        hub = BrokerURI.parse(brokers[0])
        assert sorted(status(hub, watcher(certs))["neighbors"]) == ["eastern", "western"]  # type: ignore[call-overload]
        assert status(hub, watcher(certs))["routing"] == "flooding"  # the file names no RoutingPolicy
        agent_c = command_line("agentC", tmp_path)
        assert agent_c.split("--broker ")[1].split()[0] == brokers[2]  # western's site
    finally:
        up.send_signal(signal.SIGTERM)
        _, err = up.communicate(timeout=30)
    assert up.returncode == 0, err


def command_line(agent: str, home: Path) -> str:
    """The command line of the running ``wfm agent --name AGENT`` whose state is under ``home``."""
    for entry in Path("/proc").iterdir():
        try:
            words = (entry / "cmdline").read_bytes().decode().split("\0")
        except (OSError, ValueError):
            continue
        line = " ".join(words)
        if f" agent --name {agent} " in line and str(home) in line:
            return line
    raise AssertionError(f"no agent {agent} running")


def test_up_refuses_a_topology_it_cannot_run_here(tmp_path: Path) -> None:
    """A broker on another host (wfm up runs everything here, and its certificates name this
    machine), or a broker named like an agent (they would share an identity)."""
    workflow_dir(tmp_path)
    for processes, reason in (
        ("Process b0 Is broker On hub URL tcp://192.0.2.7:7000/b\n", "b0 is on 192.0.2.7, but wfm up runs"),
        ("Process agentA Is broker On hub URL tcp://127.0.0.1:0/b\n", "agentA would be both broker and"),
    ):
        topology = tmp_path / "bad.txt"
        topology.write_text("Site hub Parent none\n" + processes)
        done = subprocess.run(
            [WFM, "up", "--dir", str(tmp_path), "--port", str(free_ports(5)), "--topology", str(topology)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 1 and reason in done.stderr, done.stderr


def test_a_child_to_restart_is_started_again_unless_it_cannot_stay_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A broker of a replicated site killed under wfm up is started again (its site serves
    meanwhile); one that dies as soon as it starts is an error, not a loop."""
    warnings: list[str] = []
    processes = Processes(tmp_path, warnings.append)
    child = Child("broker-s0a", (sys.executable, "-c", "raise SystemExit(3)"), restart=True)
    processes.start(child)
    processes.running[0][1].wait()
    monkeypatch.setattr(up_module, "RESTART_AFTER", 0.0)
    processes.check()
    assert warnings == [
        f"warning: broker-s0a exited with status 3 (log: {tmp_path / 'broker-s0a.log'}); starting it again"
    ]
    assert [c for c, _ in processes.running] == [child]
    processes.running[0][1].wait()
    monkeypatch.setattr(up_module, "RESTART_AFTER", 60.0)
    with pytest.raises(UpError, match="broker-s0a exited with status 3"):
        processes.check()
