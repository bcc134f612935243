"""Publisher deduplication by one number per (client, session): a copy is dropped however many
publications came between, a publication that was not routed does not raise the mark, and the
marks are part of the router's state."""

from __future__ import annotations

import pytest

from broker.language import Publication, parse_filter
from broker.messages import Ack, Advertise, Deliver, LinkUp, Publish, Qos, Refuse, Subscribe
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


# message ids the publisher chose (Qos.mid): idempotent publishing --------------------------------


def publish_mid(
    router: Router, hop: str, ref: str, mid: str, now: float = 2.0, **qos: object
) -> tuple[list[str], str | None]:
    """What the router sent for ``ref`` published by ``hop`` under message id ``mid``, and the
    publication id its Ack named."""
    out = router.handle(Publish(ref, Publication("t", {"n": 1}), qos=Qos(mid=mid, **qos)), hop, now)  # type: ignore[arg-type]
    acked = [m.id for _, m in out if isinstance(m, Ack)]
    return [f"{type(getattr(m, 'message', m)).__name__}>{t}" for t, m in out], (acked or [None])[0]


def publishers_of(router: Router, *hops: str, identity: str = "") -> Router:
    for hop in hops:
        router.handle(LinkUp(False, identity=identity), hop, 1.0)
        router.handle(Advertise("a", parse_filter("[class,eq,t],[n,>,-1]")), hop, 1.0)
    return router


def test_a_repeated_message_id_is_answered_with_the_first_publication_and_routed_no_further() -> None:
    """An application restarted without its outbox (a new session), then a second process of
    the same publisher (``alarm:2``: the identity is the name up to ``:``), publish message id
    ``a1`` again: each is answered with the first's id and counted, and the subscriber has one."""
    router = publishers_of(wired(), "alarm:1", "alarm:2")
    sent, first = publish_mid(router, "alarm:1", "1@s1", "a1")
    assert sent == ["Ack>alarm:1", "Deliver>sub"] and first is not None
    assert publish_mid(router, "alarm:1", "1@s2", "a1", now=3.0) == (["Ack>alarm:1"], first)
    assert publish_mid(router, "alarm:2", "1@s3", "a1", now=4.0) == (["Ack>alarm:2"], first)
    assert router.counters["dropped.duplicate_mid"] == 2
    assert router.counters["delivered"] == 1
    # the repeat's own resend (its Ack lost) is answered the same, as a copy
    assert publish_mid(router, "alarm:2", "1@s3", "a1", now=5.0) == (["Ack>alarm:2"], first)
    assert router.counters["dropped.duplicate_mid"] == 3
    assert publish_mid(router, "alarm:1", "1@s1", "a1", now=6.0) == (["Ack>alarm:1"], first)
    assert router.counters["dropped.duplicate"] == 1  # the first's own resend: a copy
    assert router.status()["mids"] == 1


def test_message_ids_are_the_publishers_own() -> None:
    """Two publishers (two identities) may use the same id; one publisher's two ids are two
    messages; with certificates, the identity is the certificate's name."""
    router = publishers_of(wired(), "alice", "bob")
    assert publish_mid(router, "alice", "1@s", "a1")[0] == ["Ack>alice", "Deliver>sub"]
    assert publish_mid(router, "bob", "1@s", "a1")[0] == ["Ack>bob", "Deliver>sub"]
    assert publish_mid(router, "alice", "2@s", "a2")[0] == ["Ack>alice", "Deliver>sub"]
    publishers_of(router, "c-1", "c-2", identity="carol")  # two processes of one certificate
    assert publish_mid(router, "c-1", "1@s", "a1")[0] == ["Ack>c-1", "Deliver>sub"]
    assert publish_mid(router, "c-2", "1@s", "a1")[0] == ["Ack>c-2"]
    assert router.counters["dropped.duplicate_mid"] == 1


def test_a_message_id_is_remembered_a_day_or_until_its_publication_expires() -> None:
    router = publishers_of(wired(), "p")
    assert publish_mid(router, "p", "1@s", "day", now=10.0)[0] == ["Ack>p", "Deliver>sub"]
    assert publish_mid(router, "p", "2@s", "short", now=10.0, ttl=30.0)[0] == ["Ack>p", "Deliver>sub"]
    assert publish_mid(router, "p", "3@s", "short", now=39.9)[0] == ["Ack>p"]
    assert publish_mid(router, "p", "4@s", "short", now=40.0)[0] == ["Ack>p", "Deliver>sub"]  # expired
    assert publish_mid(router, "p", "5@s", "day", now=10.0 + publishers.MID_KEPT - 1)[0] == ["Ack>p"]
    again, answered = publish_mid(router, "p", "6@s", "day", now=10.0 + publishers.MID_KEPT)
    assert again == ["Ack>p", "Deliver>sub"] and answered is not None and "/6@s" in answered
    assert router.counters["mids.forgotten"] == 0


def test_what_is_remembered_is_bounded_and_the_oldest_goes_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """Beyond ``MAX_MIDS`` the id published longest ago is forgotten, and counted (it went before
    its time); those whose time is over go first, as they reach the front."""
    monkeypatch.setattr(publishers, "MAX_MIDS", 3)
    router = publishers_of(wired(), "p")
    publish_mid(router, "p", "1@s", "brief", now=10.0, ttl=1.0)
    for number, mid in enumerate(("m1", "m2", "m3"), start=2):
        publish_mid(router, "p", f"{number}@s", mid, now=20.0)
    assert list(router.publishers.mids) == [("p", "m1"), ("p", "m2"), ("p", "m3")]
    assert router.counters["mids.forgotten"] == 0  # "brief" had expired
    publish_mid(router, "p", "5@s", "m4", now=30.0)
    assert list(router.publishers.mids) == [("p", "m2"), ("p", "m3"), ("p", "m4")]
    assert router.counters["mids.forgotten"] == 1
    assert publish_mid(router, "p", "6@s", "m1", now=31.0)[0] == ["Ack>p", "Deliver>sub"]
    assert publish_mid(router, "p", "7@s", "m4", now=31.0)[0] == ["Ack>p"]


def test_no_id_is_remembered_of_a_non_persistent_or_refused_publication() -> None:
    """A non-persistent publication leaves the router's state as it was (``Router._unlogged``);
    a refused one was not routed."""
    router = publishers_of(wired(), "p")
    assert publish_mid(router, "p", "1@s", "a1", persistent=False)[0] == ["Ack>p", "Deliver>sub"]
    assert publish_mid(router, "p", "2@s", "a1", persistent=False)[0] == ["Ack>p", "Deliver>sub"]
    out = router.handle(Publish("3@s", Publication("other", {"n": 1}), qos=Qos(mid="a1")), "p", 2.0)
    assert [type(m) for _, m in out] == [Refuse]
    assert router.publishers.mids == {}
    assert publish_mid(router, "p", "4@s", "a1")[0] == ["Ack>p", "Deliver>sub"]


def test_the_message_ids_are_in_the_routers_state() -> None:
    router = publishers_of(wired(), "p")
    _, first = publish_mid(router, "p", "1@s", "a1", ttl=60.0)
    restored = Router.restore(router.snapshot())
    assert restored.publishers.mids == {("p", "a1"): (first, 62.0)}
    assert publish_mid(restored, "p", "1@t", "a1", now=3.0) == (["Ack>p"], first)
