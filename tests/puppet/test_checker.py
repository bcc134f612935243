"""The checker: every anomaly it can report, each on a hand-built history it must flag, and the
clean history it must pass, under each Ordering."""

from __future__ import annotations

import random
import time

import pytest

from wfm.puppet import CHECKS, Cycle, Published, Received, Window, check


def published(publisher: str, seqs: range, topic: str = "/a/b", start: float = 1.0) -> list[Published]:
    return [Published(publisher, seq, topic, start + seq / 100) for seq in seqs]


def received(subscriber: str, publisher: str, seqs: list[int], topic: str = "/a/b") -> list[Received]:
    return [Received(subscriber, publisher, seq, topic, 5.0 + i / 100) for i, seq in enumerate(seqs)]


def deliveries(subscriber: str, order: list[str], topic: str = "/a/b") -> list[Received]:
    """``["p:1", "q:2"]``: what ``subscriber`` delivered, in order."""
    out = []
    for i, item in enumerate(order):
        publisher, seq = item.split(":")
        out.append(Received(subscriber, publisher, int(seq), topic, 5.0 + i / 100))
    return out


# the clean history: two publishers, two subscribers, everything once, in one order everywhere
CLEAN_PUBS = published("p", range(1, 4)) + published("q", range(1, 4), start=1.001)
CLEAN_ORDER = ["p:1", "q:1", "p:2", "q:2", "p:3", "q:3"]
CLEAN_GOT = deliveries("s", CLEAN_ORDER) + deliveries("t", CLEAN_ORDER)
CLEAN_WINDOWS = [Window("s", "/a/*", 0.0), Window("t", "/a/b", 0.0)]


@pytest.mark.parametrize("ordering", ["NO", "FIFO", "TOTAL"])
def test_the_clean_history_passes_every_ordering(ordering: str) -> None:
    report = check(CLEAN_PUBS, CLEAN_GOT, CLEAN_WINDOWS, ordering=ordering)
    assert report.ok and report.checks == CHECKS[ordering]
    assert (report.lost, report.duplicated, report.out_of_order, report.unexpected) == (0, 0, 0, 0)
    assert report.cycles == ()
    assert [str(pair) for pair in report.pairs] == [
        "p -> s: expected 3, received 3, lost 0, duplicated 0, out of order 0",
        "p -> t: expected 3, received 3, lost 0, duplicated 0, out of order 0",
        "q -> s: expected 3, received 3, lost 0, duplicated 0, out of order 0",
        "q -> t: expected 3, received 3, lost 0, duplicated 0, out of order 0",
    ]


def test_which_checks_each_ordering_asks_for() -> None:
    assert CHECKS == {
        "NO": ("lost", "duplicated", "unexpected"),
        "FIFO": ("lost", "duplicated", "unexpected", "fifo"),
        "TOTAL": ("lost", "duplicated", "unexpected", "fifo", "total"),
    }
    with pytest.raises(ValueError, match="bad ordering 'SOME'"):
        check([], [], [], ordering="SOME")


# lost -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("ordering", ["NO", "FIFO", "TOTAL"])
def test_lost(ordering: str) -> None:
    got = deliveries("s", CLEAN_ORDER[:-1]) + deliveries("t", CLEAN_ORDER)  # s never got q:3
    report = check(CLEAN_PUBS, got, CLEAN_WINDOWS, ordering=ordering)
    assert not report.ok and report.lost == 1
    assert {(p.publisher, p.subscriber): p.lost for p in report.pairs if p.lost} == {("q", "s"): (3,)}


def test_lost_duplicated_and_late_are_told_apart() -> None:
    got = [1, 2, 4, 3, 4, 6, 6, 6, 9]
    report = check(published("p", range(1, 11)), received("s", "p", got), [Window("s", "/a/b", 0.0)])
    (pair,) = report.pairs
    assert pair.lost == (5, 7, 8, 10)
    assert pair.duplicated == (4, 6)
    assert pair.out_of_order == (3,)
    assert pair.received == 6 and pair.expected == 10
    assert not report.ok
    assert "  lost: 5, 7-8, 10" in str(pair)


def test_only_matching_topics_in_the_window_are_expected() -> None:
    pubs = [
        *published("p", range(1, 4), "/a/b"),  # at 1.01-1.03
        *published("p", range(4, 7), "/x/y"),  # not subscribed
        *published("p", range(7, 10), "/a/c", start=3.0),  # after the unsubscription at 2.0
    ]
    report = check(pubs, received("s", "p", [1, 2, 3]), [Window("s", "/a/*", 0.5, end=2.0)])
    assert report.ok and report.pairs[0].expected == 3


