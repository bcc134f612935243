"""Composite subscriptions through the simulated overlay: semantics, where detection happens,
what it costs on the links, sharing, withdrawal and re-placement."""

from __future__ import annotations

import random
import re

import pytest

from broker.language import parse_composite, parse_publication
from broker.matching import matches
from broker.messages import CompositeSubscribe
from broker.routing.detection import Detector
from broker.sim import Overlay
from broker.sim.overlay import SimClient
from tests.routing.test_detection import WORKFLOW

MODES = ["off", "lazy", "active"]
CLEAR = "[class,eq,JOBSTATUS],[applname,eq,PAYROLL],[jobname,eq,APPL_END],[GID,eq,$S$X]"


def tree(covering: str = "off") -> Overlay:
    """B1 at the root, B2 and B3 under it, B4 B5 under B2 and B6 B7 under B3; a publisher of class
    ``a`` at B4, ``b`` at B5, ``c`` at B6 and ``d`` at B7, each with attributes x and n."""
    overlay = Overlay(covering=covering)
    for i in range(1, 8):
        overlay.add_broker(f"B{i}")
    for parent, child in [(1, 2), (1, 3), (2, 4), (2, 5), (3, 6), (3, 7)]:
        overlay.connect(f"B{parent}", f"B{child}")
    for cls, broker in zip("abcd", ["B4", "B5", "B6", "B7"], strict=True):
        overlay.add_client(cls, broker).advertise(f"[class,eq,{cls}],[x,isPresent,''],[n,isPresent,0]")
    return overlay


def tree_of_star(interleave: random.Random | None = None) -> Overlay:
    """PADRES's five-broker star, B1 in the centre."""
    overlay = Overlay(interleave=interleave)
    for i in range(1, 6):
        overlay.add_broker(f"B{i}")
    for i in range(2, 6):
        overlay.connect("B1", f"B{i}")
    return overlay


def renamed(text: str, case: int) -> str:
    """Case ``case``'s own classes (a -> a3 and so on), so that all cases can share one overlay."""
    return re.sub(r"\[class,(eq,)?([a-d])\]", lambda m: f"[class,{m.group(1) or ''}{m.group(2)}{case}]", text)


def publish(overlay: Overlay, *texts: str) -> None:
    for text in texts:
        overlay.clients[text.split(",")[1].rstrip("]")].publish(text)


def detected_at(overlay: Overlay) -> dict[str, int]:
    return {
        b: r.status()["composite_detected"]
        for b, r in overlay.routers.items()
        if r.status()["composite_detected"]
    }


# semantics: the cases of the issue, each published from the four leaves of the tree ------------------

