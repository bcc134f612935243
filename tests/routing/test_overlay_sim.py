"""Routing scenarios in the in-process overlay, ported from PADRES's integration tests.

Every scenario runs with each subscription covering mode: covering may change what travels,
never what is delivered.
"""

from __future__ import annotations

import random

import pytest

from broker.language import parse_filter, parse_publication
from broker.messages import Ack, Advertise, Carry, LinkUp, Message, Notify, Publish, Refuse, Subscribe
from broker.routing.router import Router
from broker.sim import Overlay, RefusedError

MODES = ["off", "lazy", "active"]
ADV = "[class,eq,'stock'],[price,<,100],[amount,>,100]"


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return request.param  # type: ignore[no-any-return]


def test_one_broker_three_clients(mode: str) -> None:
    overlay = Overlay.line(1, covering=mode)
    pub, sub1, sub2 = (overlay.add_client(n, "B1") for n in ("pub", "sub1", "sub2"))
    pub.advertise(ADV)
    sub1.subscribe("[class,eq,'stock'],[price,<,100]")
    sub2.subscribe("[class,eq,'stock'],[price,>,100],[amount,>,100]")
    pub.publish("[class,'stock'],[price,80]")  # may omit advertised attributes
    assert sub1.take() == ["[class,stock],[price,80]"]
    assert sub2.take() == []  # every subscription attribute must be present
    with pytest.raises(RefusedError, match="fits no advertisement of this client"):
        pub.publish("[class,'stock'],[price,120]")  # outside the advertised range
    assert sub1.take() == sub2.take() == []


def test_publication_must_fit_own_advertisement(mode: str) -> None:
    overlay = Overlay.line(1, covering=mode)
    pub, other, sub = (overlay.add_client(n, "B1") for n in ("pub", "other", "sub"))
    other.advertise("[class,eq,stock]")
    sub.subscribe("[class,eq,stock]")
    with pytest.raises(RefusedError, match="fits no advertisement"):
        pub.publish("[class,stock],[price,1]")  # another client's advertisement does not count
    assert sub.take() == []
    with pytest.raises(RefusedError, match="fits no advertisement"):
        other.publish("[class,stock],[volume,1]")  # attribute not advertised
    other.publish("[class,stock]")
    assert sub.take() == ["[class,stock]"]


def test_conformance_follows_the_advertisements_a_client_has_now(mode: str) -> None:
    """The edge broker tries the advertisement a client's last publication fitted first: it
    must not let through what only a withdrawn one, or another client's, allowed."""
    overlay = Overlay.line(1, covering=mode)
    pub, other, sub = (overlay.add_client(n, "B1") for n in ("pub", "other", "sub"))
    sub.subscribe("[class,eq,stock]")
    wide = pub.advertise("[class,eq,stock],[price,isPresent,0]")
    pub.advertise("[class,eq,stock],[price,<,10]")
    pub.publish("[class,stock],[price,50]")  # fits the wide one only
    pub.publish("[class,stock],[price,5]")  # fits both
    pub.unadvertise(wide)
    pub.publish("[class,stock],[price,6]")
    with pytest.raises(RefusedError, match="fits no advertisement"):
        pub.publish("[class,stock],[price,50]")
    other.advertise("[class,eq,stock],[volume,isPresent,0]")
    other.publish("[class,stock],[volume,1]")
    with pytest.raises(RefusedError, match="fits no advertisement"):
        pub.publish("[class,stock],[volume,1]")  # the other client's advertisement, fitted last
    assert sub.take() == [
        "[class,stock],[price,50]",
        "[class,stock],[price,5]",
        "[class,stock],[price,6]",
        "[class,stock],[volume,1]",
    ]


def test_two_brokers(mode: str) -> None:
    overlay = Overlay.line(2, covering=mode)
    pub, sub = overlay.add_client("pub", "B1"), overlay.add_client("sub", "B2")
    pub.advertise(ADV)
    sub.subscribe("[class,eq,'stock'],[price,<,100]")
    pub.publish("[class,'stock'],[price,80],[amount,101]")
    pub.publish("[class,'stock'],[price,99.5]")
    assert sub.take() == ["[class,stock],[amount,101],[price,80]", "[class,stock],[price,99.5]"]


