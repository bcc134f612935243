"""Consumption policies of composite subscriptions: one detector per policy, the choice carried
through the overlay to a remote detection, on the wire and through a broker's crash, and the
bound on join state under each."""

from __future__ import annotations

import pickle

import pytest

from broker.errors import ParseError, RefusedError
from broker.language import Policy, parse_composite, parse_composite_subscription, parse_publication
from broker.messages import CompositeSubscribe, Notify
from broker.routing import detection
from broker.routing.router import Router
from broker.sim import Overlay
from broker.transport.codec import MAX_FRAME, decode, encode
from tests.routing.test_detection import WORKFLOW, Feeder, status

# PADRES's TestComplexCS, composite AND
STOCK = "{{[class,eq,stock],[number,>,120]}&{[class,eq,stock],[price,<,80]}}"
FIRST, SECOND = "[class,stock],[number,130],[price,60]", "[class,stock],[price,70]"
AND, SEQ = "{{[class,eq,a]}&{[class,eq,b]}}", "{{[class,eq,a]};{[class,eq,b]}}"


def feeder(text: str, policy: Policy, **options: float) -> Feeder:
    return Feeder(text, policy=policy, **options)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("policy", "again"),
    [
        (Policy.CHRONICLE, []),  # the first firing consumed [number,130],[price,60]
        (Policy.RECENT, [[FIRST, SECOND]]),
        (Policy.UNRESTRICTED, [[FIRST, SECOND]]),
        (Policy.CONTINUOUS, []),
        (Policy.CUMULATIVE, []),
    ],
)
def test_padres_complex_cs_fires_again_under_the_policies_that_keep(
    policy: Policy, again: list[object]
) -> None:
    feed = feeder(STOCK, policy)
    assert feed(FIRST) == [[FIRST, FIRST]]
    assert feed(SECOND) == again


@pytest.mark.parametrize(
    ("policy", "fired", "then"),
    [
        # a1 a2 b1, then b2
        (Policy.CHRONICLE, [["a1", "b1"]], [["a2", "b2"]]),
        (Policy.RECENT, [["a2", "b1"]], [["a2", "b2"]]),
        (Policy.CONTINUOUS, [["a1", "b1"], ["a2", "b1"]], []),
        (Policy.CUMULATIVE, [["a1", "a2", "b1"]], []),
        (Policy.UNRESTRICTED, [["a1", "b1"], ["a2", "b1"]], [["a1", "b2"], ["a2", "b2"]]),
    ],
)
@pytest.mark.parametrize("text", [AND, SEQ])
def test_each_policy_chooses_and_consumes_as_its_context_says(
    text: str, policy: Policy, fired: list[list[str]], then: list[list[str]]
) -> None:
    feed = feeder(text, policy)

    def names(firings: list[list[str]]) -> list[list[str]]:
        return [[p.removeprefix("[class,").replace("],[n,", "").rstrip("]") for p in f] for f in firings]

    assert names(feed("[class,a],[n,1]") + feed("[class,a],[n,2]")) == []
    assert names(feed("[class,b],[n,1]")) == fired
    assert names(feed("[class,b],[n,2]")) == then


def test_the_default_fires_a_workflow_job_once_per_generation_even_if_a_status_comes_twice() -> None:
    """Why ``chronicle`` is the default: a status published again (a retried report) must not
    start the job a second time; ``recent`` keeps the Trigger and would."""
    fired: dict[Policy, int] = {}
    for policy in (Policy.CHRONICLE, Policy.RECENT):
        feed = feeder(WORKFLOW, policy)
        feed("[class,Trigger],[applname,PAYROLL],[GID,'g1']")
        fired[policy] = len(feed(status("g1")) + feed(status("g1")))
    assert fired == {Policy.CHRONICLE: 1, Policy.RECENT: 2}


def test_a_sequence_joins_only_what_came_before_under_every_policy() -> None:
    for policy in Policy:
        feed = feeder(SEQ, policy)
        assert feed("[class,b],[n,1]") == [] and feed("[class,a],[n,1]") == []
        assert feed.detector.waiting == 1, policy  # the early b never waits: it cannot start a sequence


def test_recent_keeps_the_newest_match_per_binding() -> None:
    feed = feeder("{{[class,eq,a],[x,eq,$S$X]}&{[class,eq,b],[x,eq,$S$X]}}", Policy.RECENT)
    for text in ("[class,a],[x,p],[n,1]", "[class,a],[x,q],[n,2]", "[class,a],[x,p],[n,3]"):
        assert feed(text) == []
    assert feed.detector.waiting == 2  # p's newest and q's
    assert feed("[class,b],[x,p]") == [["[class,a],[n,3],[x,p]", "[class,b],[x,p]"]]
    assert feed("[class,b],[x,q]") == [["[class,a],[n,2],[x,q]", "[class,b],[x,q]"]]