CASES = [
    (  # AND of two classes, with a string variable
        "{{[class,eq,a],[x,eq,$S$X]}&{[class,eq,b],[x,eq,$S$X]}}",
        ["[class,a],[n,1],[x,k1]", "[class,b],[n,1],[x,k2]", "[class,b],[n,2],[x,k1]"],
        [["[class,a],[n,1],[x,k1]", "[class,b],[n,2],[x,k1]"]],
    ),
    (  # OR fires per matching publication
        "{{[class,eq,a]}||{[class,eq,c]}}",
        ["[class,a],[n,1],[x,p]", "[class,b],[n,1],[x,p]", "[class,c],[n,1],[x,p]"],
        [["[class,a],[n,1],[x,p]"], ["[class,c],[n,1],[x,p]"]],
    ),
    (  # AND of ANDs across both subtrees, number variable
        "{{{[class,eq,a],[n,=,$I$N]}&{[class,eq,b],[n,=,$I$N]}}&{{[class,eq,c],[n,=,$I$N]}&{[class,eq,d],[n,=,$I$N]}}}",
        [
            "[class,a],[n,1],[x,p]",
            "[class,b],[n,1],[x,p]",
            "[class,c],[n,1],[x,p]",
            "[class,d],[n,2],[x,p]",
            "[class,d],[n,1.0],[x,p]",
        ],
        [
            [
                "[class,a],[n,1],[x,p]",
                "[class,b],[n,1],[x,p]",
                "[class,c],[n,1],[x,p]",
                "[class,d],[n,1],[x,p]",
            ]
        ],
    ),
    (  # (AND) || atom
        "{{{[class,eq,a]}&{[class,eq,b]}}||{[class,eq,c]}}",
        ["[class,a],[n,1],[x,p]", "[class,c],[n,1],[x,p]", "[class,b],[n,1],[x,p]"],
        [["[class,c],[n,1],[x,p]"], ["[class,a],[n,1],[x,p]", "[class,b],[n,1],[x,p]"]],
    ),
    (  # (OR) & atom
        "{{{[class,eq,a],[x,eq,$S$X]}||{[class,eq,b],[x,eq,$S$X]}}&{[class,eq,d],[x,eq,$S$X]}}",
        ["[class,b],[n,1],[x,g1]", "[class,d],[n,1],[x,g2]", "[class,d],[n,1],[x,g1]"],
        [["[class,d],[n,1],[x,g1]", "[class,b],[n,1],[x,g1]"]],  # in the canonical order of &
    ),
    (  # a three-way join
        "{{[class,eq,a],[x,eq,$S$X]}&{[class,eq,c],[x,eq,$S$X]}&{[class,eq,d],[x,eq,$S$X]}}",
        ["[class,a],[n,1],[x,p]", "[class,c],[n,1],[x,p]", "[class,d],[n,1],[x,q]", "[class,d],[n,1],[x,p]"],
        [["[class,a],[n,1],[x,p]", "[class,c],[n,1],[x,p]", "[class,d],[n,1],[x,p]"]],
    ),
    (  # sequence: b after a fires, b before a does not
        "{{[class,eq,a],[x,eq,$S$X]};{[class,eq,b],[x,eq,$S$X]}}",
        ["[class,b],[n,1],[x,p]", "[class,a],[n,1],[x,p]", "[class,a],[n,1],[x,q]", "[class,b],[n,2],[x,q]"],
        [["[class,a],[n,1],[x,q]", "[class,b],[n,2],[x,q]"]],
    ),
    (  # Times: three of c whose n grows by one; a gap breaks the run
        "Times({[class,eq,c]},3,n,1)",
        ["[class,c],[n,1],[x,p]", "[class,c],[n,3],[x,p]", "[class,c],[n,2],[x,p]", "[class,c],[n,3],[x,p]"],
        [["[class,c],[n,1],[x,p]", "[class,c],[n,2],[x,p]", "[class,c],[n,3],[x,p]"]],
    ),
    (  # Times of a join detected below
        "Times({{[class,eq,a],[n,=,$I$N]}&{[class,eq,b],[n,=,$I$N]}},2,n,1)",
        ["[class,a],[n,5],[x,p]", "[class,b],[n,5],[x,p]", "[class,a],[n,7],[x,p]", "[class,b],[n,7],[x,p]"],
        [],
    ),
]