def test_the_settling_delay() -> None:
    pubs = published("p", range(1, 11))  # at 1.01 .. 1.10
    window = [Window("s", "/a/b", 1.0)]
    # nothing came: publications within the settling delay are not owed
    assert check(pubs, [], window, settle=0.05).pairs[0].lost == (5, 6, 7, 8, 9, 10)
    # once the first came, nothing after it may be missing, settling or not
    report = check(pubs, received("s", "p", [2, 4]), window, settle=0.05)
    assert report.pairs[0].lost == (3, 5, 6, 7, 8, 9, 10)


def test_a_subscriber_that_never_subscribed_owes_nothing() -> None:
    report = check(published("p", range(1, 5)), [], [Window("other", "/nothing", 0.0)])
    assert report.pairs == () and report.ok


# duplicated -------------------------------------------------------------------------------------


@pytest.mark.parametrize("ordering", ["NO", "FIFO", "TOTAL"])
def test_duplicated(ordering: str) -> None:
    got = deliveries("s", [*CLEAN_ORDER, "p:2"]) + deliveries("t", CLEAN_ORDER)
    report = check(CLEAN_PUBS, got, CLEAN_WINDOWS, ordering=ordering)
    assert not report.ok and report.duplicated == 1 and report.lost == 0
    # a copy delivered late is a duplicate, not a reordering, and makes no order cycle
    assert report.out_of_order == 0 and report.cycles == ()


# unexpected -------------------------------------------------------------------------------------


@pytest.mark.parametrize("ordering", ["NO", "FIFO", "TOTAL"])
def test_unexpected(ordering: str) -> None:
    """A delivery on a topic no subscription of the subscriber ever matched: routed wrong."""
    pubs = [*CLEAN_PUBS, Published("p", 4, "/x/y", 1.5)]
    got = deliveries("s", CLEAN_ORDER) + deliveries("t", CLEAN_ORDER) + deliveries("t", ["p:4"], "/x/y")
    report = check(pubs, got, CLEAN_WINDOWS, ordering=ordering)
    assert not report.ok and report.unexpected == 1
    (pair,) = [p for p in report.pairs if p.unexpected]
    assert (pair.subscriber, pair.unexpected) == ("t", (4,))
    assert "unexpected 1" in str(pair) and "  unexpected: 4" in str(pair)


def test_a_delivery_after_an_unsubscription_is_not_unexpected() -> None:
    """In flight when the subscription was withdrawn: it may still come."""
    pubs = published("p", range(1, 4))
    report = check(pubs, received("s", "p", [1, 2, 3]), [Window("s", "/a/b", 0.0, end=1.015)])
    assert report.ok and report.unexpected == 0 and report.pairs[0].expected == 1


def test_unconfirmed_publications_are_counted_not_failed() -> None:
    # the publisher died before its broker's acknowledgement of 4 reached it
    report = check(published("p", range(1, 4)), received("s", "p", [1, 2, 3, 4]), [Window("s", "/a/b", 0.0)])
    assert report.ok and report.pairs[0].unconfirmed == 1


# FIFO -------------------------------------------------------------------------------------------


def test_fifo_out_of_order_is_flagged_under_fifo_and_total_only() -> None:
    swapped = ["p:1", "q:1", "p:3", "q:2", "p:2", "q:3"]  # s delivered p:3 before p:2
    got = deliveries("s", swapped) + deliveries("t", swapped)
    for ordering in ("FIFO", "TOTAL"):
        report = check(CLEAN_PUBS, got, CLEAN_WINDOWS, ordering=ordering)
        assert not report.ok and report.out_of_order == 2  # p:2, at s and at t
        assert {(p.publisher, p.subscriber): p.out_of_order for p in report.pairs if p.out_of_order} == {
            ("p", "s"): (2,),
            ("p", "t"): (2,),
        }
        assert report.cycles == ()  # both subscribers agree: one order, just not FIFO
    report = check(CLEAN_PUBS, got, CLEAN_WINDOWS, ordering="NO")
    assert report.ok and report.out_of_order == 0