def test_cumulative_gathers_only_the_matches_that_agree() -> None:
    feed = feeder("{{[class,eq,a],[x,eq,$S$X]}&{[class,eq,b],[x,eq,$S$X]}}", Policy.CUMULATIVE)
    for text in ("[class,a],[x,p],[n,1]", "[class,a],[x,q],[n,2]", "[class,a],[x,p],[n,3]"):
        feed(text)
    assert feed("[class,b],[x,p]") == [["[class,a],[n,1],[x,p]", "[class,a],[n,3],[x,p]", "[class,b],[x,p]"]]
    assert feed.detector.waiting == 1  # q's


def test_chronicle_finds_a_combination_when_the_oldest_match_does_not_fit_the_others() -> None:
    """Picking the oldest a without looking further would bind X to 1, and no b has X=1."""
    feed = feeder(
        "{{[class,eq,a],[x,=,$I$X]}&{[class,eq,b],[x,=,$I$X],[y,=,$I$Y]}&{[class,eq,c],[y,=,$I$Y]}}",
        Policy.CHRONICLE,
    )
    assert feed("[class,a],[x,1]") + feed("[class,a],[x,2]") + feed("[class,b],[x,2],[y,7]") == []
    assert feed("[class,c],[y,7]") == [["[class,a],[x,2]", "[class,b],[x,2],[y,7]", "[class,c],[y,7]"]]
    assert feed.detector.waiting == 1


@pytest.mark.parametrize("policy", list(Policy))
def test_join_state_and_firings_are_bounded_under_every_policy(policy: Policy) -> None:
    """Rounds of an a, a b and a c through a three-way join that may keep six matches: never
    more than six wait, no arrival fires more than six combinations, and a cut is counted."""
    feed = feeder("{{[class,eq,a]}&{[class,eq,b]}&{[class,eq,c]}}", policy, max_waiting=6)
    most = 0
    for n in range(100):
        for cls in "aabbc":
            most = max(most, len(feed(f"[class,{cls}],[n,{n}]")))
            assert feed.detector.waiting <= 6
    assert most <= 6
    expected = {Policy.CONTINUOUS: (4, False), Policy.UNRESTRICTED: (6, True)}.get(policy, (1, False))
    assert (most, feed.detector.truncated > 0) == expected  # continuous: both a's with both b's


NESTED = "{{[class,eq,a]}&{{[class,eq,b]};{[class,eq,c]}}}"


def test_one_arrival_makes_at_most_max_waiting_combinations_through_a_nested_join() -> None:
    """The reviewer's case: under ``unrestricted`` a c completes the sequence with each of 30 b's
    and each of those 30 matches joins all 30 a's: 900 firings of one publication, again with
    every c, were the cap per node. One budget for the arrival: 30 inner and 70 at the root."""
    feed = feeder(NESTED, Policy.UNRESTRICTED, max_waiting=100)
    for _ in range(30):
        feed("[class,a]")
        feed("[class,b]")
    assert (len(feed("[class,c]")), feed.detector.truncated) == (70, 1)


