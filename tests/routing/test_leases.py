"""Leases on subscriptions in the router: a leased subscription lives while its client renews it,
and ends (withdrawn, its client told, counted) when the lease runs out, away or not."""

from __future__ import annotations

from broker.language import Publication, parse_filter
from broker.messages import (
    Advertise,
    Deliver,
    LinkDown,
    LinkUp,
    Publish,
    Refuse,
    Renew,
    Subscribe,
    Unsubscribe,
)
from broker.routing.router import Router

SUB = "B1/sub/s"


def wired(lease: float = 10.0) -> Router:
    """B1 with a publisher of class ``t`` and ``sub``'s subscription, leased ``lease`` s at 0."""
    router = Router("B1", session_grace=3600)
    for hop in ("pub", "sub"):
        router.handle(LinkUp(False), hop, 0.0)
    router.handle(Advertise("a", parse_filter("[class,eq,t],[n,>,-1]")), "pub", 0.0)
    router.handle(Subscribe("s", parse_filter("[class,eq,t]"), lease=lease), "sub", 0.0)
    return router


def delivered(router: Router, now: float) -> bool:
    out = router.handle(Publish(f"{now}", Publication("t", {"n": 1})), "pub", now)
    return any(isinstance(getattr(m, "message", m), Deliver) for _, m in out)


def test_a_renewed_lease_goes_on_and_one_not_renewed_ends() -> None:
    router = wired()
    router.handle(Renew((SUB,)), "sub", 8.0)
    assert delivered(router, 15.0) and router.status()["leases"] == 1
    out = router.handle(LinkDown(), "nobody", 18.0)  # any input: the router's clock passes 18
    assert ("sub", Refuse(SUB, "lease expired")) in out
    assert SUB not in router.tables.prt and router.counters["leases.expired"] == 1
    assert not delivered(router, 19.0)
    assert router.next_expiry() is None


def test_the_lease_of_a_subscriber_away_runs_out_within_its_session_s_grace() -> None:
    router = wired()
    router.handle(LinkDown(), "sub", 1.0)
    assert router.status()["away"] == ["sub"]
    router.handle(LinkDown(), "nobody", 10.0)
    assert SUB not in router.tables.prt and router.status()["away"] == ["sub"]


def test_only_its_own_client_renews_a_lease() -> None:
    router = wired()
    router.handle(Renew((SUB,)), "pub", 8.0)
    router.handle(LinkDown(), "nobody", 10.0)
    assert router.counters["leases.expired"] == 1 and router.counters["leases.unknown"] == 1


def test_a_subscription_withdrawn_or_made_again_without_a_lease_keeps_no_lease() -> None:
    router = wired()
    router.handle(Unsubscribe(SUB), "sub", 1.0)
    router.handle(Subscribe("s", parse_filter("[class,eq,t]")), "sub", 2.0)  # the same id, no lease
    assert router.status()["leases"] == 0 and delivered(router, 30.0)


def test_leases_are_in_the_router_s_state() -> None:
    router = wired()
    restored = Router.restore(router.snapshot())
    assert restored.next_expiry() == 10.0
    restored.handle(LinkDown(), "nobody", 10.0)
    assert restored.counters["leases.expired"] == 1
