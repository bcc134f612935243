"""Custody transfer in the simulated overlay: a link that flaps, a broker killed and restarted
from its log, a client away and back. Nothing routed is lost, nothing is delivered twice, and
join state hosted anywhere survives."""

from __future__ import annotations

import random

import pytest

from broker.language import Publication, parse_publication
from broker.messages import Carry, Deliver, LinkUp, Publish, Took
from broker.routing.custody import weight
from broker.routing.router import Router
from broker.sim import Overlay
from tests.routing.test_sessions import JOIN
from tests.routing.test_sessions import line as sessions_line


def line(grace: float = 600, **options: object) -> Overlay:
    """B1 - B2 - B3, a publisher of ``a`` at B1 and of ``b`` at B3, a subscriber at B3."""
    return sessions_line(grace, "sub", "B3", **options)


def test_what_is_published_while_a_link_is_down_arrives_once_it_is_back() -> None:
    overlay = line()
    sub = overlay.clients["sub"]
    sub.subscribe("[class,eq,a]")
    overlay.disconnect("B2", "B3")
    for x in range(5):
        overlay.clients["pa"].publish(f"[class,a],[x,p{x}]")
    assert sub.take() == []
    assert overlay.routers["B2"].status()["held_for_away"] == 5
    overlay.advance(10)
    overlay.connect("B2", "B3")
    assert sub.take() == [f"[class,a],[x,p{x}]" for x in range(5)]
    overlay.clients["pa"].publish("[class,a],[x,p5]")
    assert sub.take() == ["[class,a],[x,p5]"]
    assert all(r.status()["held"] == 0 for r in overlay.routers.values())  # every hop said Took


def test_with_no_grace_a_link_that_goes_down_withdraws_what_came_through_it() -> None:
    overlay = line(grace=0)
    overlay.clients["sub"].subscribe("[class,eq,a]")
    overlay.disconnect("B2", "B3")
    assert not overlay.routers["B2"].tables.prt and overlay.routers["B2"].status()["held"] == 0


def test_a_neighbour_that_stays_away_past_the_grace_period_is_forgotten() -> None:
    overlay = line(grace=60)
    overlay.clients["sub"].subscribe("[class,eq,a]")
    overlay.disconnect("B2", "B3")
    overlay.clients["pa"].publish("[class,a],[x,p]")
    overlay.advance(61)
    b2 = overlay.routers["B2"]
    assert "B3" not in b2.tables.neighbors and not b2.tables.prt
    assert b2.counters["sessions_expired"] == 1 and b2.counters["dropped.link_closed"] == 1
    overlay.connect("B2", "B3")  # back later: a new neighbour, told everything again
    overlay.clients["pa"].publish("[class,a],[x,q]")
    assert overlay.clients["sub"].take() == ["[class,a],[x,q]"]


def test_a_broker_killed_and_restarted_from_its_log_loses_nothing_and_keeps_its_join_state() -> None:
    overlay = Overlay.line(3, session_grace=600)
    overlay.add_client("pa", "B1").advertise("[class,eq,a],[x,isPresent,'']")
    overlay.add_client("pb", "B2").advertise("[class,eq,b],[x,isPresent,'']")
    sub = overlay.add_client("sub", "B3")
    sub.subscribe_composite(JOIN)
    assert overlay.routers["B2"].composites.detections, "the join of a and b is hosted at B2"
    overlay.clients["pa"].publish("[class,a],[x,g1]")  # waits at B2 for its b
    overlay.crash("B2")
    overlay.clients["pa"].publish("[class,a],[x,g2]")  # held by B1 while B2 is down
    overlay.advance(5)
    overlay.recover("B2")
    overlay.clients["pb"].publish("[class,b],[x,g1]")
    overlay.clients["pb"].publish("[class,b],[x,g2]")
    assert sub.fired() == [
        ["[class,a],[x,g1]", "[class,b],[x,g1]"],
        ["[class,a],[x,g2]", "[class,b],[x,g2]"],
    ]
    assert all(r.status()["held"] == 0 for r in overlay.routers.values())


def test_a_client_killed_before_taking_its_deliveries_gets_them_again_after_its_broker_restarted() -> None:
    overlay = line()
    sub = overlay.clients["sub"]
    sub.subscribe("[class,eq,a]")
    sub.taking = False  # they arrive, the consumer dies before it is done with them
    overlay.clients["pa"].publish("[class,a],[x,p1]")
    overlay.clients["pa"].publish("[class,a],[x,p2]")
    assert overlay.routers["B3"].status()["held"] == 2
    overlay.crash("B3")
    sub.deliveries.clear()  # a new process, which took nothing
    sub.taking = True
    overlay.recover("B3")
    assert sub.take() == ["[class,a],[x,p1]", "[class,a],[x,p2]"]
    overlay.clients["pa"].publish("[class,a],[x,p3]")
    assert sub.take() == ["[class,a],[x,p3]"]
    assert overlay.routers["B3"].status()["held"] == 0


