"""Crash points of the quality-of-service features in the simulated overlay: a broker that keeps
a write-ahead log killed (``Overlay.crash``: all it handled is in its log, what it had not sent
yet is lost with the process) and restarted from its log (``Overlay.recover``), at the moments
that matter to retained publications, priority backlogs and leases. And what floods of cancels and
renewals, and retained publications cancelled in a loop, cost a router's memory."""

from __future__ import annotations

import random

import pytest

from broker.language import Publication, parse_filter, parse_publication
from broker.messages import (
    Advertise,
    Cancel,
    Deliver,
    LinkDown,
    LinkUp,
    Publish,
    Pull,
    Qos,
    Renew,
    Subscribe,
    Took,
)
from broker.routing import leases, retained
from broker.routing import router as router_module
from broker.routing.backlog import WINDOW
from broker.routing.router import Router
from broker.sim import Overlay, SimClient
from tests.routing.test_leases import SUB
from tests.routing.test_leases import wired as leased

ALERT = "[class,eq,ALERT],[job,isPresent,''],[level,isPresent,0]"
LOAD = "[class,ALERT],[job,load],[level,2]"


def taken(client: SimClient) -> list[Deliver]:
    got, client.deliveries = client.deliveries, []
    return got


def handled_then_killed(overlay: Overlay, sender: str, broker: str, message: object) -> None:
    """``broker`` handles ``message`` from ``sender`` (and logs it, as after its commit), then is
    killed before anything it answered leaves: its outputs are lost with the process."""
    overlay._send(sender, broker, message)  # type: ignore[arg-type]
    overlay.interleave = random.Random(0)  # run() stops as soon as asked: after this one input
    overlay.run(lambda: not any(item[:2] == (sender, broker) for item in overlay.queue))
    overlay.interleave = None
    assert any(item[0] == broker for item in overlay.queue)  # its answers had not left
    overlay.crash(broker)


@pytest.mark.parametrize("early", [False, True], ids=["no-subscriber", "live-subscriber"])
def test_a_retained_publication_kept_just_before_a_crash_reaches_a_later_subscriber_once(early: bool) -> None:
    """B1 keeps a retained publication and is killed before its advertisement of it (and, with a
    live subscriber at B2, the publication itself) left for B2. Back from its log, B1 sends B2
    what it held for it; a subscriber that comes later at B2 gets the publication once, and a
    live one gets it once too (from custody's resend; the retained answer to the later
    subscription goes to that subscription alone)."""
    overlay = Overlay.line(2, session_grace=600)
    agent = overlay.add_client("agent", "B1")
    agent.advertise(ALERT)
    live = overlay.add_client("live", "B2") if early else None
    if live is not None:
        live.subscribe("[class,eq,ALERT]")
    publish = Publish("9", Publication("ALERT", {"job": "load", "level": 2}), qos=Qos(retain=True, mid="a1"))
    handled_then_killed(overlay, "agent", "B1", publish)
    assert not any(k.endswith("#retained") for k in overlay.routers["B2"].tables.srt)
    overlay.recover("B1")
    assert next(iter(overlay.routers["B1"].retention.kept)).startswith("B1/agent/9@")
    later = overlay.add_client("later", "B2")
    later.subscribe("[class,eq,ALERT],[level,>,1]")
    assert later.take() == [LOAD]
    if live is not None:
        assert live.take() == [LOAD]
    overlay.advance(5)
    assert later.take() == [] and (live is None or live.take() == [])
    again = overlay.add_client("again", "B2")  # its equal subscription: answered from B2's copy
    again.subscribe("[class,eq,ALERT],[level,>,1]")
    assert again.take() == [LOAD]


def test_a_cancel_handled_just_before_a_crash_still_reaches_every_copy() -> None:
    """The publisher cancels its retained publication at B2; B2 takes the cancel (in its log)
    and is killed before it floods it on. Back from its log, B2 sends it on (custody held it):
    the keeper B1 drops the publication, and a later subscriber anywhere gets nothing."""
    overlay = Overlay.line(3, session_grace=600)
    agent = overlay.add_client("agent", "B1")
    agent.advertise(ALERT)
    agent.publish(LOAD, Qos(retain=True, mid="a1"))
    overlay.remove_client("agent")
    roaming = overlay.add_client("agent:2", "B2")  # the same identity, at another broker
    handled_then_killed(overlay, "agent:2", "B2", Cancel("c", "a1"))
    overlay.recover("B2")
    assert overlay.routers["B1"].counters["retained.cancelled"] == 1
    assert all(not r.retention.kept for r in overlay.routers.values())
    for broker in ("B1", "B3"):
        later = overlay.add_client(f"later{broker}", broker)
        later.subscribe("[class,eq,ALERT]")
        assert later.take() == []
    assert roaming.refusals == []


