"""The sequence checker: lost, duplicated and out-of-order messages per (publisher, subscriber)."""

from __future__ import annotations

import random

from wfm.puppet import Published, Received, Window, check


def published(publisher: str, seqs: range, topic: str = "/a/b", start: float = 1.0) -> list[Published]:
    return [Published(publisher, seq, topic, start + seq / 100) for seq in seqs]


def received(subscriber: str, publisher: str, seqs: list[int], topic: str = "/a/b") -> list[Received]:
    return [Received(subscriber, publisher, seq, topic, 5.0 + i / 100) for i, seq in enumerate(seqs)]


def test_everything_once_and_in_order() -> None:
    report = check(
        published("p", range(1, 11)), received("s", "p", list(range(1, 11))), [Window("s", "/a/*", 0.0)]
    )
    assert report.ok and (report.lost, report.duplicated, report.out_of_order) == (0, 0, 0)
    assert [str(pair) for pair in report.pairs] == [
        "p -> s: expected 10, received 10, lost 0, duplicated 0, out of order 0"
    ]


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
    assert check(pubs, received("s", "p", [2, 4]), window, settle=0.05).pairs[0].lost == (
        3,
        5,
        6,
        7,
        8,
        9,
        10,
    )


def test_a_subscriber_that_never_subscribed_owes_nothing() -> None:
    report = check(published("p", range(1, 5)), [], [Window("other", "/nothing", 0.0)])
    assert report.pairs == () and report.ok


def test_unconfirmed_publications_are_counted_not_failed() -> None:
    # the publisher died before its broker's acknowledgement of 4 reached it
    report = check(published("p", range(1, 4)), received("s", "p", [1, 2, 3, 4]), [Window("s", "/a/b", 0.0)])
    assert report.ok and report.pairs[0].unconfirmed == 1


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
    assert (
        report.summary()[-1]
        == "total: lost 1, duplicated 0, out of order 0 over 3 publisher/subscriber pairs"
    )
    assert report.as_dict()["lost"] == 1


def test_random_faults_are_all_found() -> None:
    """Drop, copy and swap deliveries at random (seeded): the checker finds exactly those."""
    rng = random.Random(14)
    for _ in range(200):
        n = rng.randint(1, 60)
        delivered = [seq for seq in range(1, n + 1) if rng.random() > 0.1]
        dropped = set(range(1, n + 1)) - set(delivered)
        copies = {seq for seq in delivered if rng.random() < 0.1}
        stream = [s for seq in delivered for s in ([seq, seq] if seq in copies else [seq])]
        report = check(
            published("p", range(1, n + 1)), received("s", "p", stream), [Window("s", "/a/b", 0.0)]
        )
        pair = report.pairs[0] if report.pairs else None
        assert (pair.lost if pair else ()) == tuple(sorted(dropped))
        assert (pair.duplicated if pair else ()) == tuple(sorted(copies))
        assert not (pair.out_of_order if pair else ())