def test_a_neighbour_restarted_without_its_log_is_a_new_neighbour() -> None:
    overlay = line()
    overlay.clients["sub"].subscribe("[class,eq,a]")
    overlay.restart("B2")  # a new epoch: B1 and B3 forget what they learned from the old B2
    overlay.clients["pa"].publish("[class,a],[x,after]")
    assert overlay.clients["sub"].take() == ["[class,a],[x,after]"]
    assert overlay.routers["B1"].custody.peer_epoch("B2").startswith("B2.2:")  # its new epoch


def test_a_client_whose_session_ended_starts_a_new_channel_and_misses_nothing_after() -> None:
    """Its broker forgot it (no grace): the new session's seqs start at 1 again, and the client,
    which had taken more than that on the old one, must not take them for resends."""
    overlay = line(grace=0)
    sub = overlay.clients["sub"]
    sub.subscribe("[class,eq,a]")
    for x in range(3):
        overlay.clients["pa"].publish(f"[class,a],[x,p{x}]")
    assert sub.took == 3
    overlay.drop_client("sub")
    overlay.reconnect("sub")
    sub.subscribe("[class,eq,a]")
    overlay.clients["pa"].publish("[class,a],[x,after]")
    assert sub.take()[-1] == "[class,a],[x,after]" and sub.took == 1


def test_a_neighbour_that_forgot_us_while_we_kept_it_is_taken_for_new_on_both_sides() -> None:
    overlay = line(grace=60)
    overlay.clients["sub"].subscribe("[class,eq,a]")
    overlay.disconnect("B2", "B3")
    overlay.routers["B3"].sessions.grace = 1  # B3 gives B2 up long before B2 gives up B3
    overlay.routers["B3"].sessions.away["B2"] = overlay.now + 1
    overlay.advance(2)
    assert "B2" not in overlay.routers["B3"].tables.neighbors
    assert "B3" in overlay.routers["B2"].tables.neighbors
    overlay.connect("B2", "B3")
    overlay.clients["pa"].publish("[class,a],[x,back]")
    assert overlay.clients["sub"].take() == ["[class,a],[x,back]"]
    overlay.add_client("pc", "B3").advertise("[class,eq,c]")  # B3 -> B2 on the new channel
    overlay.add_client("sc", "B1").subscribe("[class,eq,c]")
    overlay.clients["pc"].publish("[class,c]")
    assert overlay.clients["sc"].take() == ["[class,c]"]


def test_a_neighbour_whose_grace_ends_as_it_links_again_is_forgotten_before_the_hellos() -> None:
    """B2 kept B3's session past its grace with nothing to end it (both were down), and B3's
    link was its first input after: withdrawn by that LinkUp, the session went with the channel
    both hellos had named, and a new one of the same name started its seqs at 1 again. B3,
    resuming, dropped them as resent and never sent again what B2 forgot: here a subscription,
    in a demo's brokers a composite's part (placed towards B3, never detected there)."""
    overlay = line(grace=60)
    sub = overlay.clients["sub"]
    sub.subscribe("[class,eq,a]")
    sub.subscribe_composite(JOIN)
    overlay.disconnect("B2", "B3")
    overlay.routers["B3"].sessions.away["B2"] = overlay.now + 600  # B3 keeps B2 longer
    overlay.now += 61  # and no Tick: B2 hears nothing before B3's link is back
    overlay.connect("B2", "B3")
    overlay.clients["pa"].publish("[class,a],[x,back]")
    overlay.clients["pb"].publish("[class,b],[x,back]")
    assert sub.take() == ["[class,a],[x,back]"]
    assert sub.fired() == [["[class,a],[x,back]", "[class,b],[x,back]"]]
    assert overlay.routers["B3"].custody.peer_epoch("B2") == overlay.routers["B2"].custody.channels["B3"].name
    assert all(r.counters["dropped.resent"] == 0 for r in overlay.routers.values())


