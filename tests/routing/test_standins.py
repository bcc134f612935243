"""Stand-in subscriptions: a publisher that fails over from a dead broker to a neighbour, or
that first advertises while a neighbour is away, loses nothing to the neighbour's subscribers.

B1 - B2 - B3 with a subscriber on B1. While B1 is down (crashed, kept for the grace period), a
publisher advertises on B2 or B3 and publishes at once: B1 has not yet had the advertisement, so
no subscription of B1 leads there; without a stand-in every publication is dropped as matching no
one (the edge-broker reliability scenario lost 18 Triggers so)."""

from __future__ import annotations

import pickle
import random
from collections import deque
from collections.abc import Callable

import pytest

from broker.language import parse_filter, parse_publication
from broker.messages import Advertise, Carry, LinkDown, LinkUp, Message, Publish
from broker.routing.router import Router
from broker.routing.standins import ANSWER_WAIT
from broker.sim import Overlay


def overlay_with_b1_away() -> Overlay:
    overlay = Overlay.line(3, session_grace=600)
    overlay.add_client("early", "B1").advertise("[class,eq,t],[g,isPresent,'']")
    overlay.add_client("sub", "B1").subscribe("[class,eq,t]")
    overlay.crash("B1")
    return overlay


@pytest.mark.parametrize("at", ["B2", "B3"])
def test_what_a_new_publisher_sends_while_the_subscribers_broker_is_down_reaches_them(at: str) -> None:
    overlay = overlay_with_b1_away()
    publisher = overlay.add_client("late", at)
    publisher.advertise("[class,eq,t],[g,isPresent,'']")
    for g in range(3):
        publisher.publish(f"[class,t],[g,g{g}]")
    assert overlay.routers["B2"].status()["stand_ins"] == 1
    overlay.advance(5)
    overlay.recover("B1")
    assert overlay.clients["sub"].take() == [f"[class,t],[g,g{g}]" for g in range(3)]
    publisher.publish("[class,t],[g,after]")  # routed by B1's own subscription now
    assert overlay.clients["sub"].take() == ["[class,t],[g,after]"]
    b2 = overlay.routers["B2"]
    assert b2.status()["stand_ins"] == 0 and b2.counters["stand_ins.ended"] == b2.counters["stand_ins.made"]
    assert not any("~stand-in~" in sub_id for r in overlay.routers.values() for sub_id in r.tables.prt)


def test_a_stand_in_ends_with_its_advertisement() -> None:
    overlay = overlay_with_b1_away()
    publisher = overlay.add_client("late", "B3")
    adv = publisher.advertise("[class,eq,t],[g,isPresent,'']")
    assert any("~stand-in~" in sub_id for sub_id in overlay.routers["B3"].tables.prt)  # went upstream
    publisher.unadvertise(adv)
    assert not any("~stand-in~" in s for r in overlay.routers.values() for s in r.tables.prt)
    assert overlay.routers["B2"].status()["stand_ins"] == 0


def test_a_stand_in_ends_with_the_session_of_the_neighbour_it_stood_in_for() -> None:
    overlay = overlay_with_b1_away()
    overlay.add_client("late", "B2").advertise("[class,eq,t],[g,isPresent,'']")
    overlay.advance(601)
    b2 = overlay.routers["B2"]
    assert b2.counters["sessions_expired"] == 1
    assert b2.status()["stand_ins"] == 0 and not any("~stand-in~" in s for s in b2.tables.prt)