def test_subscription_before_advertisement_is_forwarded_when_it_arrives(mode: str) -> None:
    overlay = Overlay.line(3, covering=mode)
    sub, pub = overlay.add_client("sub", "B1"), overlay.add_client("pub", "B3")
    sub.subscribe("[class,eq,stock],[price,<,100]")
    assert overlay.messages("Subscribe") == 0  # nothing advertised yet: it waits at B1
    pub.advertise(ADV)
    assert overlay.messages("Subscribe") == 2  # to B2 and on to B3 (B2's stand-in for B1 stays at B2)
    assert overlay.messages("Unsubscribe") == 0
    pub.publish("[class,stock],[price,5]")
    assert sub.take() == ["[class,stock],[price,5]"]


def test_no_retroactive_delivery(mode: str) -> None:
    overlay = Overlay.line(2, covering=mode)
    pub, sub = overlay.add_client("pub", "B1"), overlay.add_client("sub", "B2")
    pub.advertise(ADV)
    pub.publish("[class,stock],[price,5]")
    sub.subscribe("[class,eq,stock]")
    assert sub.take() == []


def test_five_broker_star(mode: str) -> None:
    overlay = Overlay.star(4, covering=mode)
    pub = overlay.add_client("pub", "B2")
    subs = {b: overlay.add_client(f"sub{b}", b) for b in ("B1", "B3", "B4", "B5")}
    pub.advertise(ADV)
    ids = {b: c.subscribe("[class,eq,stock],[price,<,100]") for b, c in subs.items()}
    subs["B5"].subscribe("[class,eq,stock],[price,<,50]")  # covered by the one before, same client
    pub.publish("[class,stock],[price,40]")
    for client in subs.values():
        assert client.received() == ["[class,stock],[price,40]"]
    assert len(subs["B5"].deliveries) == 1  # one delivery naming both of its subscriptions
    assert len(subs["B5"].deliveries[0].subscriptions) == 2
    # one copy per link: B2->B1, then B1->B3, B1->B4, B1->B5
    overlay.reset_traffic()
    pub.publish("[class,stock],[price,60]")
    assert overlay.messages("Publish") == 4
    # unsubscribing at B3 stops delivery there only
    for client in subs.values():
        client.take()
    subs["B3"].unsubscribe(ids["B3"])
    pub.publish("[class,stock],[price,30]")
    assert subs["B3"].take() == []
    assert [subs[b].take() for b in ("B1", "B4", "B5")] == [["[class,stock],[price,30]"]] * 3


def test_one_delivery_per_client_subscription_set(mode: str) -> None:
    overlay = Overlay.line(2, covering=mode)
    pub, sub = overlay.add_client("pub", "B1"), overlay.add_client("sub", "B2")
    pub.advertise(ADV)
    a = sub.subscribe("[class,eq,stock],[price,<,100]")
    b = sub.subscribe("[class,eq,stock],[price,<,50]")
    pub.publish("[class,stock],[price,10]")
    assert len(sub.deliveries) == 1
    assert set(sub.deliveries[0].subscriptions) == {a, b}


def test_unadvertise_retracts_subscriptions(mode: str) -> None:
    overlay = Overlay.line(3, covering=mode)
    pub, sub = overlay.add_client("pub", "B1"), overlay.add_client("sub", "B3")
    adv = pub.advertise(ADV)
    sub.subscribe("[class,eq,stock]")
    assert overlay.routers["B1"].status()["subscriptions"] == 1
    pub.unadvertise(adv)
    for router in overlay.routers.values():
        assert router.status()["advertisements"] == 0
    assert overlay.routers["B1"].status()["subscriptions"] == 0
    assert overlay.routers["B3"].status()["subscriptions"] == 1  # kept at the edge, waiting
    pub.advertise(ADV)
    pub.publish("[class,stock],[price,1]")
    assert sub.take() == ["[class,stock],[price,1]"]


def test_unsubscribe_removes_state_everywhere(mode: str) -> None:
    overlay = Overlay.star(4, covering=mode)
    pubs = [overlay.add_client(f"p{b}", b) for b in ("B2", "B3")]
    for p in pubs:
        p.advertise("[class,eq,stock],[price,isPresent,0]")
    sub = overlay.add_client("sub", "B5")
    ids = [sub.subscribe(f"[class,eq,stock],[price,<,{n}]") for n in (10, 20, 30)]
    for sid in ids:
        sub.unsubscribe(sid)
    for router in overlay.routers.values():
        assert router.status()["subscriptions"] == 0
        assert router.status()["held_subscriptions"] == 0