@pytest.mark.parametrize("subscriber", ["B1", "B4", "B6"])
@pytest.mark.parametrize(("composite", "publications", "expected"), CASES)
def test_firings_are_those_of_one_detector_wherever_the_subscriber_is(
    subscriber: str, composite: str, publications: list[str], expected: list[list[str]]
) -> None:
    overlay = tree()
    sub = overlay.add_client("sub", subscriber)
    sub.subscribe_composite(composite)
    publish(overlay, *publications)
    assert sub.fired() == [[str(parse_publication(p)) for p in firing] for firing in expected]
    assert sub.take() == []  # composite firings are notifications, not plain deliveries


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("seed", range(6))
def test_random_traffic_fires_exactly_as_one_detector_at_the_edge(mode: str, seed: int) -> None:
    """The distributed detection gives the same firings as a single detector fed every
    publication (in this simulator, publications arrive everywhere in the order they were made)."""
    rng = random.Random(seed)
    shapes = [c for c, _, _ in CASES]
    texts = rng.sample(shapes, 3)
    overlay = tree(mode)
    subscribers = [overlay.add_client(f"s{i}", rng.choice(list(overlay.routers))) for i in range(3)]
    references = []
    for sub, text in zip(subscribers, texts, strict=True):
        sub.subscribe_composite(text)
        references.append(Detector(parse_composite(text)))
    expected: list[list[list[str]]] = [[] for _ in texts]
    for _ in range(60):
        text = f"[class,{rng.choice('abcd')}],[x,{rng.choice('pq')}],[n,{rng.randint(1, 4)}]"
        publication = parse_publication(text)
        overlay.clients[publication.cls].publish(publication)
        for i, detector in enumerate(references):
            for leaf, atom in enumerate(detector.composite.atoms()):
                if matches(atom.filter, publication, overlay.now):
                    expected[i] += [
                        [str(p) for p in m.publications]
                        for m in detector.feed(leaf, publication, overlay.now)
                    ]
    for sub, wanted in zip(subscribers, expected, strict=True):
        assert sorted(sub.fired()) == sorted(wanted)


# where detection happens and what it costs ---------------------------------------------------------


def test_a_join_is_detected_where_its_sources_meet_and_notified_once_per_link() -> None:
    overlay = tree()
    sub = overlay.add_client("sub", "B6")
    sub.subscribe_composite("{{[class,eq,a],[x,eq,$S$X]}&{[class,eq,b],[x,eq,$S$X]}}")
    assert detected_at(overlay) == {"B2": 1}  # a comes from B4, b from B5: they meet at B2
    overlay.reset_traffic()
    publish(overlay, "[class,a],[n,1],[x,p]", "[class,b],[n,1],[x,p]")
    assert sub.fired() == [["[class,a],[n,1],[x,p]", "[class,b],[n,1],[x,p]"]]
    links = {(s, t) for (s, t, kind) in overlay.traffic if kind == "Notify"}
    assert links == {("B2", "B1"), ("B1", "B3"), ("B3", "B6")}
    assert overlay.messages("Notify") == 3
    assert overlay.messages("Publish") == 2  # B4 -> B2 and B5 -> B2, and no further


def test_parts_are_split_top_down_by_destination() -> None:
    overlay = tree()
    overlay.add_client("sub", "B1").subscribe_composite(
        "{{{[class,eq,a]}&{[class,eq,b]}}||{{[class,eq,c]};{[class,eq,d]}}}"
    )
    assert detected_at(overlay) == {"B1": 1, "B2": 1, "B3": 1}


def test_a_composite_whose_sources_are_all_local_is_detected_at_their_broker() -> None:
    overlay = tree()
    overlay.add_client("a2", "B4").advertise("[class,eq,e]")
    sub = overlay.add_client("sub", "B7")
    sub.subscribe_composite("{{[class,eq,a]};{[class,eq,e]}}")
    assert detected_at(overlay) == {"B4": 1}
    overlay.clients["a"].publish("[class,a],[n,1],[x,p]")
    overlay.clients["a2"].publish("[class,e]")
    assert sub.fired() == [["[class,a],[n,1],[x,p]", "[class,e]"]]


def test_two_subscribers_share_the_detection_of_an_equal_part() -> None:
    overlay = tree()
    one, two = overlay.add_client("one", "B6"), overlay.add_client("two", "B7")
    part = "{{[class,eq,a],[x,eq,$S$X]}&{[class,eq,b],[x,eq,$S$X]}}"
    one.subscribe_composite(part)
    two.subscribe_composite("{" + part + "&{[class,eq,c],[x,eq,$S$X]}}")
    assert detected_at(overlay) == {"B2": 1, "B3": 1}  # the a&b join is done once, at B2
    assert overlay.routers["B2"].status()["composite_subscriptions"] == 1
    overlay.reset_traffic()
    publish(overlay, "[class,a],[n,1],[x,p]", "[class,b],[n,1],[x,p]", "[class,c],[n,1],[x,p]")
    assert one.fired() == [["[class,a],[n,1],[x,p]", "[class,b],[n,1],[x,p]"]]
    assert two.fired() == [["[class,a],[n,1],[x,p]", "[class,b],[n,1],[x,p]", "[class,c],[n,1],[x,p]"]]
    assert overlay.traffic[("B2", "B1", "Notify")] == 1  # one notification for both


