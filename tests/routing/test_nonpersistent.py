"""Non-persistent publications (``Qos.persistent=False``): routed like any other to whoever is
linked now, but bare (no custody seq, never held, never sent again), and leaving the router's
state as it was, so that a log without them replays to the same router."""

from __future__ import annotations

import itertools
from collections import deque
from enum import Enum
from typing import Any

import pytest

from broker.errors import RefusedError
from broker.language import Publication, parse_filter
from broker.messages import Advertise, Carry, Deliver, LinkDown, LinkUp, Publish, Qos, Subscribe
from broker.routing.router import Router, unlogged
from broker.sim import Overlay

BARE = Qos(persistent=False)


def chain() -> Overlay:
    """B1 - B2 - B3, a publisher on B1 and a subscriber on B3 (kept an hour when away)."""
    overlay = Overlay.line(3, session_grace=3600)
    pub = overlay.add_client("pub", "B1")
    sub = overlay.add_client("sub", "B3")
    pub.advertise("[class,eq,t],[n,>,-1]")
    sub.subscribe("[class,eq,t]")
    return overlay


def state(router: Router) -> Any:
    """A router's snapshot as plain values (its objects do not compare), but its counters (they
    count what it handled, logged or not), the tables' ``last_fit`` (a cache of the
    advertisement a hop's publication fitted last, tried first: the answer is the same) and the
    matcher (an index of ``prt``, which is compared; each match merges some of what adds left
    pending, and its arrays' spare room is uninitialised)."""
    snapshot = router.snapshot()
    del snapshot["counters"]
    tables = dict(snapshot.pop("tables"))
    del tables["last_fit"], tables["matcher"]
    return plain({**snapshot, **tables})


def plain(value: Any) -> Any:
    """``value`` made of what compares by value: containers, and objects as their fields."""
    if isinstance(value, str | int | float | bytes | bool | type(None) | Enum):
        return value
    if isinstance(value, dict):
        return [[repr(plain(k)), plain(v)] for k, v in value.items()]  # in order: OrderedDicts
    if isinstance(value, list | tuple | deque):
        return [type(value).__name__, [plain(v) for v in value]]
    if isinstance(value, set | frozenset):
        return sorted((plain(v) for v in value), key=repr)
    if isinstance(value, itertools.count):
        return repr(value)
    fields = getattr(value, "__dict__", None) or {
        name: getattr(value, name)
        for cls in type(value).__mro__
        for name in getattr(cls, "__slots__", ())
        if hasattr(value, name)
    }
    return [type(value).__name__, plain(fields)]


def test_a_non_persistent_publication_reaches_a_live_subscriber_across_a_chain_bare() -> None:
    overlay = chain()
    held = {b: [c.next_seq for c in r.custody.channels.values()] for b, r in overlay.routers.items()}
    before = {b: state(r) for b, r in overlay.routers.items()}
    overlay.reset_traffic()
    acks = overlay.acks
    overlay.clients["pub"].publish("[class,t],[n,1]", BARE)
    delivered = overlay.clients["sub"].deliveries
    assert [str(d.publication) for d in delivered] == ["[class,t],[n,1]"]
    assert delivered[0].qos == BARE
    assert overlay.messages("Publish") == 2 and overlay.acks == acks  # no Took: nothing was carried
    assert overlay.clients["sub"].took == 0  # the delivery came bare, outside custody
    after = {b: [c.next_seq for c in r.custody.channels.values()] for b, r in overlay.routers.items()}
    assert after == held  # no channel gave it a seq
    assert {b: state(r) for b, r in overlay.routers.items()} == before  # no seen, no mark, nothing


def test_it_is_not_held_for_a_subscriber_away_and_the_persistent_ones_around_it_are() -> None:
    overlay = chain()
    pub, sub = overlay.clients["pub"], overlay.clients["sub"]
    overlay.drop_client("sub")
    pub.publish("[class,t],[n,1]")
    pub.publish("[class,t],[n,2]", BARE)
    pub.publish("[class,t],[n,3]")
    assert overlay.routers["B3"].counters["dropped.nonpersistent"] == 1
    overlay.reconnect("sub")
    assert sub.received() == ["[class,t],[n,1]", "[class,t],[n,3]"]
    assert sub.took == 2  # the persistent ones took seqs 1 and 2: contiguous


def test_it_is_not_held_for_a_neighbour_away() -> None:
    overlay = chain()
    overlay.disconnect("B1", "B2")
    overlay.clients["pub"].publish("[class,t],[n,1]", BARE)
    assert overlay.routers["B1"].counters["dropped.nonpersistent"] == 1
    assert not overlay.routers["B1"].custody.channels["B2"].held
    overlay.connect("B1", "B2")
    assert overlay.clients["sub"].received() == []