def test_ids_are_checked(mode: str) -> None:
    overlay = Overlay.line(1, covering=mode)
    a, b = overlay.add_client("a", "B1"), overlay.add_client("b", "B1")
    sid = a.subscribe("[class,eq,x]")
    with pytest.raises(RefusedError, match="no subscription with id"):
        b.unsubscribe(sid)  # not b's
    with pytest.raises(RefusedError, match="no advertisement with id"):
        a.unadvertise(sid)
    a.unsubscribe(sid)
    with pytest.raises(RefusedError):
        a.unsubscribe(sid)


def test_a_reconnected_client_publishes_under_new_ids(mode: str) -> None:
    """Its refs count from 1 again; historians and the history/live seam tell publications by id."""
    overlay = Overlay.line(1, covering=mode)
    ids = []
    for connected_at in (1_800_000_000.0, 1_800_000_000.001):
        overlay.now = connected_at
        client = overlay.add_client("agent", "B1")
        client.advertise(ADV)
        ids.append(client.publish("[class,stock],[price,1]"))
        overlay.remove_client("agent")
    assert ids[0] != ids[1] and all(i.startswith("B1/agent/") for i in ids), ids


def test_client_disconnect_withdraws_its_state(mode: str) -> None:
    overlay = Overlay.line(2, covering=mode)
    pub, sub = overlay.add_client("pub", "B1"), overlay.add_client("sub", "B2")
    pub.advertise(ADV)
    sub.subscribe("[class,eq,stock]")
    overlay.remove_client("sub")
    assert all(r.status()["subscriptions"] == 0 for r in overlay.routers.values())
    overlay.remove_client("pub")
    assert all(r.status()["advertisements"] == 0 for r in overlay.routers.values())


def test_neighbour_restart_restores_routing(mode: str) -> None:
    overlay = Overlay.line(3, covering=mode)
    pub, sub = overlay.add_client("pub", "B1"), overlay.add_client("sub", "B3")
    pub.advertise(ADV)
    sub.subscribe("[class,eq,stock],[price,<,100]")
    overlay.restart("B2")  # loses everything; B1 and B3 re-send what it needs
    assert overlay.routers["B2"].status()["advertisements"] == 1
    assert overlay.routers["B2"].status()["subscriptions"] == 1
    pub.publish("[class,stock],[price,3]")
    assert sub.take() == ["[class,stock],[price,3]"]


def test_edge_restart_withdraws_its_clients_state(mode: str) -> None:
    overlay = Overlay.line(3, covering=mode)
    overlay.add_client("pub", "B1").advertise(ADV)
    overlay.add_client("sub", "B3").subscribe("[class,eq,stock]")
    overlay.restart("B3")
    assert overlay.routers["B1"].status()["subscriptions"] == 0
    assert overlay.routers["B2"].status()["subscriptions"] == 0


def test_covering_reduces_subscription_traffic() -> None:
    counts = {}
    for mode in MODES:
        overlay = Overlay.line(3, covering=mode)
        overlay.add_client("pub", "B1").advertise("[class,eq,stock],[price,isPresent,0]")
        sub = overlay.add_client("sub", "B3")
        sub.subscribe("[class,eq,stock],[price,<,10]")
        sub.subscribe("[class,eq,stock],[price,<,100]")  # active retracts the first
        sub.subscribe("[class,eq,stock],[price,<,50]")  # covered: held in lazy and active
        counts[mode] = (overlay.messages("Subscribe"), overlay.messages("Unsubscribe"))
        assert overlay.routers["B1"].status()["subscriptions"] == {"off": 3, "lazy": 2, "active": 1}[mode]
    # the subscriptions alone: B2's stand-in for B3 stays at B2 (``standins``)
    assert counts == {"off": (6, 0), "lazy": (4, 0), "active": (4, 2)}


def test_removing_a_coverer_reforwards_what_it_covered(mode: str) -> None:
    overlay = Overlay.line(3, covering=mode)
    pub = overlay.add_client("pub", "B1")
    pub.advertise("[class,eq,stock],[price,isPresent,0]")
    sub = overlay.add_client("sub", "B3")
    wide = sub.subscribe("[class,eq,stock],[price,<,100]")
    sub.subscribe("[class,eq,stock],[price,<,50]")
    sub.unsubscribe(wide)
    assert overlay.routers["B1"].status()["subscriptions"] == 1
    pub.publish("[class,stock],[price,20]")
    pub.publish("[class,stock],[price,70]")
    assert sub.take() == ["[class,stock],[price,20]"]


