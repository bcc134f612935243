"""SESDAD's RoutingPolicy ``flooding`` in the simulated overlay: every publication crosses every
link of the tree once, and each subscriber gets exactly what filter routing gives it."""

from __future__ import annotations

import pickle

import pytest

from broker.errors import LocalError
from broker.language import Publication
from broker.messages import LinkUp, Publish
from broker.routing.router import Router
from broker.sim import Overlay

LINKS = [(1, 2), (1, 3), (2, 4), (2, 5), (3, 6), (3, 7)]  # B1 at the root of a binary tree
PUBLISHERS = {"a": "B4", "b": "B5", "c": "B6", "d": "B1"}  # class -> the broker of its publisher
COMPOSITE = "{[class,eq,a],[x,eq,$S$X]}&{[class,eq,c],[x,eq,$S$X]}"


def tree(routing: str, covering: str = "off", session_grace: float = 0.0) -> Overlay:
    overlay = Overlay(covering=covering, routing=routing, session_grace=session_grace)
    for i in range(1, 8):
        overlay.add_broker(f"B{i}")
    for parent, child in LINKS:
        overlay.connect(f"B{parent}", f"B{child}")
    return overlay


def scenario(overlay: Overlay) -> dict[str, list[str] | list[list[str]]]:
    """Publishers, subscribers (one before any advertisement, one that leaves half-way, one
    composite) and publications of every class; what each subscriber got, in order."""
    early = overlay.add_client("early", "B7")
    early.subscribe("[class,eq,a],[n,>,2]")
    for cls, broker in PUBLISHERS.items():
        overlay.add_client(cls, broker).advertise(f"[class,eq,{cls}],[x,isPresent,''],[n,isPresent,0]")
    subscribers = {
        "s4": ("B4", "[class,eq,b]"),  # a publisher's sibling
        "s5": ("B5", "[class,eq,a],[n,<,3]"),
        "s3": ("B3", "[class,eq,d]"),  # an inner broker, from the root
        "s1": ("B1", "[class,eq,c],[x,eq,'k']"),
        "s6": ("B6", "[class,eq,c]"),  # the publisher's own broker
    }
    clients = {"early": early}
    for name, (broker, text) in subscribers.items():
        clients[name] = overlay.add_client(name, broker)
        clients[name].subscribe(text)
    leaving = overlay.add_client("leaving", "B2")
    leaving_id = leaving.subscribe("[class,eq,d]")
    joins = overlay.add_client("joins", "B7")
    joins.subscribe_composite(COMPOSITE)
    for round_ in range(2):
        for n in range(5):
            for cls in PUBLISHERS:
                overlay.clients[cls].publish(f"[class,{cls}],[x,{'k' if n % 2 else 'j'}],[n,{n}]")
        if round_ == 0:
            leaving.unsubscribe(leaving_id)
    got: dict[str, list[str] | list[list[str]]] = {n: c.take() for n, c in clients.items()}
    got["leaving"] = leaving.take()
    got["joins"] = joins.fired()
    return got


@pytest.mark.parametrize("covering", ["off", "lazy", "active"])
def test_flooding_delivers_to_each_subscriber_exactly_what_filter_routing_does(covering: str) -> None:
    filtered = scenario(tree("filter", covering))
    flooded = scenario(tree("flooding", covering))
    assert flooded == filtered
    assert all(filtered.values())  # every subscriber got something: the comparison is not empty
    assert len(filtered["leaving"]) == 5  # the first round only
    assert filtered["joins"] and all(len(fired) == 2 for fired in filtered["joins"])


def test_flooding_carries_every_publication_over_every_link_once() -> None:
    overlay = tree("flooding")
    publisher = overlay.add_client("pub", "B4")
    publisher.advertise("[class,eq,a],[n,isPresent,0]")
    overlay.add_client("sub", "B5").subscribe("[class,eq,a]")  # a sibling: filter uses one branch
    overlay.reset_traffic()
    for n in range(3):
        publisher.publish(f"[class,a],[n,{n}]")
    for parent, child in LINKS:
        a, b = f"B{parent}", f"B{child}"
        assert overlay.traffic[(a, b, "Publish")] + overlay.traffic[(b, a, "Publish")] == 3, (a, b)
    assert overlay.messages("Publish") == 3 * len(LINKS)
    assert overlay.clients["sub"].take() == [f"[class,a],[n,{n}]" for n in range(3)]


