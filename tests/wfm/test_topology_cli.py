"""``wfm broker --topology FILE --name NAME``: the broker's address and the brokers it dials come
from SESDAD's configuration file (docs/puppet.md), as ``wfm puppet`` reads it."""

from __future__ import annotations

import subprocess
from pathlib import Path

from click.testing import CliRunner

from broker.transport.uri import BrokerURI
from tests.processes import WFM, status, wait_for
from tests.transport.harness import free_port
from wfm.cli import cli


def test_brokers_placed_by_a_topology_file_link_as_it_says(tmp_path: Path) -> None:
    ports = [free_port() for _ in range(3)]
    topology = tmp_path / "overlay.txt"
    topology.write_text(
        "Site site0 Parent none\nSite site1 Parent site0\nSite site2 Parent site0\n"
        + "".join(
            f"Process broker{i} Is broker On site{i} URL tcp://127.0.0.1:{port}/broker\n"
            for i, port in enumerate(ports)
        )
    )
    processes = [
        subprocess.Popen(
            [WFM, "broker", "--topology", str(topology), "--name", f"broker{i}", "--memory"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(3)
    ]
    try:
        centre = BrokerURI("127.0.0.1", ports[0], "broker0")
        wait_for(lambda: sorted(status(centre).get("neighbors", [])) == ["broker1", "broker2"], "the star")  # type: ignore[arg-type]
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            _, err = process.communicate(timeout=10)
            assert process.returncode == 0 and "Traceback" not in err, err


def test_a_topology_needs_a_name_and_replaces_the_uri(tmp_path: Path) -> None:
    topology = tmp_path / "overlay.txt"
    topology.write_text("Site site0 Parent none\nProcess b0 Is broker On site0 URL tcp://127.0.0.1:1/b0\n")
    runner = CliRunner()
    alone = runner.invoke(cli, ["broker", "--topology", str(topology)])
    assert alone.exit_code == 2 and "--topology and --name go together" in alone.output
    both = runner.invoke(
        cli, ["broker", "--uri", "socket://127.0.0.1:1/b0", "--topology", str(topology), "--name", "b0"]
    )
    assert both.exit_code == 2 and "give --uri, or --topology FILE --name NAME (not both)" in both.output
    neither = runner.invoke(cli, ["broker"])
    assert neither.exit_code == 2
    unknown = runner.invoke(cli, ["broker", "--topology", str(topology), "--name", "nosuch"])
    assert unknown.exit_code == 1 and "no process named 'nosuch'" in unknown.output


def test_a_broker_started_by_hand_needs_fixed_ports(tmp_path: Path) -> None:
    topology = tmp_path / "overlay.txt"
    topology.write_text("Site site0 Parent none\nProcess b0 Is broker On site0 URL tcp://127.0.0.1:0/b0\n")
    done = CliRunner().invoke(cli, ["broker", "--topology", str(topology), "--name", "b0"])
    assert done.exit_code == 2 and "need fixed ports (port 0 is for wfm up)" in done.output