def test_nobody_away_a_stand_in_costs_no_message_and_none_is_left() -> None:
    """With every neighbour up, a stand-in stays at its broker (for an advertisement from a
    neighbour it holds back the Took of it instead, see below), and all of them end."""
    overlay = Overlay.line(3, session_grace=600)
    overlay.add_client("sub", "B1").subscribe("[class,eq,t]")
    subscribes = overlay.messages("Subscribe")
    overlay.add_client("pub", "B3").advertise("[class,eq,t],[g,isPresent,'']")
    assert overlay.messages("Subscribe") == subscribes + 2  # B1's to B2 and on to B3
    assert overlay.messages("Unsubscribe") == 0
    assert [r.counters["stand_ins.made"] for r in overlay.routers.values()] == [0, 1, 1]
    for router in overlay.routers.values():
        assert router.counters["stand_ins.sent_on"] == 0
        assert router.status()["stand_ins"] == router.status()["tooks_held_back"] == 0
        assert router.counters["stand_ins.made"] == router.counters["stand_ins.ended"]


def test_a_full_channel_drops_publications_never_routing_state() -> None:
    """Unwanted publications under a stand-in fill the away neighbour's channel; an advertisement
    made after them still reaches it, so its subscriber hears what is published under it."""
    overlay = Overlay.line(3, session_grace=600, session_max_queued=50)
    overlay.add_client("sub", "B1").subscribe("[class,eq,t],[g,eq,'wanted']")
    overlay.clients["sub"].subscribe("[class,eq,u]")
    overlay.crash("B1")
    late = overlay.add_client("late", "B3")
    late.advertise("[class,eq,t],[g,isPresent,'']")
    for i in range(60):
        late.publish(f"[class,t],[g,'other{i}']")
    other = overlay.add_client("u-pub", "B3")
    other.advertise("[class,eq,u],[n,isPresent,0]")
    assert overlay.routers["B2"].counters["dropped.link_full"] > 0
    overlay.advance(5)
    overlay.recover("B1")
    overlay.clients["sub"].take()
    other.publish("[class,u],[n,1]")
    assert overlay.clients["sub"].take() == ["[class,u],[n,1]"]


def test_a_neighbour_that_came_back_new_and_went_again_gets_a_stand_in_again() -> None:
    overlay = overlay_with_b1_away()
    overlay.add_client("late", "B3").advertise("[class,eq,t],[g,isPresent,'']")
    b2 = overlay.routers["B2"]
    del overlay._logs["B1"]  # B1 comes back empty (a new epoch), takes the advertisement...
    overlay.add_broker("B1")
    overlay._link("B1", "B2")
    step(overlay, lambda target, message: False)  # until quiet, the brokers' Tooks kept back
    overlay.crash("B1")  # ...and dies again before B2 hears its Took
    assert any("~stand-in~B1~" in sub_id for sub_id in b2.tables.prt)


def test_a_neighbour_back_from_its_log_keeps_its_stand_in_until_its_answers_are_in() -> None:
    """B1 took the advertisement and crashed before its answer (a Subscribe) reached B2. Its hello
    says it took it; the stand-in ends only at B1's next Took, after B1 resent that answer, so a
    publication B2 handles in between still reaches B1's subscriber."""
    overlay = Overlay.line(2, session_grace=600)
    overlay.add_client("sub", "B1").subscribe("[class,eq,t]")
    late = overlay.add_client("late", "B2")
    overlay._send("late", "B2", Advertise("a1", parse_filter("[class,eq,t],[g,isPresent,'']")))
    step(overlay, lambda target, message: target == "B1" and isinstance(message, Carry))
    overlay.crash("B1")  # its answer and its Took to B2 were in flight: lost
    late.publish("[class,t],[g,held]")  # held for B1 under the stand-in
    router = Router.restore(pickle.loads(overlay._logs.pop("B1")))  # B1 back from its log
    overlay.routers["B1"] = router
    for hop, channel in router.custody.channels.items():
        if channel.up:
            overlay._send(hop, "B1", LinkDown())
    overlay.run()
    overlay._link("B1", "B2")
    overlay.queue = deque(sorted(overlay.queue, key=lambda item: item[1] != "B2"))  # B1's hello first
    step(overlay, lambda target, message: target == "B2" and isinstance(message, LinkUp))
    overlay._send("late", "B2", Publish("99", parse_publication("[class,t],[g,between]")))
    overlay.queue.rotate(1)  # it reaches B2 before B1's resent Subscribe
    overlay.run()
    overlay._link("sub", "B1")
    overlay.run()
    assert overlay.clients["sub"].take() == ["[class,t],[g,held]", "[class,t],[g,between]"]