@pytest.mark.parametrize("mode", MODES)
def test_unsubscribing_a_composite_removes_every_part_everywhere(mode: str) -> None:
    overlay = tree(mode)
    sub = overlay.add_client("sub", "B1")
    keep = overlay.add_client("keep", "B7").subscribe_composite("{{[class,eq,a]}&{[class,eq,b]}}")
    before = {
        b: (r.status()["subscriptions"], r.status()["composite_subscriptions"])
        for b, r in overlay.routers.items()
    }
    cid = sub.subscribe_composite("{{{[class,eq,a]}&{[class,eq,b]}}&{{[class,eq,c]};{[class,eq,d]}}}")
    sub.unsubscribe(cid)
    after = {
        b: (r.status()["subscriptions"], r.status()["composite_subscriptions"])
        for b, r in overlay.routers.items()
    }
    assert after == before  # the shared a&b part stays for the other subscriber, nothing else does
    overlay.clients["keep"].unsubscribe(keep)
    for router in overlay.routers.values():
        assert router.status()["subscriptions"] == 0 and router.status()["composite_subscriptions"] == 0


def test_subscriber_leaving_removes_its_composites() -> None:
    overlay = tree()
    overlay.add_client("sub", "B6").subscribe_composite(
        "{{[class,eq,a],[n,=,$I$N]}&{[class,eq,b],[n,=,$I$N]}}"
    )
    overlay.remove_client("sub")
    for router in overlay.routers.values():
        assert router.status()["subscriptions"] == 0 and router.status()["composite_subscriptions"] == 0


def test_a_composite_made_before_its_advertisements_stays_where_it_was_placed() -> None:
    """It used to move to the advertisements' meeting point (B1), and publications already on
    their way to B3 were lost to it (see the restart case in test_standins): it stays at B3, and
    its atoms' subscriptions are routed to the new sources."""
    overlay = Overlay.line(3)
    sub = overlay.add_client("sub", "B3")
    sub.subscribe_composite("{{[class,eq,a],[x,eq,$S$X]}&{[class,eq,b],[x,eq,$S$X]}}")
    assert detected_at(overlay) == {"B3": 1}
    overlay.add_client("pa", "B1").advertise("[class,eq,a],[x,isPresent,'']")
    overlay.add_client("pb", "B1").advertise("[class,eq,b],[x,isPresent,'']")
    assert detected_at(overlay) == {"B3": 1}
    overlay.clients["pa"].publish("[class,a],[x,p]")
    overlay.clients["pb"].publish("[class,b],[x,p]")
    assert sub.fired() == [["[class,a],[x,p]", "[class,b],[x,p]"]]


def test_a_lost_link_brings_the_detection_back_where_it_stays() -> None:
    """Placed again when the link to its detector is gone for good; when the link and its
    sources are back, it stays (a detection never moves to a new source: see above)."""
    overlay = Overlay.line(3)
    overlay.add_client("pa", "B1").advertise("[class,eq,a]")
    overlay.add_client("pb", "B1").advertise("[class,eq,b]")
    sub = overlay.add_client("sub", "B3")
    sub.subscribe_composite("{{[class,eq,a]}&{[class,eq,b]}}")
    assert detected_at(overlay) == {"B1": 1}
    overlay.disconnect("B1", "B2")
    assert detected_at(overlay) == {"B2": 1}  # its sources are gone for now; it waits closer to home
    assert overlay.routers["B1"].status()["composite_subscriptions"] == 0
    overlay.connect("B1", "B2")
    assert detected_at(overlay) == {"B2": 1}
    overlay.clients["pa"].publish("[class,a]")
    overlay.clients["pb"].publish("[class,b]")
    assert sub.fired() == [["[class,a]", "[class,b]"]]


