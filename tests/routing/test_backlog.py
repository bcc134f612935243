"""Strict priority and pull in custody: a channel carries a window of messages its peer has not
taken, the rest waits by priority, and the peer's Took (or a pulling client's Pull) makes room.
What waits is custody like what is held: it expires, survives a snapshot and a resume, and
routing state never overtakes the data before it."""

from __future__ import annotations

import pickle

import pytest

from broker.language import Publication, parse_filter
from broker.messages import (
    Advertise,
    Carry,
    Deliver,
    LinkDown,
    LinkUp,
    Message,
    Publish,
    Pull,
    Qos,
    Subscribe,
    Took,
    Unadvertise,
)
from broker.routing import backlog, custody
from broker.routing.router import Router
from tests.routing.test_expiry import wired

WINDOW = 8


def small(router: Router) -> Router:
    router.custody.window = WINDOW
    return router


def publish(
    router: Router, n: int, priority: int = 4, now: float = 10.0, ttl: float | None = None
) -> list[Message]:
    """``pub`` publishes ``n`` at ``priority``: what the router sends ``sub`` (carried)."""
    qos = Qos(priority=priority, ttl=ttl)
    out = router.handle(Publish(f"{n}@s", Publication("t", {"n": n}), qos=qos), "pub", now)
    return carried(out, "sub")


def carried(out: list[tuple[str, Message]], hop: str) -> list[Message]:
    return [m.message for h, m in out if h == hop and isinstance(m, Carry)]


def numbers(messages: list[Message]) -> list[int]:
    return [m.publication["n"] for m in messages if isinstance(m, Deliver)]  # type: ignore[misc]


def took(router: Router, seq: int, hop: str = "sub", now: float = 10.0) -> list[Message]:
    return carried(router.handle(Took(seq), hop, now), hop)


def drained(router: Router, hop: str = "sub") -> list[Message]:
    """What goes to ``hop`` while it takes everything carried to it, until nothing waits."""
    channel = router.custody.channels[hop]
    moved: list[Message] = []
    while channel.backlog:
        moved += carried(router.handle(Took(channel.next_seq - 1), hop, 10.0), hop)
    return moved


def test_a_channel_carries_a_window_and_the_rest_waits_for_took() -> None:
    router = small(wired())
    sent = [m for n in range(20) for m in publish(router, n)]
    assert numbers(sent) == list(range(WINDOW))
    assert router.custody.status() | {"epoch": ""} == {
        "epoch": "",
        "held": 20,
        "held_for_away": 0,
        "waiting": 12,
    }
    assert numbers(took(router, 3)) == [8, 9, 10]  # room for three
    assert numbers(took(router, 20)) == list(range(11, 11 + WINDOW))  # a window more
    assert numbers(drained(router)) == [19]


def test_an_urgent_publication_overtakes_the_backlog() -> None:
    router = small(wired())
    for n in range(1000):
        publish(router, n, priority=1)
    assert publish(router, 1000, priority=9) == []  # it waits too: the window is full
    assert numbers(took(router, 1)) == [1000]  # the first room is its
    assert numbers(took(router, 2)) == [WINDOW]  # then the backlog, in order


def test_one_turn_in_ten_goes_to_the_oldest_so_a_flood_of_urgent_ones_starves_nothing() -> None:
    router = small(wired())
    for n in range(100):
        publish(router, n, priority=1)
    for n in range(100, 200):
        publish(router, n, priority=9)
    moved = numbers(drained(router))[:20]
    assert [n for n in moved if n < 100] == [WINDOW, WINDOW + 1]  # the oldest, twice in twenty
    assert [n for n in moved if n >= 100] == list(range(100, 118))  # urgent ones in order


def test_equal_priorities_keep_their_order() -> None:
    router = small(wired())
    for n in range(50):
        publish(router, n, priority=n % 3 * 3)
    got = list(range(WINDOW)) + numbers(drained(router))
    assert sorted(got) == list(range(50))
    for level in (0, 3, 6):
        mine = [n for n in got if n % 3 * 3 == level]
        assert mine == sorted(mine)


def test_under_total_order_nothing_overtakes() -> None:
    router = Router("B1", session_grace=3600, ordering="TOTAL")
    for hop in ("pub", "sub"):
        router.handle(LinkUp(False), hop, 1.0)
    router.handle(Advertise("a", parse_filter("[class,eq,t],[n,>,-1]")), "pub", 1.0)
    router.handle(Subscribe("s", parse_filter("[class,eq,t]")), "sub", 1.0)
    small(router)
    for n in range(20):
        publish(router, n, priority=n % 10)
    assert numbers(drained(router)) == list(range(WINDOW, 20))