def withheld(overlay: Overlay, holds: Callable[[str, str, Message], bool]) -> Callable[[], None]:
    """From now on, what ``holds`` names (source, target, message) waits: a broker whose full disk
    holds all it would send, answers a round trip late. The function returned sends it, in order,
    and lets everything through again."""
    send = overlay._send
    waiting: list[tuple[str, str, Message]] = []

    def sending(source: str, target: str, message: Message) -> None:
        if holds(source, target, message):
            waiting.append((source, target, message))
        else:
            send(source, target, message)

    def release() -> None:
        overlay._send = send  # type: ignore[method-assign]
        for item in waiting:
            send(*item)

    overlay._send = sending  # type: ignore[method-assign]
    return release


def step(overlay: Overlay, until: Callable[[str, Message], bool]) -> None:
    """Deliver queued messages one by one until one that ``until`` names has been handled."""
    while overlay.queue:
        source, target, message = overlay.queue.popleft()
        if target in overlay.clients and source in overlay.routers:
            overlay._to_client(overlay.clients[target], message)
        elif (router := overlay.routers.get(target)) is not None:
            for hop, out in router.handle(message, source, overlay.now):
                overlay._send(target, hop, out)
        if until(target, message):
            return


def test_a_new_publisher_beyond_a_middle_broker_that_is_down() -> None:
    """B3 holds for B2 what its stand-in drew; B2, back, carries it on to B1 under a stand-in of
    its own, kept until B1 answered the advertisement."""
    overlay = Overlay.line(3, session_grace=600)
    overlay.add_client("sub", "B1").subscribe("[class,eq,t]")
    overlay.crash("B2")
    late = overlay.add_client("late", "B3")
    late.advertise("[class,eq,t],[g,isPresent,'']")
    for g in range(3):
        late.publish(f"[class,t],[g,g{g}]")
    overlay.advance(5)
    overlay.recover("B2")
    assert overlay.clients["sub"].take() == [f"[class,t],[g,g{g}]" for g in range(3)]


JOIN = "{[class,eq,S],[g,eq,$S$G]}&{[class,eq,T],[g,eq,$S$G]}"


def test_a_generation_started_while_the_middle_broker_is_down_reaches_every_join() -> None:
    """The 1,000-job chaos stall, in small: the agents' joins were made before any Trigger was
    advertised (detected at their own brokers), then the middle broker died, and the Trigger was
    advertised and published, and the coordinator's status followed, while it was down. B1 held
    all of it for B2; B2, back, took the advertisement, then the Trigger. Moving its detection to
    B1 on the advertisement lost the Trigger at both places (B2 no longer detected it, B1 had
    routed it before the moved detection arrived), and B3's join never heard of it: no agent
    beyond B1 ran. Detections now stay, and B2 stands in for B3 behind the advertisement."""
    overlay = Overlay.line(3, session_grace=600)
    agents = [overlay.add_client(f"agent{i}", f"B{i}") for i in (1, 2, 3)]
    for agent in agents:
        agent.subscribe_composite(JOIN)
    overlay.crash("B2")
    trigger, coordinator = overlay.add_client("trigger", "B1"), overlay.add_client("coordinator", "B1")
    trigger.advertise("[class,eq,T],[g,isPresent,'']")
    trigger.publish("[class,T],[g,g1]")
    coordinator.advertise("[class,eq,S],[g,isPresent,'']")
    coordinator.publish("[class,S],[g,g1]")
    overlay.advance(5)
    overlay.recover("B2")
    for agent in agents:
        assert agent.fired() == [["[class,S],[g,g1]", "[class,T],[g,g1]"]], agent.name
    for router in overlay.routers.values():
        assert router.status()["stand_ins"] == 0  # all ended once the answers were in