# the workflow shape ----------------------------------------------------------------------------


def workflow_overlay() -> tuple[Overlay, SimClient, SimClient, SimClient]:
    overlay = Overlay.star(4)
    jobs, trigger = overlay.add_client("agentA", "B2"), overlay.add_client("issuer", "B3")
    jobs.advertise(
        "[class,eq,JOBSTATUS],[applname,eq,PAYROLL],[jobname,isPresent,''],[GID,isPresent,''],[status,isPresent,'']"
    )
    trigger.advertise("[class,eq,Trigger],[applname,eq,PAYROLL],[GID,isPresent,'']")
    agent_b = overlay.add_client("agentB", "B4")
    agent_b.subscribe_composite(WORKFLOW, clear=CLEAR)
    return overlay, jobs, trigger, agent_b


def test_workflow_shape_never_joins_two_generations() -> None:
    overlay, jobs, trigger, agent = workflow_overlay()
    jobs.publish("[class,JOBSTATUS],[applname,PAYROLL],[jobname,JobA],[GID,g1],[status,SUCCESS]")
    trigger.publish("[class,Trigger],[applname,PAYROLL],[GID,g2]")
    jobs.publish("[class,JOBSTATUS],[applname,PAYROLL],[jobname,JobA],[GID,g2],[status,FAILURE]")
    assert agent.fired() == []
    trigger.publish("[class,Trigger],[applname,PAYROLL],[GID,g1]")
    jobs.publish("[class,JOBSTATUS],[applname,PAYROLL],[jobname,JobA],[GID,g2],[status,NORUN]")
    fired = agent.fired()
    assert [[parse_publication(p)["GID"] for p in firing] for firing in fired] == [["g1", "g1"], ["g2", "g2"]]
    # statuses from B2 and triggers from B3 meet at B1; the || of two statuses keeps no state, so
    # it is not sent to B2 as a part: its atoms are plain subscriptions from B1
    assert detected_at(overlay) == {"B1": 1}


def test_memory_stays_flat_over_thousands_of_generations() -> None:
    """The join state is back to nothing after every generation (``peak``): a leak shows at the
    second generation, so two thousand are plenty."""
    overlay, jobs, trigger, agent = workflow_overlay()
    centre = overlay.routers["B1"]
    peak = 0
    for g in range(2_000):
        gid = f"g{g}"
        trigger.publish(f"[class,Trigger],[applname,PAYROLL],[GID,{gid}]")
        jobs.publish(f"[class,JOBSTATUS],[applname,PAYROLL],[jobname,JobA],[GID,{gid}],[status,SUCCESS]")
        if g % 3 == 0:  # an Alert-like branch that never completes: only APPL_END clears it
            jobs.publish(f"[class,JOBSTATUS],[applname,PAYROLL],[jobname,JobA],[GID,{gid}],[status,NORUN]")
        peak = max(peak, centre.status()["composite_waiting"])
        jobs.publish(f"[class,JOBSTATUS],[applname,PAYROLL],[jobname,APPL_END],[GID,{gid}],[status,SUCCESS]")
        assert len(agent.fired()) == 1
    status = centre.status()
    assert peak <= 1 and status["composite_waiting"] == 0 and status["composite_dropped"] == 0