def test_advertisement_covering() -> None:
    for covering, expected in ((False, 4), (True, 2)):
        overlay = Overlay.line(3, advertisement_covering=covering)
        pub = overlay.add_client("pub", "B1")
        wide = pub.advertise("[class,eq,stock],[price,<,100]")
        pub.advertise("[class,eq,stock],[price,<,50]")
        assert overlay.messages("Advertise") == expected
        sub = overlay.add_client("sub", "B3")
        sub.subscribe("[class,eq,stock],[price,<,20]")
        pub.unadvertise(wide)  # the covered one must now travel, or the subscription is stranded
        pub.publish("[class,stock],[price,10]")
        assert sub.take() == ["[class,stock],[price,10]"]


def test_cycle_degrades_instead_of_flooding() -> None:
    overlay = Overlay()
    for b in ("B1", "B2", "B3"):
        overlay.add_broker(b)
    overlay.connect("B1", "B2")
    overlay.connect("B2", "B3")
    overlay.connect("B3", "B1")  # misconfigured: a triangle
    pub, sub = overlay.add_client("pub", "B1"), overlay.add_client("sub", "B2")
    pub.advertise(ADV)
    sub.subscribe("[class,eq,stock]")
    pub.publish("[class,stock],[price,1]")
    assert sub.take() == ["[class,stock],[price,1]"]  # once, not once per path
    assert overlay.messages() < 20
    assert sum(r.counters["dropped.duplicate"] for r in overlay.routers.values()) > 0


def test_ttl_expiry_is_counted() -> None:
    router = Router("B1")
    router.handle(LinkUp(broker=True), "B0", 0.0)
    assert router.handle(Subscribe("x", parse_filter("[class,eq,a]"), ttl=0), "B0", 0.0) == []
    assert router.handle(Publish("p", parse_publication("[class,a]"), ttl=0), "B0", 0.0) == []
    assert router.counters["dropped.ttl"] == 2


def test_a_notification_for_no_detection_here_is_dropped_and_counted() -> None:
    router = Router("B1")
    router.handle(LinkUp(broker=True), "B0", 0.0)
    publications = (parse_publication("[class,a]"),)
    for subscription in ("B1~1", "B0/c/1"):  # no such detection; not an id of a detection at all
        assert router.handle(Notify(subscription, publications), "B0", 0.0) == []
    assert router.counters["dropped.unexpected"] == 2


def test_time_subscriptions_are_fixed_at_the_edge() -> None:
    overlay = Overlay.line(2)
    pub, sub = overlay.add_client("pub", "B1"), overlay.add_client("sub", "B2")
    pub.advertise("[class,eq,T]")
    sub.subscribe("[class,eq,T],[time,<,now+1h]")
    pub.publish("[class,T]")
    overlay.now += 7200  # two hours later the subscription's window has closed
    pub.publish("[class,T]")
    assert len(sub.take()) == 1
    stored = next(iter(overlay.routers["B1"].tables.prt.values())).filter
    assert "now" not in str(stored)  # absolute everywhere on the path


def test_fire_and_forget_publications_are_answered_only_when_refused() -> None:
    router = Router("B1")
    for client in ("pub", "sub"):
        router.handle(LinkUp(broker=False), client, 0.0)
    router.handle(Advertise("a", parse_filter("[class,eq,s],[n,<,10]")), "pub", 0.0)
    router.handle(Subscribe("s", parse_filter("[class,eq,s]")), "sub", 0.0)

    def kinds(output: list[tuple[str, Message]]) -> list[tuple[str, str]]:  # deliveries are carried
        return [(hop, type(m.message if isinstance(m, Carry) else m).__name__) for hop, m in output]

    quiet = router.handle(Publish("1", parse_publication("[class,s],[n,1]"), ack=False), "pub", 0.0)
    assert kinds(quiet) == [("sub", "Deliver")]
    acked = router.handle(Publish("2", parse_publication("[class,s],[n,2]")), "pub", 0.0)
    assert kinds(acked) == [("pub", "Ack"), ("sub", "Deliver")]
    refused = router.handle(Publish("3", parse_publication("[class,s],[n,20]"), ack=False), "pub", 0.0)
    assert kinds(refused) == [("pub", "Refuse")]