def test_a_client_whose_grace_ends_as_it_reconnects_is_told_its_session_is_new() -> None:
    overlay = line(grace=60)
    sub = overlay.clients["sub"]
    sub.subscribe("[class,eq,a]")
    overlay.clients["pa"].publish("[class,a],[x,before]")
    assert sub.take() == ["[class,a],[x,before]"] and sub.took == 1
    overlay.drop_client("sub")
    overlay.now += 61  # no Tick: its reconnection is the first input past its grace
    overlay.reconnect("sub")
    assert sub.took == 0  # a new channel, not the one it had: it knows to ask again
    sub.subscribe("[class,eq,a]")
    overlay.clients["pa"].publish("[class,a],[x,after]")
    assert sub.take() == ["[class,a],[x,after]"]


def test_a_broker_restored_from_an_older_format_tells_its_neighbours_again_what_it_told_them() -> None:
    """A state an older version wrote may be out of step with a neighbour's (the session ended
    by the LinkUp above: B3 dropped what B2 sent, and B2 believed B3 had it), and nothing in it
    tells. Restored from an older format (``reannounce_all``), B2 tells each neighbour again, as
    it resumes, every advertisement, subscription and composite part it told it: B3 gets back
    the subscription and the part it lost, and what it had it keeps, answered once."""
    overlay = Overlay.line(3, session_grace=600)
    overlay.add_client("pa", "B3").advertise("[class,eq,a],[x,isPresent,'']")
    overlay.add_client("pb", "B3").advertise("[class,eq,b],[x,isPresent,'']")
    agent = overlay.add_client("agent", "B1")
    agent.subscribe_composite(JOIN)  # both atoms from B3's side: B2 places its part at B3
    sub = overlay.add_client("sub", "B1")
    sub.subscribe("[class,eq,a]")
    b2, b3 = overlay.routers["B2"], overlay.routers["B3"]
    (part,) = [d.id for d in b2.composites.detections.values() if d.placement and d.placement.forward == "B3"]
    b3.composites.release(("B2", str(part)))  # B3 loses them, and B2 does not know
    (learned,) = [sub_id for sub_id, entry in b3.tables.prt.items() if entry.hop == "B2"]
    b3.tables.withdraw(learned)
    overlay.clients["pa"].publish("[class,a],[x,lost]")
    assert sub.take() == []
    b2.custody.reannounce_all()  # as ``RouterLog.restore`` does for a log of an older format
    overlay.crash("B2")
    overlay.recover("B2")
    overlay.clients["pa"].publish("[class,a],[x,back]")
    overlay.clients["pb"].publish("[class,b],[x,back]")
    assert sub.take() == ["[class,a],[x,back]"]
    assert agent.fired() == [["[class,a],[x,back]", "[class,b],[x,back]"]]
    overlay.reset_traffic()
    overlay.crash("B2")  # once: a resume after that tells nothing again
    overlay.recover("B2")
    assert overlay.messages("Subscribe") == overlay.messages("CompositeSubscribe") == 0
    overlay.clients["pa"].publish("[class,a],[x,once]")
    assert sub.take() == ["[class,a],[x,once]"]


def test_what_was_held_for_a_neighbour_that_forgot_us_goes_again_on_the_new_channel() -> None:
    overlay = line(grace=60)
    overlay.clients["sub"].subscribe("[class,eq,a]")
    overlay.disconnect("B2", "B3")
    overlay.clients["pa"].publish("[class,a],[x,away]")  # held by B2 for B3, which forgets B2
    overlay.routers["B3"].sessions.grace = 1
    overlay.routers["B3"].sessions.away["B2"] = overlay.now + 1
    overlay.advance(2)
    overlay.connect("B2", "B3")
    assert overlay.clients["sub"].take() == ["[class,a],[x,away]"]
    counters = overlay.routers["B2"].counters
    assert counters["resent.new_channel"] == 1 and counters["dropped.link_closed"] == 0
    assert all(r.status()["held"] == 0 for r in overlay.routers.values())


def test_a_broker_back_from_its_log_after_its_neighbours_forgot_it_loses_no_publication() -> None:
    """B2 is down past its neighbours' grace period, so they forget it; back from its log, it
    takes what its client publishes at once and routes it into the old channels, before the
    neighbours' hellos (which name new channels) arrive."""
    overlay = Overlay.line(3, session_grace=60)
    pub = overlay.add_client("pub", "B2")
    pub.advertise("[class,eq,a],[x,isPresent,'']")
    subs = [overlay.add_client(f"s{i}", f"B{i}") for i in (1, 3)]
    for sub in subs:
        sub.subscribe("[class,eq,a]")
    overlay.crash("B2")
    overlay.advance(61)
    assert all("B2" not in overlay.routers[b].tables.neighbors for b in ("B1", "B3"))
    overlay.recover("B2", neighbours=False)
    pub.publish("[class,a],[x,early]")
    assert overlay.routers["B2"].status()["held_for_away"] == 2
    overlay.connect("B1", "B2")
    overlay.connect("B2", "B3")
    pub.publish("[class,a],[x,later]")
    for sub in subs:
        assert sub.take() == ["[class,a],[x,early]", "[class,a],[x,later]"]
    assert overlay.routers["B2"].counters["dropped.link_closed"] == 0