def test_fifo_is_per_publisher() -> None:
    """Two publishers interleaved any way at one subscriber: FIFO holds if each one's is kept."""
    got = deliveries("s", ["q:1", "q:2", "p:1", "q:3", "p:2", "p:3"])
    report = check(CLEAN_PUBS, got, [Window("s", "/a/*", 0.0)], ordering="FIFO")
    assert report.ok


# TOTAL ------------------------------------------------------------------------------------------


def test_two_subscribers_in_opposite_orders_make_a_cycle() -> None:
    got = deliveries("s", CLEAN_ORDER) + deliveries("t", ["p:1", "p:2", "q:1", "q:2", "p:3", "q:3"])
    report = check(CLEAN_PUBS, got, CLEAN_WINDOWS, ordering="TOTAL")
    assert not report.ok and report.out_of_order == 0  # each subscriber is FIFO
    assert report.cycles == (Cycle((("p", 2), ("q", 1)), ("t", "s"), 2),)
    assert str(report.cycles[0]) == (
        "order cycle p:2 -> q:1 -> p:2: t delivered p:2 before q:1; s delivered q:1 before p:2"
    )
    assert report.summary()[-1] == (
        "total: lost 0, duplicated 0, out of order 0, order cycles 1 over 4 publisher/subscriber pairs"
        " (Ordering TOTAL: checked lost, duplicated, unexpected, fifo, total)"
    )
    assert report.as_dict()["cycles"] == [
        {"publications": [["p", 2], ["q", 1]], "subscribers": ["t", "s"], "size": 2}
    ]
    # FIFO and NO do not ask for one order across subscribers
    assert check(CLEAN_PUBS, got, CLEAN_WINDOWS, ordering="FIFO").ok


def test_three_subscribers_no_two_of_which_disagree_still_make_a_cycle() -> None:
    """s: a b, t: b c, u: c a. No two subscribers delivered the same two publications, but no
    single order agrees with all three: Jepsen (and SESDAD's 'same order at all subscribers')
    flag it."""
    pubs = [Published("a", 1, "/a/b", 1.0), Published("b", 1, "/a/b", 1.0), Published("c", 1, "/a/b", 1.0)]
    got = deliveries("s", ["a:1", "b:1"]) + deliveries("t", ["b:1", "c:1"]) + deliveries("u", ["c:1", "a:1"])
    windows = [Window(s, "/a/b", 0.0, 1.0) for s in "stu"]  # nothing owed: only the order counts
    report = check(pubs, got, windows, ordering="TOTAL")
    assert report.cycles == (Cycle((("a", 1), ("b", 1), ("c", 1)), ("s", "t", "u"), 3),)


def test_a_long_cycle_is_found_and_one_per_component() -> None:
    """s delivers 1..50 of p in order; t delivers 50 first, then the rest: one component of 50,
    reported once; a second, separate disagreement is a second cycle."""
    order = [f"p:{i}" for i in range(1, 51)]
    got = deliveries("s", [*order, "q:1", "q:2"]) + deliveries("t", ["p:50", *order[:-1], "q:2", "q:1"])
    pubs = published("p", range(1, 51)) + published("q", range(1, 3))
    report = check(pubs, got, [Window("s", "/a/b", 0.0), Window("t", "/a/b", 0.0)], ordering="TOTAL")
    first, second = report.cycles
    assert first.size == 50 and first.publications[0] == ("p", 1)
    # the only way back to p:1 is t's p:50 -> p:1, so the shortest loop is all fifty
    assert first.publications == tuple(("p", i) for i in range(1, 51))
    assert first.subscribers == ("s",) * 49 + ("t",)
    assert str(first).endswith("s delivered p:49 before p:50; t delivered p:50 before p:1")
    assert second == Cycle((("q", 1), ("q", 2)), ("s", "t"), 2)


def test_a_component_larger_than_its_cycle_says_so() -> None:
    """s: a b c, t: c a, u: b a: a, b and c are entangled; the shortest loop is a -> b -> a."""
    pubs = [Published(name, 1, "/a/b", 1.0) for name in "abc"]
    got = deliveries("s", ["a:1", "b:1", "c:1"])
    got += deliveries("t", ["c:1", "a:1"]) + deliveries("u", ["b:1", "a:1"])
    report = check(pubs, got, [Window(s, "/a/b", 0.0, 1.0) for s in "stu"], ordering="TOTAL")
    assert report.cycles == (Cycle((("a", 1), ("b", 1)), ("s", "u"), 3),)
    assert str(report.cycles[0]) == (
        "order cycle a:1 -> b:1 -> a:1 (3 publications entangled):"
        " s delivered a:1 before b:1; u delivered b:1 before a:1"
    )


