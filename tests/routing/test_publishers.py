"""Publisher deduplication by one number per (client, session): a copy is dropped however many
publications came between, a publication that was not routed does not raise the mark, and the
marks are part of the router's state."""

from __future__ import annotations

import pytest

from broker.language import Publication, parse_filter
from broker.messages import Ack, Advertise, Deliver, LinkUp, Publish, Refuse, Subscribe
from broker.routing import publishers
from broker.routing import router as router_module
from broker.routing.router import Router


def wired() -> Router:
    """One broker, a publisher ``pub`` that advertised class ``t``, a subscriber ``sub`` to it."""
    router = Router("B1")
    for hop in ("pub", "sub"):
        router.handle(LinkUp(False), hop, 1.0)
    router.handle(Advertise("a", parse_filter("[class,eq,t],[n,>,-1]")), "pub", 1.0)
    router.handle(Subscribe("s", parse_filter("[class,eq,t]")), "sub", 1.0)
    return router


def publish(router: Router, ref: str, n: int = 1, now: float = 2.0, hop: str = "pub") -> list[str]:
    """What the router sent for the publication ``ref``: the kinds of message, and to whom."""
    out = router.handle(Publish(ref, Publication("t", {"n": n})), hop, now)
    return [f"{type(getattr(m, 'message', m)).__name__}>{target}" for target, m in out]


def test_a_copy_is_dropped_and_acknowledged_with_its_id_however_many_came_between(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The duplicate filter of recent ids is shrunk to 4: the mark alone recognises the copy of
    the first of ten publications."""
    monkeypatch.setattr(router_module, "SEEN_PUBLICATIONS", 4)
    router = wired()
    first = router.handle(Publish("1@s", Publication("t", {"n": 1})), "pub", 2.0)
    for number in range(2, 11):
        assert publish(router, f"{number}@s") == ["Ack>pub", "Deliver>sub"]
    again = router.handle(Publish("1@s", Publication("t", {"n": 1})), "pub", 3.0)
    assert again == [("pub", Ack("1@s", first[0][1].id))]  # type: ignore[union-attr]
    assert publish(router, "10@s") == ["Ack>pub"]
    assert router.counters["dropped.duplicate"] == 2
    assert publish(router, "11@s") == ["Ack>pub", "Deliver>sub"]
    assert router.status()["publishers"] == 1


def test_each_session_of_a_client_has_its_own_number() -> None:
    router = wired()
    assert publish(router, "5@s1") == ["Ack>pub", "Deliver>sub"]
    assert publish(router, "1@s2") == ["Ack>pub", "Deliver>sub"]  # a restarted client: counts anew
    assert publish(router, "5@s1") == ["Ack>pub"]
    assert sorted(router.publishers.marks) == [("pub", "s1"), ("pub", "s2")]


def test_a_publication_refused_does_not_raise_the_mark() -> None:
    """Refused (it fits no advertisement), it was not routed: sent again once it fits, it is."""
    router = wired()
    out = router.handle(Publish("3@s", Publication("other", {"n": 1})), "pub", 2.0)
    assert [type(m) for _, m in out] == [Refuse]
    router.handle(Advertise("b", parse_filter("[class,eq,other],[n,>,-1]")), "pub", 2.0)
    router.handle(Subscribe("s2", parse_filter("[class,eq,other]")), "sub", 2.0)
    out = router.handle(Publish("3@s", Publication("other", {"n": 1})), "pub", 3.0)
    assert [type(getattr(m, "message", m)) for _, m in out] == [Ack, Deliver]


def test_a_ref_without_a_session_of_the_client_is_recognised_by_the_recent_ids() -> None:
    router = wired()
    assert publish(router, "1") == ["Ack>pub", "Deliver>sub"]
    assert publish(router, "1") == ["Ack>pub"]
    assert router.publishers.marks == {}


def test_a_publisher_silent_for_a_week_is_forgotten_when_another_publishes() -> None:
    router = wired()
    router.handle(LinkUp(False), "pub2", 1.0)
    router.handle(Advertise("a2", parse_filter("[class,eq,t],[n,>,-1]")), "pub2", 1.0)
    publish(router, "1@old", now=10.0)
    publish(router, "1@busy", now=10.0 + publishers.KEPT, hop="pub2")
    assert ("pub", "old") in router.publishers.marks  # a week to the second: kept
    publish(router, "2@busy", now=11.0 + publishers.KEPT, hop="pub2")
    assert list(router.publishers.marks) == [("pub2", "busy")]


def test_the_marks_are_in_the_routers_state() -> None:
    router = wired()
    publish(router, "4@s")
    restored = Router.restore(router.snapshot())
    assert restored.publishers.marks == {("pub", "s"): (4, 2.0)}
    assert publish(restored, "4@s") == ["Ack>pub"]
