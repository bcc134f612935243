"""The SESDAD configuration format and its TOML twin: one topology, links of a tree, errors that
name file and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from wfm.topology import TopologyError, load_topology, parse_toml_topology, parse_topology

SESDAD = """\
# seed 002's example, with two brokers on site1
Site site0 Parent none
Site site1 Parent site0
Site site2 Parent site0
RoutingPolicy filter
Ordering FIFO
Process broker0 Is broker On site0 URL tcp://127.0.0.1:3333/broker
Process broker1 Is broker On site1 URL tcp://127.0.0.1:3334/broker
Process broker1b Is broker On site1 URL tcp://127.0.0.1:3335/broker
Process broker2 Is broker On site2 URL tcp://127.0.0.1:3336/broker
Process publisher0 Is publisher On site1 URL tcp://1.2.3.4:3334/pub
Process subscriber0 Is subscriber On site2 URL tcp://1.2.3.4:3335/sub
Process agentA Is agent On site0 URL tcp://1.2.3.4:3336/agent
"""

TOML = """\
routing_policy = "filter"
ordering = "FIFO"
site = [
  {name = "site0", parent = "none"},
  {name = "site1", parent = "site0"},
  {name = "site2", parent = "site0"},
]
process = [
  {name = "broker0", is = "broker", on = "site0", url = "tcp://127.0.0.1:3333/broker"},
  {name = "broker1", is = "broker", on = "site1", url = "tcp://127.0.0.1:3334/broker"},
  {name = "broker1b", is = "broker", on = "site1", url = "tcp://127.0.0.1:3335/broker"},
  {name = "broker2", is = "broker", on = "site2", url = "tcp://127.0.0.1:3336/broker"},
  {name = "publisher0", is = "publisher", on = "site1", url = "tcp://1.2.3.4:3334/pub"},
  {name = "subscriber0", is = "subscriber", on = "site2", url = "tcp://1.2.3.4:3335/sub"},
  {name = "agentA", is = "agent", on = "site0", url = "tcp://1.2.3.4:3336/agent"},
]
"""


def test_the_sesdad_format() -> None:
    topology = parse_topology(SESDAD)
    assert [s.name for s in topology.sites] == ["site0", "site1", "site2"]
    assert topology.routing_policy == "filter" and topology.ordering == "FIFO"
    assert topology.logging_level == "light"  # the default
    assert [p.name for p in topology.of_role("broker")] == ["broker0", "broker1", "broker1b", "broker2"]
    assert str(topology.uri("broker1")) == "socket://127.0.0.1:3334/broker1"


def test_links_form_a_tree() -> None:
    topology = parse_topology(SESDAD)
    dials = {b.name: [u.id for u in topology.neighbours(b.name)] for b in topology.of_role("broker")}
    # every broker of a site -> every broker of its parent site (site1's: while it serves site1)
    assert dials == {"broker0": [], "broker1": ["broker0"], "broker1b": ["broker0"], "broker2": ["broker0"]}
    # the brokers of site1 keep one log; a site of one broker is that broker
    site1 = topology.site_of("broker1b")
    assert site1 is not None and site1 == topology.site_of("broker1")
    assert (site1.name, [m.id for m in site1.members]) == ("site1", ["broker1", "broker1b"])
    assert topology.site_of("broker0") is None
    assert (
        str(topology.brokers_for("publisher0"))
        == "socket://127.0.0.1:3334/broker1,socket://127.0.0.1:3335/broker1b"
    )


def test_toml_is_the_same_topology() -> None:
    sesdad, toml = parse_topology(SESDAD), parse_toml_topology(TOML)
    assert [(p.name, p.role, p.site, p.host, p.port) for p in toml.processes] == [
        (p.name, p.role, p.site, p.host, p.port) for p in sesdad.processes
    ]
    assert [(s.name, s.parent) for s in toml.sites] == [(s.name, s.parent) for s in sesdad.sites]
    assert (toml.routing_policy, toml.ordering) == (sesdad.routing_policy, sesdad.ordering)


def test_load_picks_the_format_by_suffix(tmp_path: Path) -> None:
    (tmp_path / "net.toml").write_text(TOML)
    (tmp_path / "net.txt").write_text(SESDAD)
    assert load_topology(tmp_path / "net.toml").process("agentA").role == "agent"
    assert load_topology(tmp_path / "net.txt").source == str(tmp_path / "net.txt")
    with pytest.raises(TopologyError, match=r"cannot read topology .*nothing\.txt"):
        load_topology(tmp_path / "nothing.txt")


def test_port_zero_is_chosen() -> None:
    topology = parse_topology(SESDAD.replace(":3333/", ":0/"))
    ports = iter([4000])
    assert topology.with_ports(lambda host: next(ports)).process("broker0").port == 4000


BASE = "Site s0 Parent none\nProcess b0 Is broker On s0 URL tcp://h:1/b\n"
BAD = [
    ("Site s1", "f.txt:3: expected: Site NAME Parent NAME|none"),
    ("Site s1 Parent nowhere", "f.txt:3: unknown parent site 'nowhere'"),
    ("Site s0 Parent none", "f.txt:3: site s0 is defined twice"),
    ("Site s1 Parent none\nProcess b1 Is broker On s1 URL tcp://h:2/b", "f.txt: 2 root sites"),
    ("Process p Is pusher On s0 URL tcp://h:2/p", "f.txt:3: unknown role 'pusher'"),
    ("Process p Is publisher On s9 URL tcp://h:2/p", "f.txt:3: unknown site 's9'"),
    ("Process p Is publisher On s0 URL http://h/p", "f.txt:3: bad URL 'http://h/p'"),
    ("Process p Is publisher On s0 URL tcp://h:99999/p", "f.txt:3: bad URL"),
    (
        "Process b0 Is publisher On s0 URL tcp://h:2/p",
        "f.txt:3: process b0 is defined twice (first at f.txt:2)",
    ),
    ("Process b1 Is broker On s0 URL tcp://h:1/b", "f.txt:3: b1 has the address of b0"),
    ("Process p/q Is publisher On s0 URL tcp://h:2/p", "f.txt:3: bad name 'p/q'"),
    ("Process p Is publisher On s0", "f.txt:3: expected: Process NAME Is"),
    ("Site s1 Parent s0", "f.txt:3: site s1 has no broker"),
    ("Ordering SOMETIMES", "f.txt:3: bad value 'SOMETIMES' (expected NO or FIFO or TOTAL)"),
    ("LoggingLevel full\nLoggingLevel light", "f.txt:4: LoggingLevel is given twice (first on line 3)"),
    ("Brokers 3", "f.txt:3: unknown line 'Brokers'"),
]


@pytest.mark.parametrize(("line", "message"), BAD)
def test_errors_name_file_and_line(line: str, message: str) -> None:
    with pytest.raises(TopologyError) as caught:
        parse_topology(BASE + line + "\n", "f.txt")
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_loop_of_parents() -> None:
    text = BASE + "Site a Parent b\nSite b Parent a\nProcess x Is broker On a URL tcp://h:2/x\n"
    text += "Process y Is broker On b URL tcp://h:3/y\n"
    with pytest.raises(TopologyError, match=r"f\.txt:3: site a is in a loop of parents"):
        parse_topology(text, "f.txt")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("site = [", "n.toml: "),
        ("colour = 'red'", "n.toml: unknown key 'colour'"),
        ("site = 3", "n.toml: site must be an array of tables"),
        ("[[site]]\nname = 's0'", "n.toml: site #1: missing 'parent'"),
        ("[[site]]\nname = 's0'\nparent = 'none'\nsize = 2", "n.toml: site #1: unknown key 'size'"),
        ("ordering = 'ALWAYS'", "n.toml: ordering: bad value 'ALWAYS'"),
        (
            "[[site]]\nname = 's0'\nparent = 'none'\n[[process]]\nname='b'\nis='broker'\non='s1'\nurl='tcp://h:1/b'",
            "n.toml: entry #1: unknown site 's1'",
        ),
    ],
)
def test_toml_errors(text: str, message: str) -> None:
    with pytest.raises(TopologyError) as caught:
        parse_toml_topology(text, "n.toml")
    assert message in str(caught.value)


def test_each_broker_is_told_the_sites_of_the_replicated_brokers_it_links_to_both_ways() -> None:
    """A broker takes a site's name in a hello only from a broker it was told is of that site:
    the root's brokers are told of the brokers below that dial them, not only those they dial."""
    topology = load_topology(Path(__file__).parents[2] / "workflows" / "sites.txt")

    def told(broker: str) -> list[str]:
        options = topology.broker_options(broker)
        return sorted(v for k, v in zip(options[::2], options[1::2], strict=True) if k == "--neighbor-site")

    assert told("s0a") == [f"s{i}{b}=site{i}" for i in (1, 2) for b in "abc"]
    assert told("s1a") == ["s0a=site0", "s0b=site0", "s0c=site0"]