def test_a_message_id_routed_just_before_a_crash_is_not_routed_again_by_another_process() -> None:
    """The alarm publishes message id ``a1``; its broker B1 logs it and is killed before the
    publication left. Back from its log, B1 sends it on once, and when a second process of
    the same publisher, and the first after its restart without an outbox, publish ``a1`` again,
    B1 answers each with the first's id: the subscriber at B2 has it once."""
    overlay = Overlay.line(2, session_grace=600)
    alarm = overlay.add_client("alarm:1", "B1")
    alarm.advertise(ALERT)
    watcher = overlay.add_client("watcher", "B2")
    watcher.subscribe("[class,eq,ALERT]")
    handled_then_killed(overlay, "alarm:1", "B1", Publish("9", parse_publication(LOAD), qos=Qos(mid="a1")))
    overlay.recover("B1")
    assert watcher.take() == [LOAD]
    [first] = overlay.routers["B1"].publishers.mids.values()
    second = overlay.add_client("alarm:2", "B1")
    second.advertise(ALERT)
    assert second.publish(LOAD, Qos(mid="a1")) == first[0]
    overlay.remove_client("alarm:1")
    restarted = overlay.add_client("alarm:1", "B1")  # a new process: it counts from 1 again
    restarted.advertise(ALERT)
    assert restarted.publish(LOAD, Qos(mid="a1")) == first[0]
    overlay.advance(5)
    assert watcher.take() == []
    assert overlay.routers["B1"].counters["dropped.duplicate_mid"] == 2


def test_an_away_subscriber_s_priority_backlog_survives_a_crash_urgent_first_after_the_window() -> None:
    """A subscriber is away while 300 ordinary publications and then an urgent one (priority 9)
    are queued for it: a window of them has its seqs, the rest waits by priority. Its broker is
    killed and restarted from its log; the subscriber comes back. It gets every publication
    exactly once: the window first (sent again in seq order), then the urgent one, then the
    rest in order."""
    overlay = Overlay.line(1, session_grace=600)
    pub = overlay.add_client("pub", "B1")
    pub.advertise("[class,eq,t],[n,>,-1]")
    sub = overlay.add_client("sub", "B1")
    sub.subscribe("[class,eq,t]")
    overlay.drop_client("sub")
    total = WINDOW + 44
    for n in range(total):
        pub.publish(Publication("t", {"n": n}), Qos(priority=1))
    pub.publish(Publication("t", {"n": total}), Qos(priority=9))
    assert overlay.routers["B1"].custody.status()["waiting"] == total + 1 - WINDOW
    overlay.crash("B1")
    overlay.recover("B1")  # its clients reconnect: ``sub`` resumes from the last seq it took (none)
    got = [int(d.publication["n"]) for d in sub.deliveries]  # type: ignore[arg-type]
    assert got == [*range(WINDOW), total, *range(WINDOW, total)]
    assert overlay.routers["B1"].custody.status()["held"] == 0


def test_a_crash_after_part_of_the_window_was_taken_sends_the_rest_once() -> None:
    """A backlog of two windows and more, and the subscriber took half the window before it went
    away (which made room for as many from the backlog) and its broker was killed: back, it
    gets what had seqs and was not taken, the urgent one, then the rest, each once, in order."""
    overlay = Overlay.line(1, session_grace=600)
    pub = overlay.add_client("pub", "B1")
    pub.advertise("[class,eq,t],[n,>,-1]")
    sub = overlay.add_client("sub", "B1")
    sub.subscribe("[class,eq,t]")
    sub.taking = False  # its consumer hangs: deliveries arrive and are not taken
    total = 2 * WINDOW + 44
    for n in range(total):
        pub.publish(Publication("t", {"n": n}), Qos(priority=1))
    assert len(sub.deliveries) == WINDOW
    half = WINDOW // 2
    overlay._send("sub", "B1", Took(half))
    overlay.run()
    sub.took = half  # what it took: its hello says so
    overlay.drop_client("sub")
    pub.publish(Publication("t", {"n": total}), Qos(priority=9))
    overlay.crash("B1")
    sub.deliveries.clear()
    sub.taking = True
    overlay.recover("B1")
    got = [int(d.publication["n"]) for d in sub.deliveries]  # type: ignore[arg-type]
    # before it went: seqs 1..WINDOW carried, half taken; the Took made room for ``half`` more
    # (the oldest first among equals): those had seqs too and go again in seq order
    assert got[:WINDOW] == list(range(half, WINDOW + half))
    assert got[WINDOW] == total
    assert got[WINDOW + 1 :] == list(range(WINDOW + half, total))


