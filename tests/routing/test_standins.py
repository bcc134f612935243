"""Stand-in subscriptions: a publisher that fails over from a dead broker to a neighbour, or
that first advertises while a neighbour is away, loses nothing to the neighbour's subscribers.

B1 - B2 - B3 with a subscriber on B1. While B1 is down (crashed, kept for the grace period), a
publisher advertises on B2 or B3 and publishes at once: B1 has not yet had the advertisement, so
no subscription of B1 leads there; without a stand-in every publication is dropped as matching no
one (the edge-broker reliability scenario lost 18 Triggers so)."""

from __future__ import annotations

import pytest

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
    assert b2.status()["stand_ins"] == 0 and b2.counters["stand_ins.ended"] == 1
    assert not any("stand-in" in sub_id for r in overlay.routers.values() for sub_id in r.tables.prt)


def test_a_stand_in_ends_with_its_advertisement() -> None:
    overlay = overlay_with_b1_away()
    publisher = overlay.add_client("late", "B3")
    adv = publisher.advertise("[class,eq,t],[g,isPresent,'']")
    assert any("stand-in" in sub_id for sub_id in overlay.routers["B3"].tables.prt)  # went upstream
    publisher.unadvertise(adv)
    assert not any("stand-in" in s for r in overlay.routers.values() for s in r.tables.prt)
    assert overlay.routers["B2"].status()["stand_ins"] == 0


def test_a_stand_in_ends_with_the_session_of_the_neighbour_it_stood_in_for() -> None:
    overlay = overlay_with_b1_away()
    overlay.add_client("late", "B2").advertise("[class,eq,t],[g,isPresent,'']")
    overlay.advance(601)
    b2 = overlay.routers["B2"]
    assert b2.counters["sessions_expired"] == 1
    assert b2.status()["stand_ins"] == 0 and not any("stand-in" in s for s in b2.tables.prt)


def test_nobody_away_no_stand_in() -> None:
    overlay = Overlay.line(3, session_grace=600)
    overlay.add_client("sub", "B1").subscribe("[class,eq,t]")
    overlay.add_client("pub", "B3").advertise("[class,eq,t],[g,isPresent,'']")
    assert all(r.counters["stand_ins.made"] == 0 for r in overlay.routers.values())