def test_filter_routing_leaves_the_branches_without_a_matching_subscription_alone() -> None:
    overlay = tree("filter")
    publisher = overlay.add_client("pub", "B4")
    publisher.advertise("[class,eq,a],[n,isPresent,0]")
    overlay.add_client("sub", "B5").subscribe("[class,eq,a]")
    overlay.reset_traffic()
    for n in range(3):
        publisher.publish(f"[class,a],[n,{n}]")
    assert overlay.messages("Publish") == 6  # B4 -> B2 -> B5, nothing towards B1's side
    assert overlay.traffic[("B2", "B1", "Publish")] == 0


def test_flooding_forwards_no_subscription_and_still_floods_advertisements() -> None:
    overlay = tree("flooding")
    overlay.add_client("pub", "B4").advertise("[class,eq,a],[n,isPresent,0]")
    overlay.add_client("sub", "B7").subscribe("[class,eq,a]")
    assert overlay.messages("Subscribe") == 0
    assert overlay.messages("Advertise") == len(LINKS)  # the neighbours check publications by them
    assert overlay.routers["B7"].status()["subscriptions"] == 1
    assert all(r.status()["advertisements"] == 1 for r in overlay.routers.values())


def test_a_publication_from_a_neighbour_that_advertised_nothing_is_still_dropped() -> None:
    router = Router("B1", routing="flooding")
    router.handle(LinkUp(True, epoch="B2-1"), "B2", 1.0)
    router.handle(LinkUp(True, epoch="B3-1"), "B3", 1.0)
    assert router.handle(Publish("B2/p/1", Publication("a", {})), "B2", 2.0) == []
    assert router.counters["dropped.nonconforming"] == 1


def test_the_status_shows_the_routing_mode_and_an_unknown_one_is_refused() -> None:
    assert Router("B1").status()["routing"] == "filter"
    assert Router("B1", routing="flooding").status()["routing"] == "flooding"
    with pytest.raises(ValueError, match="routing must be one of filter, flooding, not 'gossip'"):
        Router("B1", routing="gossip")


def test_a_restored_router_keeps_its_routing_mode() -> None:
    router = Router("B1", routing="flooding")
    state = pickle.loads(pickle.dumps(router.snapshot()))
    assert state["settings"]["routing"] == "flooding"
    assert Router.restore(state).tables.routing == "flooding"
    del state["settings"]["routing"]  # a snapshot written before the setting was
    assert Router.restore(state).tables.routing == "filter"


def test_a_router_logged_with_one_routing_mode_refuses_to_run_with_another() -> None:
    restored = Router.restore(Router("B1", routing="flooding").snapshot())
    with pytest.raises(LocalError, match="written with routing 'flooding', not 'filter'"):
        restored.configure_like(Router("B1"), "the log")
    restored.configure_like(Router("B1", routing="flooding"), "the log")


def test_a_broker_crashed_and_recovered_from_its_log_still_floods() -> None:
    overlay = tree("flooding")
    publisher = overlay.add_client("pub", "B4")
    publisher.advertise("[class,eq,a],[n,isPresent,0]")
    subscriber = overlay.add_client("sub", "B7")
    subscriber.subscribe("[class,eq,a]")
    overlay.crash("B2")
    overlay.recover("B2")
    assert overlay.routers["B2"].tables.routing == "flooding"
    overlay.reset_traffic()
    publisher.publish("[class,a],[n,1]")
    assert overlay.messages("Publish") == len(LINKS)
    assert subscriber.take() == ["[class,a],[n,1]"]


def test_what_is_flooded_while_a_broker_is_down_is_held_for_it_and_delivered_once() -> None:
    """Custody as under filter routing: B4 holds what it floods towards B2 while B2 is down (in
    its grace period), and B2, back from its log, sends it on; the subscriber gets each once."""
    overlay = tree("flooding", session_grace=60.0)
    publisher = overlay.add_client("pub", "B4")
    publisher.advertise("[class,eq,a],[n,isPresent,0]")
    subscriber = overlay.add_client("sub", "B7")
    subscriber.subscribe("[class,eq,a]")
    publisher.publish("[class,a],[n,0]")
    overlay.crash("B2")
    for n in range(1, 4):
        publisher.publish(f"[class,a],[n,{n}]")
    assert subscriber.take() == ["[class,a],[n,0]"]
    overlay.recover("B2")
    assert subscriber.take() == [f"[class,a],[n,{n}]" for n in range(1, 4)]
    publisher.publish("[class,a],[n,4]")
    assert subscriber.take() == ["[class,a],[n,4]"]