def test_a_lease_that_ran_out_while_its_broker_was_down_ends_at_its_restart() -> None:
    """A subscription leased for 30 s, renewed at 10 s; its broker is killed at 20 s and is down
    until 60 s. Its lease ran out at 40 s: the restarted broker ends it at once (counted), not 30
    s after the restart nor never, and routes nothing more to it. A lease still running at the
    restart goes on until its own deadline."""
    overlay = Overlay.line(1, session_grace=600)
    pub = overlay.add_client("pub", "B1")
    pub.advertise("[class,eq,t],[n,>,-1]")
    sub = overlay.add_client("sub", "B1")
    for ref, lease in (("short", 30.0), ("long", 3600.0)):
        overlay._send("sub", "B1", Subscribe(ref, parse_filter("[class,eq,t]"), lease=lease))
    overlay.run()
    short, long = (f"B1/sub/{ref}" for ref in ("short", "long"))
    overlay.advance(10)
    overlay._send("sub", "B1", Renew((short, long)))
    overlay.run()
    overlay.advance(10)
    overlay.crash("B1")
    overlay.now += 40  # down 40 s: no Tick, no input
    overlay.recover("B1")
    router = overlay.routers["B1"]
    assert router.counters["leases.expired"] == 1
    assert short not in router.tables.prt and long in router.tables.prt
    # its client was not linked when it ended (the restart dropped every link), and a Refuse
    # is an answer, not held for anyone: a client coming back makes its live subscriptions
    # again (``broker.client``), so one whose lease ended is made anew
    assert sub.refusals == []
    pub.publish(Publication("t", {"n": 1}))
    assert [d.subscriptions for d in sub.deliveries] == [(long,)]
    assert router.next_expiry() == pytest.approx(overlay.now - 40 - 10 + 3600)