def test_a_trigger_published_right_after_its_advertisement_reaches_every_join() -> None:
    """Without a settling pause: the publication follows the advertisement along the same
    links, and each broker carries it on to a neighbour that has not answered the
    advertisement yet (a stand-in kept at the broker), so a join two hops away gets it. (No
    join at B1: one there would be shared by the others and hide the loss.)"""
    overlay = Overlay.line(3, session_grace=600)
    agents = [overlay.add_client(f"agent{i}", f"B{i}") for i in (2, 3)]
    for agent in agents:
        agent.subscribe_composite(JOIN)
    coordinator = overlay.add_client("coordinator", "B1")
    coordinator.advertise("[class,eq,S],[g,isPresent,'']")
    overlay.add_client("trigger", "B1")
    overlay._send("trigger", "B1", Advertise("a1", parse_filter("[class,eq,T],[g,isPresent,'']")))
    overlay._send("trigger", "B1", Publish("p1", parse_publication("[class,T],[g,g1]")))
    overlay.run()
    coordinator.publish("[class,S],[g,g1]")
    for agent in agents:
        assert agent.fired() == [["[class,S],[g,g1]", "[class,T],[g,g1]"]], agent.name


# what a status may carry (a signature, say) but need not: a publication that fits this
# advertisement may leave out any attribute it names, and most of these leave ``sig`` out
SIGNED = "[class,eq,t],[g,isPresent,''],[sig,isPresent,'']"


def test_a_stand_in_kept_here_carries_on_what_leaves_out_an_advertised_attribute() -> None:
    """The 1,000-job chaos stall with signed job statuses: JOBSTATUS advertised three attributes
    that no status carries yet. B2, back from its log, passed the coordinator's advertisement on
    to B3 and stood in for B3 until it answered; the coordinator's status came first, and the
    stand-in, the advertisement's filter as a subscription, asked for the signature: the status
    matched nothing there, and the agents behind it never ran. Here the publications follow their
    advertisement at once, so each broker has only its stand-in for the next one: every one
    reaches B3."""
    overlay = Overlay.line(3, session_grace=600)
    sub = overlay.add_client("sub", "B3")
    sub.subscribe("[class,eq,t]")
    overlay.add_client("pub", "B1")
    overlay._send("pub", "B1", Advertise("a1", parse_filter(SIGNED)))
    for ref, text in enumerate(["[class,t],[g,unsigned]", "[class,t],[g,signed],[sig,s]", "[class,t]"]):
        overlay._send("pub", "B1", Publish(str(ref), parse_publication(text)))
    overlay.run()
    assert sub.take() == ["[class,t],[g,unsigned]", "[class,t],[g,signed],[sig,s]", "[class,t]"]
    assert [r.counters["stand_ins.made"] for r in overlay.routers.values()] == [1, 1, 0]
    for router in overlay.routers.values():
        assert router.counters["stand_ins.ended"] == router.counters["stand_ins.made"], router.id
        assert router.counters["stand_ins.sent_on"] == 0, router.id  # kept here: no message
        assert router.status()["stand_ins"] == router.status()["tooks_held_back"] == 0, router.id


@pytest.mark.parametrize("at", ["B2", "B3"])
def test_a_stand_in_sent_upstream_draws_what_leaves_out_an_advertised_attribute(at: str) -> None:
    """B1 away: B2's stand-in for it goes to the publisher's broker as a subscription of the
    advertisement's class alone (the one predicate every fitting publication meets), so B3 sends
    what leaves out ``sig`` too; B2 holds for B1 only what fits the advertisement. Once B1 is
    back no stand-in is left, here or upstream."""
    overlay = overlay_with_b1_away()
    publisher = overlay.add_client("late", at)
    publisher.advertise(SIGNED)
    for g in range(3):
        publisher.publish(f"[class,t],[g,g{g}]")
    publisher.publish("[class,t],[g,g3],[sig,s]")
    overlay.advance(5)
    overlay.recover("B1")
    assert overlay.clients["sub"].take() == [
        *(f"[class,t],[g,g{g}]" for g in range(3)),
        "[class,t],[g,g3],[sig,s]",
    ]
    assert not any("~stand-in~" in sub_id for r in overlay.routers.values() for sub_id in r.tables.prt)


