"""A publication's time to live in the router: fixed to an expiry at the first broker, never
delivered or forwarded after it, and taken out of what custody holds the moment it passes, in the
middle of a queue as at its head, counted, and across a restart from the router's snapshot."""

from __future__ import annotations

from broker.language import Publication, parse_filter
from broker.messages import Advertise, Carry, Deliver, LinkDown, LinkUp, Publish, Qos, Refuse, Subscribe, Took
from broker.routing import custody
from broker.routing.router import Router


def wired(neighbour: bool = False) -> Router:
    """B1 with a publisher ``pub`` of class ``t`` and a subscriber ``sub`` (its session kept an
    hour when its link drops), and a neighbour B2 if asked."""
    router = Router("B1", session_grace=3600)
    for hop in ("pub", "sub"):
        router.handle(LinkUp(False), hop, 1.0)
    if neighbour:
        router.handle(LinkUp(True, epoch="B2-1"), "B2", 1.0)
    router.handle(Advertise("a", parse_filter("[class,eq,t],[n,>,-1]")), "pub", 1.0)
    router.handle(Subscribe("s", parse_filter("[class,eq,t]")), "sub", 1.0)
    return router


def published(router: Router, n: int, now: float, ttl: float | None = None) -> list[object]:
    qos = Qos(ttl=ttl) if ttl else Qos()
    out = router.handle(Publish(f"{n}@s", Publication("t", {"n": n}), qos=qos), "pub", now)
    return [getattr(m, "message", m) for _, m in out]


def test_the_edge_broker_fixes_the_expiry_on_its_clock_and_the_delivery_carries_it() -> None:
    router = wired()
    (_, delivery) = published(router, 1, now=100.0, ttl=30.0)  # its Ack, its Deliver
    assert isinstance(delivery, Deliver) and delivery.qos == Qos(expires=130.0)


def test_a_client_cannot_set_the_expiry_itself() -> None:
    router = wired()
    out = router.handle(Publish("1@s", Publication("t", {"n": 1}), qos=Qos(expires=9e9)), "pub", 100.0)
    assert [type(m) for _, m in out] == [Refuse]
    assert "the broker sets when it expires" in out[0][1].reason  # type: ignore[union-attr]


def test_an_expired_publication_from_a_neighbour_is_dropped_and_counted() -> None:
    router = wired(neighbour=True)
    late = Publish("B2/p/1@s", Publication("t", {"n": 1}), qos=Qos(expires=150.0))
    router.handle(Advertise("B2/a", parse_filter("[class,eq,t],[n,>,-1]")), "B2", 1.0)
    out = router.handle(Carry(1, late), "B2", 150.0)
    assert [type(m).__name__ for _, m in out] == ["Took"]  # taken, and dropped
    assert router.counters["dropped.expired"] == 1 and router.counters["delivered"] == 0


def test_what_expires_while_held_for_an_away_subscriber_goes_at_once_wherever_it_is_queued() -> None:
    """Three publications held for a subscriber that is away: the middle one, with the shortest
    life, goes when its time passes (not when it reaches the head); the others are sent when the
    subscriber is back, and a restart from the snapshot keeps expiring."""
    router = wired()
    router.handle(LinkDown(), "sub", 2.0)
    published(router, 1, now=10.0)
    published(router, 2, now=10.0, ttl=5.0)
    published(router, 3, now=10.0, ttl=500.0)
    assert router.custody.status()["held_for_away"] == 3
    router.handle(LinkDown(), "nobody", 15.0)  # any input: the router's clock passes 15
    assert router.counters["expired.held"] == 1 and router.custody.status()["held_for_away"] == 2
    restored = Router.restore(router.snapshot())
    restored.handle(LinkDown(), "nobody", 510.0)
    assert restored.counters["expired.held"] == 2
    back = restored.handle(LinkUp(False, resume=0), "sub", 511.0)
    assert [m.message.publication["n"] for _, m in back if isinstance(m, Carry)] == [1]  # type: ignore[union-attr]


def test_the_expiries_of_what_was_taken_do_not_pile_up() -> None:
    """A subscriber takes each delivery as it comes: the entries of their expiries are dropped
    from time to time, so they stay within twice what is held, or the first thousand."""
    router = wired()
    for n in range(1, 5001):
        published(router, n, now=10.0, ttl=3600.0)
        router.handle(Took(n), "sub", 10.0)
        assert len(router.custody.expiring) <= custody.REINDEX_AT + 1
    assert router.custody.status()["held"] == 0 and router.next_expiry() is not None
