"""Durable client sessions in the simulated overlay: a client whose link drops keeps its entries
(and its composite subscriptions' join state) for a grace period, gets what matched meanwhile when
it comes back, and is withdrawn if it does not."""

from __future__ import annotations

import logging

import pytest

from broker.language import parse_composite, parse_filter
from broker.messages import CompositeSubscribe, Subscribe
from broker.sim import Overlay
from broker.sim.overlay import RefusedError

JOIN = "{[class,eq,a],[x,eq,$S$X]}&{[class,eq,b],[x,eq,$S$X]}"


def line(grace: float, client: str = "agent", at: str = "B2", **options: object) -> Overlay:
    """B1 - B2 - B3: a publisher of class ``a`` at B1, of ``b`` at B3, and ``client`` (an agent
    at B2 by default)."""
    overlay = Overlay.line(3, session_grace=grace, **options)
    overlay.add_client("pa", "B1").advertise("[class,eq,a],[x,isPresent,'']")
    overlay.add_client("pb", "B3").advertise("[class,eq,b],[x,isPresent,'']")
    overlay.add_client(client, at)
    return overlay


def test_an_agent_away_between_two_atoms_gets_the_firing_once_when_it_comes_back() -> None:
    overlay = line(grace=600)
    agent = overlay.clients["agent"]
    sub = agent.subscribe_composite(JOIN)
    plain = agent.subscribe("[class,eq,a]")
    overlay.clients["pa"].publish("[class,a],[x,p1]")
    assert agent.take() == ["[class,a],[x,p1]"] and agent.fired() == []
    overlay.drop_client("agent")
    overlay.clients["pa"].publish("[class,a],[x,p2]")
    overlay.clients["pb"].publish("[class,b],[x,p1]")  # the second atom, while the agent is away
    assert agent.take() == [] and agent.fired() == []
    assert overlay.routers["B2"].status()["sessions_waiting"] == 1
    overlay.advance(30)
    overlay.reconnect("agent")
    assert agent.take() == ["[class,a],[x,p2]"]
    assert [n.subscription for n in agent.notifications] == [sub]
    assert agent.fired() == [["[class,a],[x,p1]", "[class,b],[x,p1]"]]
    # its entries are still in place, with the same ids: live traffic follows the queue
    overlay.clients["pa"].publish("[class,a],[x,p3]")
    overlay.clients["pb"].publish("[class,b],[x,p3]")
    assert [d.subscriptions for d in agent.deliveries] == [(plain,)]
    assert agent.take() == ["[class,a],[x,p3]"]
    assert agent.fired() == [["[class,a],[x,p3]", "[class,b],[x,p3]"]]
    status = overlay.routers["B2"].status()
    assert status["sessions_waiting"] == 0 and status["counters"]["session_queued"] == 2
    assert status["counters"].get("sessions_expired", 0) == 0


def test_queued_messages_come_in_order_and_name_the_same_subscription() -> None:
    overlay = line(grace=600)
    agent = overlay.clients["agent"]
    sub = agent.subscribe("[class,eq,a]")
    overlay.drop_client("agent")
    for x in range(5):
        overlay.clients["pa"].publish(f"[class,a],[x,p{x}]")
    overlay.reconnect("agent")
    assert [d.subscriptions for d in agent.deliveries] == [(sub,)] * 5
    assert agent.take() == [f"[class,a],[x,p{x}]" for x in range(5)]


def test_with_no_grace_the_join_state_is_lost_as_before() -> None:
    overlay = line(grace=0)
    agent = overlay.clients["agent"]
    agent.subscribe_composite(JOIN)
    overlay.clients["pa"].publish("[class,a],[x,p1]")
    overlay.drop_client("agent")
    assert overlay.routers["B1"].status()["subscriptions"] == 0  # withdrawn at once
    overlay.clients["pb"].publish("[class,b],[x,p1]")
    overlay.reconnect("agent")
    assert agent.fired() == [] and agent.take() == []


@pytest.mark.parametrize("by_tick", [True, False])
def test_a_client_that_does_not_come_back_is_withdrawn_after_the_grace_period(by_tick: bool) -> None:
    overlay = line(grace=60)
    overlay.clients["agent"].subscribe("[class,eq,a]")
    overlay.clients["agent"].subscribe_composite(JOIN)
    before = overlay.routers["B1"].status()["subscriptions"]
    overlay.drop_client("agent")
    overlay.advance(59)
    assert overlay.routers["B1"].status()["subscriptions"] == before  # still kept
    if by_tick:
        overlay.advance(1)
    else:  # no tick: the next message the broker handles past the deadline expires it
        overlay.now += 1
        overlay.clients["pa"].publish("[class,a],[x,p1]")
    assert overlay.routers["B1"].status()["subscriptions"] == 0
    assert overlay.routers["B3"].status()["subscriptions"] == 0
    status = overlay.routers["B2"].status()
    assert status["sessions_waiting"] == 0 and status["counters"]["sessions_expired"] == 1
    assert all(r.status()["composite_subscriptions"] == 0 for r in overlay.routers.values())
    overlay.add_client("idle", "B2")
    overlay.drop_client("idle")  # owned nothing: no session kept for it
    assert overlay.routers["B2"].status()["sessions_waiting"] == 0
    overlay.reconnect("agent")  # too late: a new session with nothing in it
    overlay.clients["pa"].publish("[class,a],[x,p2]")
    assert overlay.clients["agent"].take() == []