def test_a_stand_in_matches_what_fits_its_advertisement_and_nothing_else() -> None:
    """Matched by fit, as the edge broker checks a publication against its advertisement: an
    attribute the advertisement does not name, or a value it does not allow, is not carried on
    (the class-only filter the stand-in travels as would take both)."""
    overlay = Overlay.line(2, session_grace=600)
    overlay.crash("B2")
    pub = overlay.add_client("pub", "B1")
    pub.advertise("[class,eq,t],[g,eq,'a'],[sig,isPresent,'']")
    other = overlay.add_client("other", "B1")
    other.advertise("[class,eq,t],[g,isPresent,''],[n,isPresent,0]")
    for publisher, text in [(pub, "[class,t],[g,a]"), (pub, "[class,t]"), (other, "[class,t],[g,b]")]:
        publisher.publish(text)
    other.publish("[class,t],[g,a],[n,1]")
    held = overlay.routers["B1"].custody.channels["B2"].held.values()
    assert [str(m.publication) for m, _ in held if isinstance(m, Publish)] == [
        "[class,t],[g,a]",
        "[class,t]",
        "[class,t],[g,b]",  # the other advertisement's stand-in
        "[class,t],[g,a],[n,1]",
    ]
    b1 = overlay.routers["B1"]
    for text in ["[class,t],[g,a],[x,1]", "[class,t],[g,b],[sig,s]"]:  # they fit neither
        assert b1.tables.matching(parse_publication(text), overlay.now) == ([], {}), text


def test_a_frozen_middle_broker_comes_back_with_its_state_and_every_join_fires() -> None:
    """SIGSTOP of B2 past the heartbeat timeout: its neighbours take its links as down and keep
    its session; B2 keeps all its state (it took nothing meanwhile). A generation started
    meanwhile at B1 reaches the joins at B2 and B3 once B2 runs again, and no stand-in is left."""
    overlay = Overlay.line(3, session_grace=600)
    agents = [overlay.add_client(f"agent{i}", f"B{i}") for i in (2, 3)]
    for agent in agents:
        agent.subscribe_composite(JOIN)
    overlay.disconnect("B1", "B2")
    overlay.disconnect("B2", "B3")
    trigger, coordinator = overlay.add_client("trigger", "B1"), overlay.add_client("coordinator", "B1")
    trigger.advertise("[class,eq,T],[g,isPresent,'']")
    trigger.publish("[class,T],[g,g1]")
    coordinator.advertise("[class,eq,S],[g,isPresent,'']")
    coordinator.publish("[class,S],[g,g1]")
    assert overlay.routers["B1"].status()["stand_ins"] == 2  # held for B2 with what they drew
    overlay.advance(5)
    overlay.connect("B1", "B2")
    overlay.connect("B2", "B3")
    for agent in agents:
        assert agent.fired() == [["[class,S],[g,g1]", "[class,T],[g,g1]"]], agent.name
    for router in overlay.routers.values():
        assert router.status()["stand_ins"] == 0