def test_one_arrival_tests_at_most_search_limit_waiting_matches_in_all(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each of the 31 searches of a c tests at most 30 matches, under a limit of 500 per search;
    together they may not test more than 500: 30 for the sequence, 470 finding an a each."""
    monkeypatch.setattr(detection, "SEARCH_LIMIT", 500)
    feed = feeder(NESTED, Policy.UNRESTRICTED)
    for _ in range(30):
        feed("[class,a]")
        feed("[class,b]")
    assert (len(feed("[class,c]")), feed.detector.truncated) == (470, 1)


def test_a_cumulative_firing_is_cut_to_what_one_notification_can_carry() -> None:
    """600 a's of 2 kB would make a Notify of 1.2 MB, more than a frame; the firing stops at
    MAX_FIRING_WEIGHT, the rest wait for the next b. 1,500 small a's stop at 1,000 publications."""
    feed = feeder(AND, Policy.CUMULATIVE)
    big = parse_publication("[class,a],[payload,'" + "x" * 2000 + "']")
    for _ in range(600):
        feed(big)
    firings = [feed.detector.feed(1, parse_publication("[class,b]"), 0.0)[0] for _ in range(3)]
    assert all(len(encode(Notify("B1~1", f.publications, f.bindings))) < MAX_FRAME for f in firings)
    assert [len(f.publications) - 1 for f in firings] == [253, 253, 94]  # every a, oldest first
    assert (feed.detector.waiting, feed.detector.truncated) == (0, 2)
    small = feeder(AND, Policy.CUMULATIVE)
    for n in range(1_500):
        small(f"[class,a],[n,{n}]")
    assert [len(f) for f in small("[class,b]") + small("[class,b]")] == [
        1_000,
        502,
    ]  # 999 a's and the b, then the rest
    assert (small.detector.waiting, small.detector.truncated) == (0, 1)


# the choice in the overlay -----------------------------------------------------------------------


def test_the_policy_travels_with_the_parts_detected_remotely() -> None:
    """B3 asks; B1 detects (its sources are there) and must keep what it joined, as asked."""
    overlay = Overlay.line(3)
    stock = overlay.add_client("stock", "B1")
    stock.advertise("[class,eq,stock],[number,isPresent,0],[price,isPresent,0]")
    stock.advertise("[class,eq,stock],[price,isPresent,0]")
    keeps, consumes = overlay.add_client("keeps", "B3"), overlay.add_client("consumes", "B3")
    keeps.subscribe_composite(STOCK, policy="padres")
    consumes.subscribe_composite(STOCK)
    detected = {b: r.status()["composite_detected"] for b, r in overlay.routers.items()}
    assert detected == {"B1": 2, "B2": 0, "B3": 0}  # one detection per policy, both remote
    stock.publish(FIRST)
    stock.publish(SECOND)
    assert keeps.fired() == [[FIRST, FIRST], [FIRST, SECOND]]
    assert consumes.fired() == [[FIRST, FIRST]]


def test_a_part_keeps_the_policy_of_its_whole() -> None:
    overlay = Overlay.line(3)
    for cls, broker in (("a", "B1"), ("b", "B1"), ("c", "B3")):
        overlay.add_client(cls, broker).advertise(f"[class,eq,{cls}]")
    sub = overlay.add_client("sub", "B3")
    sub.subscribe_composite("{{{[class,eq,a]}&{[class,eq,b]}};{[class,eq,c]}}", policy="recent")
    part = next(iter(overlay.routers["B1"].composites.detections.values()))
    assert part.policy is Policy.RECENT and part.detector is not None
    for cls in "abcc":
        overlay.clients[cls].publish(f"[class,{cls}]")
    assert sub.fired() == [["[class,a]", "[class,b]", "[class,c]"]] * 2  # a and b stay, as recent says


def test_a_crashed_broker_recovers_its_detections_with_their_policy() -> None:
    overlay = Overlay.line(2, session_grace=60.0)
    stock = overlay.add_client("stock", "B1")
    stock.advertise("[class,eq,stock],[number,isPresent,0],[price,isPresent,0]")
    sub = overlay.add_client("sub", "B2")
    sub.subscribe_composite(STOCK, policy="unrestricted")
    stock.publish(FIRST)
    overlay.crash("B1")
    overlay.recover("B1")
    stock.publish("[class,stock],[price,70],[number,0]")
    assert sub.fired()[-1] == [FIRST, "[class,stock],[number,0],[price,70]"]
    restored = Router.restore(pickle.loads(pickle.dumps(overlay.routers["B1"].snapshot())))  # as RouterLog
    assert {d.policy for d in restored.composites.detections.values()} == {Policy.UNRESTRICTED}
    logged = ("B2", 1.0, CompositeSubscribe("B2/1", parse_composite(STOCK), None, 5, Policy.RECENT))
    assert pickle.loads(pickle.dumps(logged)) == logged  # an input, as RouterLog records it


# the choice in words and on the wire ---------------------------------------------------------------


@pytest.mark.parametrize("policy", list(Policy))
def test_a_policy_round_trips_on_the_wire(policy: Policy) -> None:
    message = CompositeSubscribe("c1", parse_composite(STOCK), None, 5, policy)
    assert decode(encode(message)[4:]) == message


def test_the_default_policy_costs_no_byte_and_an_unknown_one_is_refused() -> None:
    plain = encode(CompositeSubscribe("c1", parse_composite(AND)))
    assert decode(plain[4:]).policy is Policy.CHRONICLE  # type: ignore[union-attr]
    assert len(encode(CompositeSubscribe("c1", parse_composite(AND), policy=Policy.RECENT))) > len(plain)
    with pytest.raises(ValueError, match="policy must be a Policy"):
        CompositeSubscribe("c1", parse_composite(AND), policy="recent")  # type: ignore[arg-type]


def test_a_cs_line_names_its_policy_by_a_leading_word() -> None:
    assert parse_composite_subscription(AND) == (parse_composite(AND), Policy.CHRONICLE)
    assert parse_composite_subscription(f" Recent {AND}")[1] is Policy.RECENT
    assert parse_composite_subscription(f"padres {AND}")[1] is Policy.UNRESTRICTED
    assert parse_composite_subscription("Times({[class,eq,a]},2,n,1)")[1] is Policy.CHRONICLE
    with pytest.raises(ParseError, match=r"unknown consumption policy 'latest' \(one of chronicle.*column 1"):
        parse_composite_subscription(f"latest {AND}")
    with pytest.raises(ParseError, match="column 9"):
        parse_composite_subscription("recent {]")


def test_a_request_sent_again_under_its_ref_with_another_policy_is_refused() -> None:
    overlay = Overlay.line(1)
    sub = overlay.add_client("sub", "B1")
    sub.subscribe_composite(AND)  # ref "1"
    with pytest.raises(RefusedError, match="already in use"):
        sub._request(CompositeSubscribe("1", parse_composite(AND), policy=Policy.RECENT), "1")