def test_join_state_is_bounded_oldest_dropped_first_and_counted() -> None:
    overlay = Overlay.line(2)
    overlay.routers["B1"].composites.detector_limits = (100, None)
    overlay.add_client("p", "B1").advertise("[class,eq,a],[x,isPresent,0]")
    overlay.add_client("q", "B1").advertise("[class,eq,b],[x,isPresent,0]")
    sub = overlay.add_client("sub", "B2")
    sub.subscribe_composite("{{[class,eq,a],[x,=,$I$X]}&{[class,eq,b],[x,=,$I$X]}}")
    for x in range(250):
        overlay.clients["p"].publish(f"[class,a],[x,{x}]")
    status = overlay.routers["B1"].status()
    assert (status["composite_waiting"], status["composite_dropped"]) == (100, 150)
    overlay.clients["q"].publish("[class,b],[x,0]")  # dropped long ago
    overlay.clients["q"].publish("[class,b],[x,249]")
    assert sub.fired() == [["[class,a],[x,249]", "[class,b],[x,249]"]]


@pytest.mark.parametrize(("seed", "flaps"), [(seed, seed % 3) for seed in range(20)])
def test_every_case_at_once_with_links_interleaved_at_random(seed: int, flaps: int) -> None:
    """Subscriptions made before the advertisements, re-placed while everything is in flight; and
    links that go down and come back before the publications (join state is lost with a link, but
    the placement is not)."""
    rng = random.Random(seed)
    overlay = tree_of_star(rng)
    sub = overlay.add_client("sub", "B5")
    ids = [sub.subscribe_composite(renamed(composite, i)) for i, (composite, _, _) in enumerate(CASES)]
    sources = {
        cls: overlay.add_client(f"p{cls}", broker)
        for cls, broker in zip("abcd", ["B2", "B3", "B4", "B5"], strict=True)
    }
    for cls in "abcd":
        for i in range(len(CASES)):
            sources[cls].advertise(f"[class,eq,{cls}{i}],[x,isPresent,''],[n,isPresent,0]")
    overlay.run()
    for leaf in rng.sample(["B2", "B3", "B4", "B5"], flaps):
        overlay.disconnect("B1", leaf)
        overlay.connect("B1", leaf)
    for i, (_, publications, _) in enumerate(CASES):
        for text in publications:
            publication = parse_publication(renamed(text, i))
            sources[publication.cls[0]].publish(publication)
            overlay.run()
    fired: dict[str, list[list[str]]] = {sub_id: [] for sub_id in ids}
    for notification in sub.notifications:
        fired[notification.subscription].append([str(p) for p in notification.publications])
    for i, (sub_id, (_, _, firings)) in enumerate(zip(ids, CASES, strict=True)):
        assert fired[sub_id] == [[str(parse_publication(renamed(p, i))) for p in f] for f in firings], i


def test_a_part_that_keeps_no_state_is_not_sent_away_and_one_clear_serves_a_broker() -> None:
    overlay = tree()
    overlay.add_client("end", "B7").advertise("[class,eq,e],[x,isPresent,'']")
    one, two = overlay.add_client("one", "B1"), overlay.add_client("two", "B1")
    clear = "[class,eq,e],[x,eq,$S$X]"
    either = "{{[class,eq,a],[x,eq,$S$X]}||{[class,eq,b],[x,eq,$S$X]}}"
    first = one.subscribe_composite("{" + either + "&{[class,eq,c],[x,eq,$S$X]}}", clear=clear)
    two.subscribe_composite("{{[class,eq,a],[x,eq,$S$X]}&{[class,eq,c],[x,eq,$S$X]}}", clear=clear)
    # a and b both come from below B2, but their || keeps no state: it is not sent there
    assert detected_at(overlay) == {"B1": 2}
    # the atoms a and b, no part: the second detection's a (and c) is held at B1, behind its twin
    assert overlay.routers["B2"].status()["subscriptions"] == 2
    assert overlay.routers["B1"].status()["held_subscriptions"] == 2
    assert len(overlay.routers["B1"].composites.clear_subscriptions) == 1  # one clear for both detections
    publish(overlay, "[class,a],[n,1],[x,g]", "[class,c],[n,1],[x,h]")
    assert overlay.routers["B1"].status()["composite_waiting"] == 4
    overlay.clients["end"].publish("[class,e],[x,g]")
    assert overlay.routers["B1"].status()["composite_waiting"] == 2  # only h's c waits, in both
    one.unsubscribe(first)
    assert len(overlay.routers["B1"].composites.clear_subscriptions) == 1  # still used by the other