def test_duplicates_and_gaps_do_not_make_cycles() -> None:
    """A copy delivered again later, and subscribers that each see only some publications, in
    one order: no cycle."""
    got = (
        deliveries("s", ["p:1", "p:2", "p:1", "p:3"])
        + deliveries("t", ["p:1", "p:3"])
        + deliveries("u", ["p:2", "p:3", "p:2"])
    )
    windows = [Window(s, "/a/b", 0.0, 1.0) for s in "stu"]
    report = check(published("p", range(1, 4)), got, windows, ordering="TOTAL")
    assert report.cycles == () and report.duplicated == 2


# the rest ---------------------------------------------------------------------------------------


def test_pairs_are_separate() -> None:
    pubs = published("p", range(1, 4)) + published("q", range(1, 4), "/a/c")
    got = received("s", "p", [1, 2, 3]) + received("s", "q", [1, 3], "/a/c") + received("t", "p", [1, 2, 3])
    windows = [Window("s", "/a/*", 0.0), Window("t", "/a/b", 0.0)]
    report = check(pubs, got, windows)
    assert {(p.publisher, p.subscriber): p.lost for p in report.pairs} == {
        ("p", "s"): (),
        ("q", "s"): (2,),
        ("p", "t"): (),
    }
    assert report.summary()[-1] == (
        "total: lost 1, duplicated 0, out of order 0 over 3 publisher/subscriber pairs"
        " (Ordering FIFO: checked lost, duplicated, unexpected, fifo)"
    )
    assert report.as_dict()["lost"] == 1 and report.as_dict()["ok"] is False


def test_random_faults_are_all_found() -> None:
    """Drop, copy and swap deliveries at random (seeded): the checker finds exactly those."""
    rng = random.Random(14)
    for _ in range(200):
        n = rng.randint(1, 60)
        delivered = [seq for seq in range(1, n + 1) if rng.random() > 0.1]
        dropped = set(range(1, n + 1)) - set(delivered)
        copies = {seq for seq in delivered if rng.random() < 0.1}
        stream = [s for seq in delivered for s in ([seq, seq] if seq in copies else [seq])]
        swapped: tuple[int, ...] = ()
        if len(delivered) > 2 and rng.random() < 0.3:
            i = stream.index(delivered[1])
            j = stream.index(delivered[2])
            stream[i], stream[j] = stream[j], stream[i]
            swapped = (delivered[1],)
        report = check(
            published("p", range(1, n + 1)), received("s", "p", stream), [Window("s", "/a/b", 0.0)]
        )
        pair = report.pairs[0] if report.pairs else None
        assert (pair.lost if pair else ()) == tuple(sorted(dropped))
        assert (pair.duplicated if pair else ()) == tuple(sorted(copies))
        assert (pair.out_of_order if pair else ()) == swapped


def test_a_hundred_thousand_deliveries_in_well_under_a_second() -> None:
    """5 publishers x 4,000 publications x 5 subscribers, under TOTAL, one late swap at one
    subscriber: found, and fast."""
    pubs = [p for name in "abcde" for p in published(name, range(1, 4001))]
    order = [(name, seq) for seq in range(1, 4001) for name in "abcde"]
    got = []
    for subscriber in ("s0", "s1", "s2", "s3", "s4"):
        mine = list(order)
        if subscriber == "s3":
            mine[-2], mine[-1] = mine[-1], mine[-2]  # d:4000 and e:4000: another publisher, FIFO holds
        got += [Received(subscriber, p, seq, "/a/b", 5.0 + i / 1e5) for i, (p, seq) in enumerate(mine)]
    windows = [Window(s, "/a/*", 0.0) for s in ("s0", "s1", "s2", "s3", "s4")]
    assert len(got) == 100_000
    began = time.process_time()  # CPU time: other processes on a loaded machine do not count
    report = check(pubs, got, windows, ordering="TOTAL")
    took = time.process_time() - began
    assert report.lost == report.duplicated == report.out_of_order == 0
    assert [c.publications for c in report.cycles] == [(("d", 4000), ("e", 4000))]
    assert took < 1.0, f"{took:.2f} s"
