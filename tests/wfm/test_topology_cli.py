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
from wfm.topology import parse_topology
from wfm.up import Layout, broker_children


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
        assert status(centre)["routing"] == "flooding"  # SESDAD's default: the file has no RoutingPolicy
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


def test_a_routing_mode_other_than_the_topology_s_is_refused(tmp_path: Path) -> None:
    topology = tmp_path / "overlay.txt"
    topology.write_text(
        "Site site0 Parent none\nProcess b0 Is broker On site0 URL tcp://127.0.0.1:1/b0\n"
        "RoutingPolicy filter\n"
    )
    done = CliRunner().invoke(
        cli, ["broker", "--topology", str(topology), "--name", "b0", "--routing", "flooding"]
    )
    assert done.exit_code == 2 and "says RoutingPolicy filter, not flooding" in done.output


def test_wfm_up_starts_every_broker_with_the_topology_s_routing_policy(tmp_path: Path) -> None:
    star = "Site hub Parent none\nSite leaf Parent hub\n" + "".join(
        f"Process {name} Is broker On {site} URL tcp://127.0.0.1:0/b\n"
        for name, site in [("c", "hub"), ("l", "leaf")]
    )
    for policy, routing in [("", "flooding"), ("RoutingPolicy filter\n", "filter")]:
        layout = Layout.of(parse_topology(star + policy))
        assert layout.routing == routing
        _, children = broker_children(layout, tmp_path)
        for child in children:
            assert child.argv[child.argv.index("--routing") + 1] == routing
    _, line = broker_children(7000, tmp_path)  # wfm up without a topology: its line of brokers
    assert all(child.argv[child.argv.index("--routing") + 1] == "filter" for child in line)


def test_a_broker_started_by_hand_needs_fixed_ports(tmp_path: Path) -> None:
    topology = tmp_path / "overlay.txt"
    topology.write_text("Site site0 Parent none\nProcess b0 Is broker On site0 URL tcp://127.0.0.1:0/b0\n")
    done = CliRunner().invoke(cli, ["broker", "--topology", str(topology), "--name", "b0"])
    assert done.exit_code == 2 and "need fixed ports (port 0 is for wfm up)" in done.output