def test_a_detection_holding_partial_matches_is_not_moved_to_a_new_source() -> None:
    """A Trigger has passed and waits in the detection at B3 for a status no one advertised yet;
    then its agent advertises at B2. Moving the detection to B2 would lose the Trigger (it is not
    published again): it stays, the status is routed to it, and the generation fires."""
    overlay = Overlay.line(3)
    trigger = overlay.add_client("t", "B1")
    trigger.advertise("[class,eq,T],[g,isPresent,'']")
    sub = overlay.add_client("sub", "B3")
    sub.subscribe_composite("{[class,eq,S],[g,eq,$S$G]}&{[class,eq,T],[g,eq,$S$G]}")
    trigger.publish("[class,T],[g,g1]")
    status = overlay.add_client("x", "B2")
    status.advertise("[class,eq,S],[g,isPresent,'']")
    status.publish("[class,S],[g,g1]")
    assert sub.fired() == [["[class,S],[g,g1]", "[class,T],[g,g1]"]]
    assert detected_at(overlay) == {"B3": 1}


def test_a_part_detected_at_a_neighbour_is_not_moved_away_from_its_partial_matches() -> None:
    """Issue 14's stall: B3 detects the root and has sent the a&b part towards its sources (B1);
    an ``a`` waits there. Then ``c`` is advertised at B1 too, so the whole composite could go
    there: moving it would withdraw the part and its waiting ``a`` with it. It stays, and ``c``
    is routed to it."""
    overlay = Overlay.line(3)
    pa, pb, pc = (overlay.add_client(name, "B1") for name in ("pa", "pb", "pc"))
    pa.advertise("[class,eq,a]")
    pb.advertise("[class,eq,b]")
    sub = overlay.add_client("sub", "B3")
    sub.subscribe_composite("{{{[class,eq,a]}&{[class,eq,b]}};{[class,eq,c]}}")
    assert detected_at(overlay) == {"B1": 1, "B3": 1}
    pa.publish("[class,a]")
    pc.advertise("[class,eq,c]")
    pb.publish("[class,b]")
    pc.publish("[class,c]")
    assert sub.fired() == [["[class,a]", "[class,b]", "[class,c]"]]
    assert detected_at(overlay) == {"B1": 1, "B3": 1}


def test_a_composite_subscription_sent_again_keeps_its_join_state() -> None:
    """The deployer resends envelopes, a client resends its requests after a reconnection and a
    neighbour's may arrive twice: none of it starts the detection afresh (an ``a`` waits at B1)."""
    overlay = Overlay.line(3)
    pa, pb = overlay.add_client("pa", "B1"), overlay.add_client("pb", "B1")
    pa.advertise("[class,eq,a]")
    pb.advertise("[class,eq,b]")
    sub = overlay.add_client("sub", "B3")
    text = "{{[class,eq,a]}&{[class,eq,b]}}"
    sub.subscribe_composite(text)
    pa.publish("[class,a]")
    sub._request(CompositeSubscribe("1", parse_composite(text)), "1")  # the same ref: answered again
    other = sub.subscribe_composite(text)  # the same composite again under another ref: shared
    composites = overlay.routers["B1"].composites
    (hop, ref), detection = next(iter(composites.requests.items()))
    overlay._send(hop, "B1", CompositeSubscribe(ref, detection.composite))
    overlay.run()
    pb.publish("[class,b]")
    assert sub.fired() == [["[class,a]", "[class,b]"]] * 2  # one firing, for each of its two ids
    sub.unsubscribe(other)
    assert composites.status()["composite_waiting"] == 0
