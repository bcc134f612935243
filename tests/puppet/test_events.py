"""SESDAD's event lines, and the BroEvents inferred from where a publication went in and where it
was delivered (no processes: the runner's inputs, by hand)."""

from __future__ import annotations

from wfm.puppet.events import Forwarding, bro_event, pub_event, sub_event
from wfm.topology import parse_topology

# site0 is the root; site1 and site2 hang off it; site3 off site1; site1 has a second broker
TREE = parse_topology(
    "Site site0 Parent none\nSite site1 Parent site0\nSite site2 Parent site0\nSite site3 Parent site1\n"
    + "".join(
        f"Process {name} Is broker On {site} URL tcp://127.0.0.1:{port}/broker\n"
        for name, site, port in [
            ("b0", "site0", 4000),
            ("b1", "site1", 4001),
            ("b1x", "site1", 4002),
            ("b2", "site2", 4003),
            ("b3", "site3", 4004),
        ]
    )
)


def test_the_seed_formats() -> None:
    assert pub_event("publisher0", "/edu/ulisboa", 3) == "PubEvent publisher0, publisher0, /edu/ulisboa, 3"
    assert (
        bro_event("broker0", "publisher0", "/edu/ulisboa", 3)
        == "BroEvent broker0, publisher0, /edu/ulisboa, 3"
    )
    assert sub_event("sub0", "publisher0", "/edu/ulisboa", 3) == "SubEvent sub0, publisher0, /edu/ulisboa, 3"


def test_paths_follow_the_tree() -> None:
    forwarding = Forwarding(TREE)
    assert forwarding.path("b2", "b3") == ("b2", "b0", "b1", "b3")
    assert forwarding.path("b1x", "b2") == ("b1x", "b0", "b2")  # every broker of a site dials its parent site
    assert forwarding.path("b0", "b0") == ("b0",)
    assert forwarding.path("b0", "nobody") == ()


def test_each_broker_forwarding_a_publication_is_told_once() -> None:
    forwarding = Forwarding(TREE)
    assert forwarding.published("p", 1, "b2") == []  # no delivery yet: no forwarding known
    assert forwarding.delivered("p", 1, "b3") == ["b2", "b0", "b1", "b3"]
    assert forwarding.delivered("p", 1, "b1") == []  # on the way already told
    assert forwarding.delivered("p", 1, "b1x") == ["b1x"]
    assert forwarding.delivered("p", 1, "b3") == []  # a duplicate delivery forwards nothing new


def test_a_delivery_heard_before_its_publication() -> None:
    """The subscriber's report can come first: its brokers are told when the publisher's does."""
    forwarding = Forwarding(TREE)
    assert forwarding.delivered("p", 7, "b3") == []
    assert forwarding.delivered("p", 7, "b2") == []
    assert forwarding.published("p", 7, "b1") == ["b1", "b3", "b0", "b2"]
    assert forwarding.published("p", 8, "b1") == []  # another publication: nothing waits for it


def test_an_unknown_broker_forwards_nothing() -> None:
    forwarding = Forwarding(TREE)
    forwarding.published("p", 1, "elsewhere")
    assert forwarding.delivered("p", 1, "b0") == []