def test_a_withdrawal_never_overtakes_the_publications_before_it() -> None:
    """To a neighbour: B1's client withdraws its advertisement while B1's publications to B2 wait;
    B2 must get them before the Unadvertise (it would drop them as unadvertised)."""
    router = Router("B1", session_grace=3600)
    router.handle(LinkUp(False), "pub", 1.0)
    router.handle(LinkUp(True, epoch="B2-1"), "B2", 1.0)
    router.handle(Advertise("a", parse_filter("[class,eq,t],[n,>,-1]")), "pub", 1.0)
    router.handle(Carry(1, Subscribe("B2/s", parse_filter("[class,eq,t]"))), "B2", 1.0)
    router.custody.window = WINDOW
    channel = router.custody.channels["B2"]
    base = channel.next_seq - 1
    router.handle(Took(base), "B2", 1.0)
    sent = []
    for n in range(20):
        out = router.handle(
            Publish(f"{n}@s", Publication("t", {"n": n}), qos=Qos(priority=n % 10)), "pub", 2.0
        )
        sent += carried(out, "B2")
    sent += carried(router.handle(Unadvertise(next(iter(router.owned["pub"]))), "pub", 2.0), "B2")
    late = Publish("99@s", Publication("t", {"n": 99}), qos=Qos(priority=9))
    sent += carried(router.handle(late, "pub", 2.0), "B2")  # refused: no advertisement any more
    while channel.backlog:
        sent += carried(router.handle(Took(channel.next_seq - 1), "B2", 3.0), "B2")
    kinds = [type(m).__name__ for m in sent]
    assert kinds == ["Publish"] * 20 + ["Unadvertise"]
    assert sorted(m.publication["n"] for m in sent[:20]) == list(range(20))  # type: ignore[attr-defined]


def test_what_waits_expires_promptly_and_is_counted() -> None:
    router = small(wired())
    for n in range(20):
        publish(router, n, ttl=5.0 if n == 15 else None)
    router.handle(LinkDown(), "nobody", 16.0)  # any input: the router's clock passes the expiry
    assert router.counters["expired.held"] == 1 and router.custody.status()["waiting"] == 11
    assert 15 not in numbers(took(router, 100, now=16.0))


def test_a_subscriber_away_while_the_backlog_built_gets_the_urgent_one_first_after_the_window() -> None:
    router = small(wired())
    router.handle(LinkDown(), "sub", 2.0)
    for n in range(500):
        publish(router, n, priority=1)
    publish(router, 500, priority=9)
    restored = small(Router.restore(router.snapshot()))
    back = carried(restored.handle(LinkUp(False, resume=0), "sub", 20.0), "sub")
    assert numbers(back) == list(range(WINDOW))  # what had its seq goes again, in order
    assert numbers(took(restored, 1, now=20.0)) == [500]


def test_a_snapshot_with_a_backlog_restores_to_a_router_that_goes_on_the_same() -> None:
    router = small(wired())
    for n in range(40):
        publish(router, n, priority=n % 10, ttl=100.0 if n % 4 else None)
    restored = small(Router.restore(pickle.loads(pickle.dumps(router.snapshot()))))
    for seq in (3, 9, 20, 40):
        assert numbers(took(router, seq)) == numbers(took(restored, seq))
    assert restored.custody.status() == router.custody.status()


def test_a_channel_pickled_without_a_backlog_restores_with_an_empty_one() -> None:
    channel = custody.Channel("B1:1", "", client=True)
    state = channel.__reduce_ex__(5)[2]
    for name in ("backlog", "waiting", "waiting_weight", "tickets", "turns", "credits"):
        del state[1][name]
    old = custody.Channel.__new__(custody.Channel)
    old.__setstate__(state)
    assert old == channel


def test_lanes_pickled_with_the_count_they_once_kept_restore_without_it() -> None:
    """Brokers of format 12 with windows kept a count in Lanes: their snapshots still load."""
    lanes = backlog.Lanes()
    lanes.add(7, 1, Took(1), 256)
    state = lanes.__reduce_ex__(5)[2]
    state[1]["count"] = 1
    old = backlog.Lanes.__new__(backlog.Lanes)
    old.__setstate__(state)
    assert old == lanes and old.take(oldest=False) == (Took(1), 256)


def test_a_pulling_client_gets_what_it_asked_for_and_the_rest_waits() -> None:
    router = wired()
    router.handle(Pull(0), "sub", 5.0)
    assert [m for n in range(10) for m in publish(router, n)] == []
    assert numbers(carried(router.handle(Pull(3), "sub", 11.0), "sub")) == [0, 1, 2]
    assert publish(router, 10) == []
    assert numbers(carried(router.handle(Pull(2), "sub", 11.0), "sub")) == [3, 4]
    pushed = carried(router.handle(Pull(None), "sub", 12.0), "sub")  # back to push: the rest
    assert numbers(pushed) == list(range(5, 11))
    assert numbers(publish(router, 11)) == [11]


def test_a_pull_is_bounded() -> None:
    with pytest.raises(ValueError, match="0 to"):
        Pull(-1)
    with pytest.raises(ValueError, match="0 to"):
        Pull(backlog.WINDOW * 10**6)


def test_a_full_channel_counts_what_it_cannot_hold_backlog_included() -> None:
    router = small(wired())
    router.handle(LinkDown(), "sub", 2.0)
    router.custody.max_held = 50
    for n in range(60):
        publish(router, n)
    assert router.counters["dropped.session_full"] == 10
    assert router.custody.status()["held_for_away"] == 50
