"""Retained publications in the simulated overlay: kept by their publisher's edge broker and sent
to every matching subscription made later, wherever it is, once; until they expire or are
cancelled as their policy allows; across a crash of the broker that keeps them."""

from __future__ import annotations

import pytest

from broker.language import Publication, parse_filter
from broker.messages import CANCEL_SKEW, Advertise, Cancel, LinkUp, Publish, Qos
from broker.routing.retained import KEEPER
from broker.routing.router import Router
from broker.sim import Overlay

ALERT = "[class,eq,ALERT],[job,isPresent,''],[level,isPresent,0]"


def line(**options: object) -> Overlay:
    """B1 - B2 - B3, an agent ``agent`` at B1 that may publish alerts."""
    overlay = Overlay.line(3, **options)
    overlay.add_client("agent", "B1").advertise(ALERT)
    return overlay


def test_a_subscriber_that_comes_later_anywhere_gets_the_retained_publication_once() -> None:
    overlay = line()
    early = overlay.add_client("early", "B3")
    early.subscribe("[class,eq,ALERT]")
    overlay.clients["agent"].publish("[class,ALERT],[job,load],[level,2]", Qos(retain=True, mid="a1"))
    overlay.clients["agent"].publish("[class,ALERT],[job,other],[level,1]")  # not retained
    assert len(early.take()) == 2
    for name, broker in (("later", "B3"), ("here", "B1"), ("middle", "B2")):
        client = overlay.add_client(name, broker)
        client.subscribe("[class,eq,ALERT],[level,>,1]")
        assert client.take() == ["[class,ALERT],[job,load],[level,2]"], name
        assert client.deliveries == [] and client.take() == []
    assert early.take() == []  # a subscriber that had it live does not get it again
    # from the keeper B1 to "later" (B1 -> B2 -> B3); "middle"'s subscription, equal to "later"'s,
    # went no further than B2, which answered it from the copy it kept when the publication passed
    assert overlay.messages("Retained") == 2


def test_it_stays_reachable_after_its_publisher_has_gone() -> None:
    overlay = line()
    overlay.clients["agent"].publish("[class,ALERT],[job,load],[level,2]", Qos(retain=True))
    overlay.remove_client("agent")  # its advertisement is withdrawn; the keeper's stays
    assert [e.hop for e in overlay.routers["B1"].tables.srt.values()] == [KEEPER]
    operator = overlay.add_client("operator", "B3")
    operator.subscribe("[class,eq,ALERT]")
    assert operator.take() == ["[class,ALERT],[job,load],[level,2]"]


def test_an_expired_one_is_sent_to_no_one_and_its_advertisement_goes() -> None:
    overlay = line()
    overlay.clients["agent"].publish("[class,ALERT],[job,load],[level,2]", Qos(retain=True, ttl=30))
    overlay.advance(31)
    overlay.add_client("nudge", "B1")  # any input: B1's clock passes the expiry
    assert overlay.routers["B1"].counters["retained.expired"] == 1
    assert all(not e.endswith("#retained") for r in overlay.routers.values() for e in r.tables.srt)
    late = overlay.add_client("late", "B3")
    late.subscribe("[class,eq,ALERT]")
    assert late.take() == []


def test_cancel_follows_the_policy_of_each_retained_publication() -> None:
    overlay = line()
    agent = overlay.clients["agent"]
    agent.publish("[class,ALERT],[job,mine],[level,1]", Qos(retain=True, mid="mine"))
    agent.publish("[class,ALERT],[job,ours],[level,1]", Qos(retain=True, mid="ours", cancel="any"))
    other = overlay.add_client("other", "B3")
    other.cancel("mine")  # not its publisher: refused where it is kept
    other.cancel("ours")  # anyone may
    keeper = overlay.routers["B1"]
    assert (keeper.counters["retained.cancel_refused"], keeper.counters["retained.cancelled"]) == (1, 1)
    first = overlay.add_client("first", "B2")
    first.subscribe("[class,eq,ALERT]")
    assert first.take() == ["[class,ALERT],[job,mine],[level,1]"]
    agent.cancel("mine")
    second = overlay.add_client("second", "B2")
    second.subscribe("[class,eq,ALERT]")
    assert second.take() == [] and keeper.status()["retained"] == 0


def test_the_keeper_keeps_them_through_a_crash() -> None:
    overlay = line()
    overlay.clients["agent"].publish("[class,ALERT],[job,load],[level,2]", Qos(retain=True))
    overlay.crash("B1")
    overlay.recover("B1")
    later = overlay.add_client("later", "B3")
    later.subscribe("[class,eq,ALERT]")
    assert later.take() == ["[class,ALERT],[job,load],[level,2]"]


@pytest.mark.parametrize(
    ("signed_at", "cancelled"),
    [
        (10000.0 - 3600, False),
        (10000.0 - CANCEL_SKEW - 1, False),
        (10000.0 - CANCEL_SKEW + 1, True),
        (10900.0, True),
    ],
)
def test_a_signed_cancel_ends_only_what_was_published_before_it_was_signed(
    signed_at: float, cancelled: bool
) -> None:
    """A signature says who cancels and when, not which publication: its publisher may use the
    message id again. So a signed cancel (the adapter checked it: the router takes it as it
    comes) ends a publication accepted before it was signed, within ``CANCEL_SKEW`` of clock
    skew, and a cancel signed an hour before the publication, which a broker that kept it could
    replay, ends nothing."""
    router = Router("B1")
    router.handle(LinkUp(False), "agent", 10000.0)
    router.handle(LinkUp(True), "B2", 10000.0)
    router.handle(Advertise("a", parse_filter(ALERT)), "agent", 10000.0)
    alert = Publication("ALERT", {"job": "load", "level": 2})
    router.handle(Publish("p", alert, qos=Qos(retain=True, mid="a1")), "agent", 10000.0)
    cancel = Cancel("B2/agent/c", "a1", "agent", at=signed_at, signer=b"cert", signature=b"sig")
    router.handle(cancel, "B2", 20000.0)
    assert router.counters["retained.cancelled" if cancelled else "retained.cancel_refused"] == 1
    assert (router.status()["retained"] == 0) is cancelled