def test_the_queue_is_bounded_and_every_drop_is_counted_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    """Counted each, logged in one line (the first for each peer, then once a minute with how many
    went unlogged): a client away for long must not write a line per publication."""
    overlay = line(grace=600, session_max_queued=2)
    agent = overlay.clients["agent"]
    agent.subscribe("[class,eq,a]")
    overlay.drop_client("agent")
    with caplog.at_level(logging.WARNING, "broker.routing.custody"):
        for x in range(5):
            overlay.clients["pa"].publish(f"[class,a],[x,p{x}]")
        overlay.advance(60)
        overlay.clients["pa"].publish("[class,a],[x,p5]")
    counters = overlay.routers["B2"].status()["counters"]
    assert counters["session_queued"] == 2 and counters["dropped.session_full"] == 4
    assert [r.getMessage() for r in caplog.records if r.name == "broker.routing.custody"] == [
        "the channel to agent is full (2 messages, about 134 bytes held): a Deliver is dropped"
        " (dropped.session_full)",
        "the channel to agent is full (2 messages, about 134 bytes held): a Deliver is dropped"
        " (dropped.session_full) (2 more not logged since the last)",
    ]
    overlay.reconnect("agent")
    assert agent.take() == ["[class,a],[x,p0]", "[class,a],[x,p1]"]


def test_what_a_full_channel_sends_unheld_is_counted_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    """A consumer that takes nothing: its channel fills while its link is up; what comes next is
    still sent, but not held (a reconnection would not send it again)."""
    overlay = line(grace=600, session_max_queued=2)
    agent = overlay.clients["agent"]
    agent.subscribe("[class,eq,a]")
    agent.taking = False
    with caplog.at_level(logging.WARNING, "broker.routing.custody"):
        for x in range(3):
            overlay.clients["pa"].publish(f"[class,a],[x,p{x}]")
    assert overlay.routers["B2"].counters["unheld.session_full"] == 1 and len(agent.take()) == 3
    assert [r.getMessage() for r in caplog.records] == [
        "the channel to agent is full (2 messages, about 134 bytes held): a Deliver goes unheld"
        " (not sent again if lost) (unheld.session_full)"
    ]


def test_a_request_re_sent_after_reconnection_is_acknowledged_with_its_id_and_not_routed_again() -> None:
    overlay = line(grace=600)
    agent = overlay.clients["agent"]
    sub = agent._request(Subscribe("s1", parse_filter("[class,eq,a]")), "s1")
    comp = agent._request(CompositeSubscribe("c1", parse_composite(JOIN)), "c1")
    overlay.drop_client("agent")
    overlay.reconnect("agent")
    overlay.reset_traffic()
    assert agent._request(Subscribe("s1", parse_filter("[class,eq,a]")), "s1") == sub
    assert agent._request(CompositeSubscribe("c1", parse_composite(JOIN)), "c1") == comp
    assert overlay.messages() == 0
    with pytest.raises(RefusedError, match="already in use"):
        agent._request(Subscribe("s1", parse_filter("[class,eq,b]")), "s1")
    with pytest.raises(RefusedError, match="already in use"):
        agent._request(CompositeSubscribe("c1", parse_composite(JOIN), parse_filter("[class,eq,c]")), "c1")
    overlay.clients["pa"].publish("[class,a],[x,p1]")
    assert agent.take() == ["[class,a],[x,p1]"]


def test_sessions_expire_each_at_its_own_deadline() -> None:
    overlay = line(grace=60)
    overlay.add_client("other", "B2")
    for name in ("agent", "other"):
        overlay.clients[name].subscribe(f"[class,eq,a],[x,eq,'{name}']")
    overlay.drop_client("agent")
    overlay.advance(30)
    overlay.drop_client("other")
    overlay.advance(30)
    assert overlay.routers["B1"].status()["subscriptions"] == 1  # the other's, 30 s to go
    overlay.advance(29)
    assert overlay.routers["B1"].status()["subscriptions"] == 1
    overlay.advance(1)
    assert overlay.routers["B1"].status()["subscriptions"] == 0
    assert overlay.routers["B2"].status()["counters"]["sessions_expired"] == 2