def test_a_publication_after_the_neighbours_took_reaches_a_subscriber_two_hops_away() -> None:
    """The durability benchmark's loss, in small (the first 1,200 of 10,000 acknowledged
    publications never reached the subscriber on B3): B2 took the advertisement from B1 and its
    Took reached B1 before B3's answer (its subscription) was back through B2, as it does when
    every broker's group commit waits for a slow fsync. B1's stand-in for B2 ends at that Took,
    yet B2 had no real subscription to give yet, only its own stand-in for B3. So B2's stand-in
    for B3 holds back its Took to B1 until B3 took the advertisement: what B1 routes in between
    still goes to B2, and B3's answer is ahead of the Took."""
    overlay = Overlay.line(3, session_grace=600)
    overlay.add_client("sub", "B3").subscribe("[class,eq,t]")
    overlay.add_client("pub", "B1")
    overlay._send("pub", "B1", Advertise("a1", parse_filter("[class,eq,t],[g,isPresent,'']")))
    step(overlay, lambda target, message: target == "B1")
    carry = next(item for item in overlay.queue if item[:2] == ("B1", "B2"))
    overlay.queue.remove(carry)
    answer = overlay.routers["B2"].handle(carry[2], "B1", overlay.now)
    assert not [out for hop, out in answer if hop == "B1"]  # no Took yet: held back
    assert overlay.routers["B2"].status()["tooks_held_back"] == 1
    for hop, out in answer:
        overlay._send("B2", hop, out)
    overlay._send("pub", "B1", Publish("p1", parse_publication("[class,t],[g,between]")))
    overlay.queue.rotate(1)  # it reaches B1 before anything B3 answers
    overlay.run()
    assert overlay.clients["sub"].take() == ["[class,t],[g,between]"]
    for router in overlay.routers.values():
        assert router.status()["stand_ins"] == router.status()["tooks_held_back"] == 0
    assert not any("~stand-in~" in sub_id for r in overlay.routers.values() for sub_id in r.tables.prt)
    assert not overlay.routers["B1"].custody.channels["B2"].held  # B2's Took came in the end


def test_a_neighbour_that_goes_away_before_it_took_an_advertisement_releases_the_took_at_once() -> None:
    """B2 passed B1's advertisement on to B3, which crashed before taking it. B2 does not wait
    ANSWER_WAIT: its stand-in for B3 goes to B1, then its Took, so B1 holds nothing for B2 while
    B3 is away, and what B1 routes meanwhile reaches B3's subscriber once B3 is back."""
    overlay = Overlay.line(3, session_grace=600)
    overlay.add_client("sub", "B3").subscribe("[class,eq,t]")
    overlay.add_client("pub", "B1")
    overlay._send("pub", "B1", Advertise("a1", parse_filter("[class,eq,t],[g,isPresent,'']")))
    step(overlay, lambda target, message: target == "B2" and isinstance(message, Carry))
    assert overlay.routers["B2"].status()["tooks_held_back"] == 1
    overlay.crash("B3")  # the advertisement was on its way to it: lost, B2 holds it
    b1 = overlay.routers["B1"]
    assert not b1.custody.channels["B2"].held and overlay.routers["B2"].status()["tooks_held_back"] == 0
    assert any("~stand-in~B3~" in sub_id for sub_id in b1.tables.prt)
    overlay.clients["pub"].publish("[class,t],[g,meanwhile]")
    overlay.advance(5)
    overlay.recover("B3")
    assert overlay.clients["sub"].take() == ["[class,t],[g,meanwhile]"]


def test_a_neighbour_that_takes_nothing_for_a_while_gets_its_stand_in_sent_upstream() -> None:
    """B3's link stays up but it takes nothing (a full disk holds all it would send): B2's stand-in
    for it cannot hold back B2's Took to B1 for ever, or B1 would hold everything for B2 in turn.
    After ANSWER_WAIT it goes to B1 ahead of the Took, so what B1 routes next still reaches B2,
    held there for B3 until B3 takes it."""
    overlay = Overlay.line(3, session_grace=600)
    overlay.add_client("sub", "B3").subscribe("[class,eq,t]")
    disk_has_room = withheld(overlay, lambda source, target, message: source == "B3")
    pub = overlay.add_client("pub", "B1")
    pub.advertise("[class,eq,t],[g,isPresent,'']")
    b2 = overlay.routers["B2"]
    assert b2.status()["tooks_held_back"] == 1 and b2.counters["stand_ins.sent_on"] == 0
    pub.publish("[class,t],[g,early]")  # under B1's stand-in for B2, then B2's for B3
    overlay.advance(ANSWER_WAIT)
    assert b2.counters["stand_ins.overdue"] == 1 and b2.status()["tooks_held_back"] == 0
    assert not overlay.routers["B1"].custody.channels["B2"].held  # B2 took all B1 sent it
    assert any("~stand-in~B3~" in sub_id for sub_id in overlay.routers["B1"].tables.prt)
    assert not any("~stand-in~B2~" in sub_id for sub_id in overlay.routers["B1"].tables.prt)  # B2 took
    pub.publish("[class,t],[g,late]")  # under B2's stand-in for B3, at B1 now
    disk_has_room()  # what B3 held goes, in order
    overlay.run()
    assert overlay.clients["sub"].take() == ["[class,t],[g,early]", "[class,t],[g,late]"]
    for router in overlay.routers.values():
        assert router.status()["stand_ins"] == 0, router.id