def test_a_delivery_names_its_publication_and_when_its_edge_broker_took_it() -> None:
    overlay = Overlay.line(3)
    publisher = overlay.add_client("pub", "B1")
    publisher.advertise("[class,eq,a]")
    subscriber = overlay.add_client("sub", "B3")
    subscriber.subscribe("[class,eq,a]")
    first = publisher.publish("[class,a]")
    overlay.now += 42.5
    second = publisher.publish("[class,a]")
    assert first.startswith("B1/pub/") and first != second
    assert [(d.id, d.time) for d in subscriber.deliveries] == [
        (first, 1_800_000_000.0),
        (second, 1_800_000_042.5),
    ]


def test_a_request_the_router_fails_on_is_refused_and_nothing_of_it_is_kept() -> None:
    """A time the edge broker cannot fix (here its clock is far off) must not leave the client
    waiting: the failure is the answer, counted, and the router goes on."""
    router = Router("B1")
    router.handle(LinkUp(broker=False), "sub", 0.0)
    far_off = 1e15  # epoch seconds beyond the year 9999
    answer = router.handle(Subscribe("7", parse_filter("[class,eq,a],[time,<,now+1h]")), "sub", far_off)
    assert len(answer) == 1 and answer[0][0] == "sub" and isinstance(answer[0][1], Refuse)
    assert answer[0][1].ref == "7" and "the broker failed on this request" in answer[0][1].reason
    assert router.counters["router_errors"] == 1 and router.owned["sub"] == set()
    again = router.handle(Subscribe("7", parse_filter("[class,eq,a],[time,<,now+1h]")), "sub", 0.0)
    assert [type(m) for _, m in again] == [Ack]  # the ref was not taken by the failed request


def test_a_request_that_fails_half_way_leaves_no_entry_behind(monkeypatch: pytest.MonkeyPatch) -> None:
    """The subscription is in the tables when forwarding it to a neighbour fails: it is taken
    out again, so the client that is refused is not matched and a retry is a new request."""
    router = Router("B1")
    router.handle(LinkUp(broker=True), "B2", 0.0)
    router.handle(Advertise("B2/p/1", parse_filter("[class,eq,a]")), "B2", 0.0)
    router.handle(LinkUp(broker=False), "sub", 0.0)

    def broken(*args: object) -> object:
        raise RuntimeError("forwarding failed")

    with monkeypatch.context() as patch:
        patch.setattr(router.tables.subscriptions, "want", broken)
        answer = router.handle(Subscribe("7", parse_filter("[class,eq,a]")), "sub", 0.0)
    assert [type(m) for _, m in answer] == [Refuse]
    assert not router.tables.prt and router.owned["sub"] == set()
    assert not router.tables.matcher.match(parse_publication("[class,a]"), 0.0)
    again = router.handle(Subscribe("7", parse_filter("[class,eq,a]")), "sub", 0.0)
    assert [type(m.message if isinstance(m, Carry) else m) for _, m in again] == [Ack, Subscribe]


def test_equal_subscriptions_cross_each_link_once_and_leave_in_any_order() -> None:
    """Every job of a workflow subscribes the same trigger atom: a publisher that appears draws
    one subscription per link, not one per job, and deliveries stay right as they leave."""
    overlay = Overlay.line(3)  # covering off, the default
    subscribers = [overlay.add_client(f"s{i}", "B3") for i in range(20)]
    ids = [s.subscribe("[class,eq,stock],[price,isPresent,0]") for s in subscribers]
    publisher = overlay.add_client("pub", "B1")
    advertisement = publisher.advertise("[class,eq,stock],[price,isPresent,0]")
    assert (overlay.messages("Subscribe"), overlay.messages("Unsubscribe")) == (2, 0)  # was (41, 1)
    assert overlay.routers["B1"].status()["subscriptions"] == 1
    order = list(range(20))
    random.Random(7).shuffle(order)
    for n, i in enumerate(order, 1):
        publisher.publish(f"[class,stock],[price,{n}]")
        assert [len(s.take()) for s in subscribers] == [int(j in order[n - 1 :]) for j in range(20)]
        subscribers[i].unsubscribe(ids[i])
    assert overlay.messages("Unsubscribe") == 2  # the last one only, on each link
    assert overlay.routers["B1"].status()["subscriptions"] == 0
    publisher.unadvertise(advertisement)
    assert overlay.messages("Subscribe") == 2