def test_a_resent_carry_is_taken_once_and_answered_again() -> None:
    router = Router("B2", epoch="e2")
    router.handle(LinkUp(broker=True, epoch="e1"), "B1", 0.0)
    router.handle(LinkUp(broker=False), "sub", 0.0)
    router.handle(Carry(1, Publish("B1/p/1", parse_publication("[class,a]"))), "B1", 0.0)
    again = router.handle(Carry(1, Publish("B1/p/1", parse_publication("[class,a]"))), "B1", 0.0)
    assert again == [("B1", Took(1))]
    assert router.counters["dropped.resent"] == 1


def test_held_deliveries_for_a_client_are_bounded_and_counted() -> None:
    overlay = line(session_max_queued=3)
    overlay.clients["sub"].subscribe("[class,eq,a]")
    overlay.drop_client("sub")
    for x in range(5):
        overlay.clients["pa"].publish(f"[class,a],[x,p{x}]")
    counters = overlay.routers["B3"].counters
    assert counters["session_queued"] == 3 and counters["dropped.session_full"] == 2
    overlay.reconnect("sub")
    assert overlay.clients["sub"].take() == [f"[class,a],[x,p{x}]" for x in range(3)]


@pytest.mark.parametrize("seed", range(6))
def test_crashes_and_flaps_under_random_interleaving_lose_and_duplicate_nothing(seed: int) -> None:
    """Jepsen in miniature: numbered publications from both ends of a line of four, brokers
    crashed and restarted from their logs and links flapped at random moments; every subscriber
    gets each publication exactly once, and each publisher's in the order published."""
    rng = random.Random(seed)
    overlay = Overlay.line(4, session_grace=600, interleave=rng)
    publishers = {"p1": overlay.add_client("p1", "B1"), "p4": overlay.add_client("p4", "B4")}
    for publisher in publishers.values():
        publisher.advertise("[class,eq,n],[k,isPresent,0],[src,isPresent,'']")
    subscribers = [overlay.add_client("s1", "B1"), overlay.add_client("s4", "B4")]
    for subscriber in subscribers:
        subscriber.subscribe("[class,eq,n]")
    overlay.run()
    crashed: list[str] = []
    for k in range(60):
        name = rng.choice(sorted(publishers))
        overlay.clients[name].publish(f"[class,n],[k,{k}],[src,{name}]")
        fault = rng.random()
        if fault < 0.08 and not crashed:
            crashed.append(rng.choice(["B2", "B3"]))
            overlay.crash(crashed[-1])
        elif fault < 0.2 and crashed:
            overlay.advance(rng.uniform(0.5, 5))
            overlay.recover(crashed.pop())
        elif fault < 0.25 and not crashed:
            a = rng.choice(["B1", "B2", "B3"])
            b = f"B{int(a[1]) + 1}"
            overlay.disconnect(a, b)
            overlay.run()
            overlay.connect(a, b)
    if crashed:
        overlay.recover(crashed.pop())
    overlay.run()
    for subscriber in subscribers:
        got = [d.publication for d in subscriber.deliveries]
        keys = [(p["src"], p["k"]) for p in got]
        assert len(keys) == len(set(keys)), f"{subscriber.name} got duplicates"
        assert len(keys) == 60, f"{subscriber.name} lost {60 - len(keys)}"
        for name in publishers:
            mine = [k for src, k in keys if src == name]
            assert mine == sorted(mine), f"{subscriber.name} got {name}'s out of order"
    assert all(isinstance(d, Deliver) for s in subscribers for d in s.deliveries)


def test_custody_weighs_a_publication_by_its_names_and_strings() -> None:
    """What bounds what a channel holds: 64, and for each attribute its name's length and its
    string's length (8 for a number)."""
    publication = Publication("c", {"seq": 1, "pad": "x" * 10, "t": 2.5})
    expected = 64 + (3 + 8) + (3 + 10) + (1 + 8)
    assert publication.weight() == expected
    assert weight(Deliver(("s",), publication)) == weight(Publish("p", publication)) == expected