def test_a_neighbour_back_after_it_was_forgotten_gets_a_stand_in_sent_upstream() -> None:
    """B3 crashed and stayed away past B2's grace period: B2 forgot it, and B1 the subscription of
    B3's subscriber. Back from its log, B3 gets B2's tables, the advertisement among them. That
    answers no carry whose Took B2 could hold back, and B1's stand-in for B2 ended long ago, so
    B2's stand-in for B3 goes to B1: what B1 routes before B3's answer is back still reaches the
    subscriber."""
    overlay = Overlay.line(3, session_grace=600)
    sub = overlay.add_client("sub", "B3")
    sub.subscribe("[class,eq,t]")
    pub = overlay.add_client("pub", "B1")
    pub.advertise("[class,eq,t],[g,isPresent,'']")
    overlay.crash("B3")
    overlay.advance(601)
    assert overlay.routers["B2"].counters["sessions_expired"] == 1 and not overlay.routers["B1"].tables.prt
    answers_arrive = withheld(  # what B3 sends B2 but its hello: a round trip late
        overlay, lambda s, t, m: (s, t) == ("B3", "B2") and type(m) is not LinkUp
    )
    overlay.recover("B3")
    pub.publish("[class,t],[g,window]")
    answers_arrive()
    overlay.run()
    pub.publish("[class,t],[g,after]")
    assert sub.take() == ["[class,t],[g,window]", "[class,t],[g,after]"]
    for router in overlay.routers.values():
        assert router.status()["stand_ins"] == 0, router.id


def test_an_advertisement_a_withdrawal_uncovers_costs_no_stand_in_upstream() -> None:
    """Advertisement covering: B2 held B3's narrow advertisement back from B1, as its client's
    broad one covered it. When the broad one goes, B2 sends B1 the narrow one, answering no carry
    of it; B1's subscription, drawn by the broad one, is at B2 and B3 already, so B2's stand-in
    for B1 stays at B2 (no Subscribe and Unsubscribe to B3), and nothing is lost."""
    overlay = Overlay.line(3, session_grace=600, advertisement_covering=True)
    sub = overlay.add_client("sub", "B1")
    sub.subscribe("[class,eq,t]")
    broad = overlay.add_client("c1", "B2")
    covering = broad.advertise("[class,eq,t],[k,>,0]")
    narrow = overlay.add_client("c2", "B3")
    narrow.advertise("[class,eq,t],[k,=,1]")
    assert list(overlay.routers["B1"].tables.srt) == [covering]
    overlay.reset_traffic()
    broad.unadvertise(covering)
    assert overlay.messages("Advertise") == 1 and overlay.messages("Subscribe") == 0
    assert overlay.messages("Unsubscribe") == 0 and overlay.routers["B2"].counters["stand_ins.sent_on"] == 0
    narrow.publish("[class,t],[k,1]")
    assert sub.take() == ["[class,t],[k,1]"]


