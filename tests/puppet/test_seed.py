"""SESDAD's own examples (seed 002), copied verbatim into data files, read as the seed means them;
and every command of its section 5, spelled as the seed spells it, run end to end.

* ``seed_config.txt``: the seed's process example (one broker, one publisher, two subscribers on
  site0) under its root site line;
* ``seed_sites.txt``: the seed's tree of three sites;
* ``seed_script.txt``: the seed's script (freeze broker0 for 100 ms);
* ``seed_session.txt``: every command of section 5 with the names of ``seed_config.txt``, and
  ``seed_script.txt`` inside it, verbatim.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.puppet.test_chaos import Run
from wfm.puppet import check_script, load_script
from wfm.puppet.script import Publish, Signal, Status, Subscribe, Wait
from wfm.topology import TopologyError, load_topology, parse_topology

HERE = Path(__file__).parent
CONFIG, SITES = HERE / "seed_config.txt", HERE / "seed_sites.txt"
SCRIPT, SESSION = HERE / "seed_script.txt", HERE / "seed_session.txt"


def test_the_seed_configuration() -> None:
    topology = load_topology(CONFIG)
    assert [(p.name, p.role, p.site, p.host, p.port) for p in topology.processes] == [
        ("broker0", "broker", "site0", "1.2.3.4", 3333),
        ("publisher0", "publisher", "site0", "1.2.3.4", 3334),
        ("subscriber0", "subscriber", "site0", "1.2.3.4", 3335),
        ("subscriber1", "subscriber", "site0", "1.2.3.4", 3336),
    ]
    # the seed's defaults for the lines it leaves out
    assert (topology.routing_policy, topology.ordering, topology.logging_level) == (
        "flooding",
        "FIFO",
        "light",
    )


def test_the_seed_tree_of_sites() -> None:
    """The seed assumes one broker at each site: its tree of sites needs one on site1 and site2
    too (then they hang off site0's), and without them it is refused, naming the line."""
    sites = SITES.read_text()
    with pytest.raises(TopologyError, match=r"seed_sites\+config:2: site site1 has no broker"):
        parse_topology(sites + CONFIG.read_text().split("\n", 1)[1], "seed_sites+config")
    brokers = "".join(
        f"Process broker{i} Is broker On site{i} URL tcp://127.0.0.1:{3333 + i}/broker\n" for i in range(3)
    )
    topology = parse_topology(sites + brokers)
    assert {b.name: [u.id for u in topology.neighbours(b.name)] for b in topology.of_role("broker")} == {
        "broker0": [],
        "broker1": ["broker0"],
        "broker2": ["broker0"],
    }


def test_the_seed_script() -> None:
    commands = load_script(SCRIPT)
    assert commands == [Signal("Freeze", "broker0", 1), Wait(100, 2), Signal("Unfreeze", "broker0", 3)]
    assert [str(c) for c in commands] == SCRIPT.read_text().splitlines()  # logged as written
    check_script(commands, load_topology(CONFIG), str(SCRIPT))


def test_every_seed_command_parses_and_fits_the_seed_configuration() -> None:
    commands = load_script(SESSION)
    assert {type(c) for c in commands} == {Subscribe, Publish, Signal, Wait, Status}
    assert {c.action for c in commands if isinstance(c, Signal)} == {"Crash", "Freeze", "Unfreeze"}
    assert Publish("publisher0", 5, "/edu/ulisboa/tecnico/meic/dad", 10, 4) in commands  # "Interval 10 ms"
    assert Wait(200, 3) in commands  # "Wait 200 ms"
    check_script(commands, load_topology(CONFIG), str(SESSION))
    assert SCRIPT.read_text() in SESSION.read_text()


EVENT = re.compile(r"(PubEvent|BroEvent|SubEvent) ([\w.-]+), ([\w.-]+), (/\S*), (\d+)")


@pytest.mark.chaos
def test_the_seed_session_runs_with_full_logging_and_total_order(tmp_path: Path) -> None:
    """The seed's configuration on this machine (its URLs made local: 1.2.3.4 is not ours), with
    ``LoggingLevel full`` and ``Ordering TOTAL``: the log has the seed's three kinds of event
    lines, exactly in its format, a BroEvent of broker0 for every publication delivered, and
    the checker finds nothing."""
    local = re.sub(r"tcp://1\.2\.3\.4:\d+/", "tcp://127.0.0.1:0/", CONFIG.read_text())
    run = Run(tmp_path, SESSION.read_text(), local + "LoggingLevel full\nOrdering TOTAL\n")
    assert run.returncode == 0, run.stderr
    assert run.summary["ordering"] == "TOTAL" and run.summary["ok"] is True
    assert {pair: (p["expected"], p["received"]) for pair, p in run.pairs().items()} == {
        ("publisher0", "subscriber0"): (13, 13),
        ("publisher0", "subscriber1"): (5, 5),
    }
    commands = {str(c) for c in load_script(SESSION)}
    events: dict[str, list[tuple[str, ...]]] = {"PubEvent": [], "BroEvent": [], "SubEvent": []}
    for entry in run.entries:
        line = entry["line"]
        if (found := EVENT.fullmatch(line)) is not None:
            events[found[1]].append(found.groups()[1:])
        else:
            assert line in commands or line.startswith(("Started ", "Status ")), line
    assert len(events["PubEvent"]) == 13
    assert all(who == publisher == "publisher0" for who, publisher, _, _ in events["PubEvent"])
    delivered = {(publisher, topic, seq) for _, publisher, topic, seq in events["SubEvent"]}
    forwarded = [(broker, (publisher, topic, seq)) for broker, publisher, topic, seq in events["BroEvent"]]
    assert sorted(forwarded) == sorted(("broker0", d) for d in delivered)  # each once
    assert len(events["SubEvent"]) == 18