@pytest.mark.parametrize("ordering", ["FIFO", "TOTAL"])
def test_a_stream_of_mixed_publications_arrives_in_order_and_states_match_one_without(ordering: str) -> None:
    """Two overlays given the same persistent publications, one with non-persistent ones between
    them: every router ends in the same state (seqs, seen, marks), and the subscriber of the
    first gets everything in the order published."""
    options: dict[str, Any] = {"session_grace": 3600, "ordering": ordering}
    if ordering == "TOTAL":
        options["parents"] = {"B2": "B1", "B3": "B2"}

    def run(mixed: bool) -> Overlay:
        overlay = Overlay.line(3, **options)
        pub = overlay.add_client("pub", "B1")
        sub = overlay.add_client("sub", "B3")
        pub.advertise("[class,eq,t],[n,>,-1]")
        sub.subscribe("[class,eq,t]")
        for n in range(1, 21):
            if n % 3:
                pub.publish(f"[class,t],[n,{n}]")
            elif mixed:
                pub.publish(f"[class,t],[n,{n}]", BARE)
            else:
                pub._ref()  # the same refs, so the same ids, for the others
        return overlay

    mixed, plain = run(True), run(False)
    assert [d.publication["n"] for d in mixed.clients["sub"].deliveries] == list(range(1, 21))
    assert [d.publication["n"] for d in plain.clients["sub"].deliveries] == [n for n in range(1, 21) if n % 3]
    for broker in ("B1", "B2", "B3"):
        assert state(mixed.routers[broker]) == state(plain.routers[broker])


def test_a_retained_non_persistent_publication_is_refused_at_its_edge_broker() -> None:
    overlay = chain()
    with pytest.raises(RefusedError, match="a retained publication must be persistent"):
        overlay.clients["pub"].publish("[class,t],[n,1]", Qos(retain=True, persistent=False))
    assert overlay.routers["B1"].counters["refused.retain_nonpersistent"] == 1
    assert overlay.clients["sub"].received() == []


def test_one_from_a_neighbour_that_asks_to_be_retained_is_routed_and_not_kept() -> None:
    router = Router("B2")
    router.handle(LinkUp(True, epoch="B1-1"), "B1", 1.0)
    router.handle(LinkUp(False), "sub", 1.0)
    router.handle(Carry(1, Advertise("B1/a", parse_filter("[class,eq,t],[n,>,-1]"))), "B1", 1.0)
    router.handle(Subscribe("s", parse_filter("[class,eq,t]")), "sub", 1.0)
    before = state(router)
    message = Publish("B1/p/1@x", Publication("t", {"n": 1}), qos=Qos(retain=True, persistent=False))
    out = router.handle(message, "B1", 2.0)
    assert [(hop, type(m)) for hop, m in out] == [("sub", Deliver)]
    assert router.counters["unretained.nonpersistent"] == 1 and state(router) == before


def test_it_feeds_no_composite_subscription() -> None:
    """Join state is part of the router's logged state: a non-persistent atom does not count."""
    overlay = Overlay.line(2)
    pub = overlay.add_client("pub", "B1")
    agent = overlay.add_client("agent", "B2")
    pub.advertise("[class,eq,A],[g,>,0]")
    pub.advertise("[class,eq,B],[g,>,0]")
    agent.subscribe_composite("{[class,eq,A],[g,=,$I$X]}&{[class,eq,B],[g,=,$I$X]}")
    pub.publish("[class,A],[g,1]", BARE)
    pub.publish("[class,B],[g,1]")
    assert agent.fired() == []
    assert sum(r.counters["unjoined.nonpersistent"] for r in overlay.routers.values()) == 1
    pub.publish("[class,A],[g,1]")
    assert len(agent.fired()) == 1


def test_time_made_due_waits_for_the_next_logged_input() -> None:
    """A session whose grace ran out ends at the next logged input (as a replay of the log
    would end it), not at a non-persistent publication."""
    router = Router("B1", session_grace=10)
    for hop in ("pub", "sub"):
        router.handle(LinkUp(False), hop, 1.0)
    router.handle(Advertise("a", parse_filter("[class,eq,t],[n,>,-1]")), "pub", 1.0)
    router.handle(Subscribe("s", parse_filter("[class,eq,t]")), "sub", 1.0)
    router.handle(LinkDown(), "sub", 2.0)
    message = Publish("1@x", Publication("t", {"n": 1}), ack=False, qos=BARE)
    assert unlogged(message) and not unlogged(Publish("2@x", Publication("t", {"n": 2})))
    router.handle(message, "pub", 100.0)
    assert "sub" in router.sessions.away and router.counters["dropped.nonpersistent"] == 1