@pytest.mark.parametrize("covering", ["lazy", "active"])
def test_a_stand_in_that_covered_a_subscription_is_withdrawn_after_it_is_sent(covering: str) -> None:
    """B2's stand-in for B3, away when the advertisement came, went to B1 and covers the
    subscription B3 answers with once back, which B2 so holds back. When the stand-in ends, B1
    must have that subscription before it loses the stand-in: a publication it routed between
    the two would match no one."""
    overlay = Overlay.line(3, covering=covering, session_grace=600)
    overlay.add_client("sub", "B3").subscribe("[class,eq,t],[g,eq,'x']")
    overlay.disconnect("B2", "B3")
    sent: list[str] = []
    send = overlay._send

    def recorded(source: str, target: str, message: Message) -> None:
        if (source, target) == ("B2", "B1") and isinstance(message, Carry):
            sent.append(f"{type(message.message).__name__} {getattr(message.message, 'id', '')}")
        send(source, target, message)

    overlay._send = recorded  # type: ignore[method-assign]
    overlay.add_client("pub", "B1").advertise("[class,eq,t],[g,isPresent,'']")
    overlay.connect("B2", "B3")
    stand_in = "Subscribe B2~stand-in~B3~B1/pub/1"
    real = next(line for line in sent if line.startswith("Subscribe B3/sub/"))
    assert sent == [stand_in, real, stand_in.replace("Subscribe", "Unsubscribe")]


@pytest.mark.parametrize("signed", [False, True])
@pytest.mark.parametrize("prompt_tooks", [True, False])
@pytest.mark.parametrize("shape", ["line", "star"])
@pytest.mark.parametrize("seed", range(10))
def test_publishers_that_publish_at_once_under_crashes_reach_every_subscriber(
    seed: int, shape: str, prompt_tooks: bool, signed: bool
) -> None:
    """Jepsen in miniature for stand-ins: subscribers only at two brokers, each waiting for a class
    no one has advertised yet; then publishers appear at random brokers and publish right after
    their advertisement is acknowledged, while brokers crash and come back from their logs and
    links carry messages in random order. Every subscriber gets every publication exactly once:
    nothing falls in the window before the subscriptions beyond a broker are back (with Tooks in
    their place, a Took that did not wait loses some in most runs). ``signed``: the advertisements
    name an attribute the publications leave out (stand-ins that asked for it lost most)."""
    rng = random.Random(seed)
    options = {"session_grace": 600, "interleave": rng, "prompt_tooks": prompt_tooks}
    overlay = Overlay.line(4, **options) if shape == "line" else Overlay.star(3, **options)
    brokers = sorted(overlay.routers)
    ends = ["B1", "B4"] if shape == "line" else ["B2", "B3"]  # none at a broker between them
    subscribers = [overlay.add_client(f"s{b}", b) for b in ends]
    for subscriber in subscribers:
        for p in range(12):
            subscriber.subscribe(f"[class,eq,n{p}]")
    overlay.run()
    crashed: list[str] = []
    published = 0
    for p in range(12):
        at = rng.choice([b for b in brokers if b not in crashed])
        publisher = overlay.add_client(f"p{p}", at)
        publisher.advertise(f"[class,eq,n{p}],[k,isPresent,0]" + (",[sig,isPresent,'']" if signed else ""))
        for k in range(rng.randint(1, 5)):
            publisher.publish(f"[class,n{p}],[k,{k}]")
            published += 1
            fault = rng.random()
            others = [b for b in brokers if b != at and b not in crashed]
            if fault < 0.1 and not crashed and others:
                crashed.append(rng.choice(others))
                overlay.crash(crashed[-1])
            elif fault < 0.25 and crashed:
                overlay.advance(rng.uniform(0.5, 5))
                overlay.recover(crashed.pop())
    if crashed:
        overlay.advance(1)
        overlay.recover(crashed.pop())
    overlay.run()
    for subscriber in subscribers:
        keys = [(str(d.publication["class"]), d.publication["k"]) for d in subscriber.deliveries]
        assert len(keys) == len(set(keys)), f"{subscriber.name} got duplicates"
        assert len(keys) == published, f"{subscriber.name} lost {published - len(keys)}"