def test_a_flood_of_cancels_does_not_grow_a_router_s_memory_without_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each cancel's id is remembered, so that one coming round again is dropped; like the
    publications' ids, only the latest ``SEEN_PUBLICATIONS`` are. A client (or a neighbour) that
    floods cancels of nothing costs the broker a bounded memory, and its snapshot with it."""
    monkeypatch.setattr(router_module, "SEEN_PUBLICATIONS", 100)
    router = Router("B1")
    router.handle(LinkUp(False), "mallory", 0.0)
    router.handle(LinkUp(True), "B2", 0.0)
    for n in range(1_000):
        router.handle(Cancel(f"c{n}", "a1"), "mallory", 1.0)
        router.handle(Cancel(f"B9/x/{n}", "a1", by="x"), "B2", 1.0)
    assert len(router.seen) == 100
    assert len(router.snapshot()["seen"]) == 100
    assert router.counters["in.Cancel"] == 2_000
    out = router.handle(Cancel("B9/x/999", "a1", by="x"), "B2", 2.0)  # among the latest: a copy
    assert out == [] and router.counters["dropped.duplicate"] == 1


def test_renewals_in_a_loop_do_not_grow_a_router_s_memory_without_bound() -> None:
    """A client renews its day-long lease in a loop, each ``Renew`` naming it 10,000 times: the
    deadlines the router keeps stay bounded (a few per lease held, and a constant), and the
    lease still ends on time after the last renewal."""
    router = leased(86400.0)
    for second in range(1, 31):
        router.handle(Renew(tuple([SUB] * 10_000)), "sub", float(second))
    assert len(router.leases.expiring) <= 2 * len(router.leases.held) + leases.REINDEX_AT
    assert router.next_expiry() == 30.0 + 86400.0
    router.handle(LinkUp(False), "nudge", 30.0 + 86400.0)
    assert router.counters["leases.expired"] == 1 and SUB not in router.tables.prt


def test_retained_publications_published_and_cancelled_in_a_loop_leave_no_growing_trace() -> None:
    """A client publishes a retained publication with a ttl of years and cancels it, again and
    again: its broker keeps none of them, and the expiries it keeps stay bounded; one kept
    among them still expires on time."""
    router = Router("B1")
    router.handle(LinkUp(False), "agent", 0.0)
    router.handle(Advertise("a", parse_filter("[class,eq,t],[n,>,-1]")), "agent", 0.0)
    years = 3e8
    for n in range(3_000):
        qos = Qos(retain=True, ttl=years, mid=f"m{n}")
        router.handle(Publish(f"p{n}", Publication("t", {"n": n}), qos=qos), "agent", 1.0)
        router.handle(Cancel(f"c{n}", f"m{n}"), "agent", 1.0)
    router.handle(Publish("last", Publication("t", {"n": 0}), qos=Qos(retain=True, ttl=10.0)), "agent", 2.0)
    assert len(router.retention.kept) == 1
    assert len(router.retention.expiring) <= 2 * len(router.retention.kept) + retained.REINDEX_AT
    assert router.next_expiry() == 12.0
    router.handle(LinkUp(False), "nudge", 12.0)
    assert router.counters["retained.expired"] == 1 and not router.retention.kept


def test_a_pulling_subscriber_s_credits_survive_its_broker_s_crash() -> None:
    """A subscriber that pulls asked for 3 and took none; 10 publications match. Its broker is
    killed and restarted from its log: the subscriber, back, is sent those 3 again and no more
    until it asks, and then the rest, each once, in order."""
    overlay = Overlay.line(1, session_grace=600)
    pub = overlay.add_client("pub", "B1")
    pub.advertise("[class,eq,t],[n,>,-1]")
    sub = overlay.add_client("sub", "B1")
    sub.subscribe("[class,eq,t]")
    sub.taking = False
    overlay._send("sub", "B1", Pull(3))
    overlay.run()
    for n in range(10):
        pub.publish(Publication("t", {"n": n}))
    assert [d.publication["n"] for d in taken(sub)] == [0, 1, 2]
    overlay.crash("B1")
    sub.taking = True
    overlay.recover("B1")
    assert [d.publication["n"] for d in taken(sub)] == [0, 1, 2]
    overlay._send("sub", "B1", Pull(100))
    overlay.run()
    assert [d.publication["n"] for d in taken(sub)] == list(range(3, 10))
    overlay._send("sub", "B1", Pull(None))
    overlay.run()
    assert taken(sub) == []


def test_the_leases_of_a_session_that_ended_end_with_it() -> None:
    """``Leases.end``'s docstring: a lease ends when its subscription goes, withdrawn by its
    client or with its session. A client that subscribes with a day's lease and leaves, again
    and again, would otherwise leave a lease per session in the router's state (its status,
    snapshots and log) for a day."""
    router = Router("B1", session_grace=0)
    for n in range(100):
        router.handle(LinkUp(False), "sub", float(n))
        router.handle(Subscribe(f"s{n}", parse_filter("[class,eq,t]"), lease=86400), "sub", float(n))
        router.handle(LinkDown(), "sub", float(n))
    assert router.status()["subscriptions"] == 0
    assert router.status()["leases"] == 0


def test_a_retained_copy_from_away_from_its_keeper_is_handed_on_only_if_advertised_from_there() -> None:
    """Star B1 (B2, B3, B4): the keeper is B2; B3 keeps a copy (a subscriber there had the
    publication) and has a publisher of other ALERTs. A subscription made later at B4 goes
    from B1 to both B2 and B3, and both answer; B3's answer fits no advertisement from B3's
    side, so B1 drops it (as it would a publication B3 forwarded) and the subscriber is sent
    the publication once, by way of its keeper."""
    overlay = Overlay.star(3)
    overlay.add_client("agent", "B2").advertise(ALERT)
    overlay.add_client("other", "B3").advertise("[class,eq,ALERT],[job,eq,'other'],[level,>,0]")
    there = overlay.add_client("there", "B3")
    there.subscribe("[class,eq,ALERT]")
    overlay.clients["agent"].publish(LOAD, Qos(retain=True))
    assert there.take() == [LOAD]
    late = overlay.add_client("late", "B4")
    late.subscribe("[class,eq,ALERT]")
    assert late.take() == [LOAD]
    assert overlay.routers["B1"].counters["dropped.nonconforming"] == 1
