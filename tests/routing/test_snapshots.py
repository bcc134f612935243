"""A router's snapshot (``Router.snapshot``) is its state, part by part, and restored
(``Router.restore``, through a pickle as ``RouterLog`` keeps it) it routes as the router did."""

from __future__ import annotations

import pickle

import pytest

from broker.language import Publication, parse_filter
from broker.messages import Advertise, Carry, LinkDown, LinkUp, Message, Publish, Subscribe, Took
from broker.routing.router import Router
from broker.sim import Overlay

COMPOSITE = "{{[class,eq,stock],[number,>,120]}&{[class,eq,stock],[price,<,80]}}"


def kept(router: Router) -> Router:
    return Router.restore(pickle.loads(pickle.dumps(router.snapshot(), pickle.HIGHEST_PROTOCOL)))


def busy() -> Router:
    """B2 between B1 and B3 (away), with a client's advertisement, subscriptions, a stand-in and
    what custody holds."""
    router = Router("B2", session_grace=600, epoch="B2.1")
    inputs: list[tuple[Message, str]] = [
        (LinkUp(True, epoch="B1-1"), "B1"),
        (LinkUp(True, epoch="B3-1"), "B3"),
        (LinkUp(False), "pub"),
        (LinkUp(False), "sub"),
        (Advertise("a", parse_filter("[class,eq,t],[n,>,-1]")), "pub"),
        (Subscribe("s", parse_filter("[class,eq,t]")), "sub"),
        (LinkDown(), "B3"),
        (Carry(1, Advertise("a1", parse_filter("[class,eq,u],[n,>,-1]"))), "B1"),
        (Publish("1", Publication("t", {"n": 1})), "pub"),
    ]
    for now, (message, hop) in enumerate(inputs, start=1):
        router.handle(message, hop, float(now))
    return router


NEXT: list[tuple[Message, str]] = [
    (Carry(2, Publish("B1/p/1", Publication("u", {"n": 2}))), "B1"),
    (Publish("2", Publication("t", {"n": 3})), "pub"),
    (LinkUp(True, epoch="B3-2"), "B3"),
    (Took(1), "B3"),
    (Subscribe("s2", parse_filter("[class,eq,u]")), "sub"),
    (LinkDown(), "sub"),
]


def test_a_restored_router_answers_what_comes_next_as_the_router_it_was_taken_of() -> None:
    router = busy()
    restored = kept(router)
    assert restored.status(detail=True) == router.status(detail=True)
    for now, (message, hop) in enumerate(NEXT, start=20):
        assert restored.handle(message, hop, float(now)) == router.handle(message, hop, float(now))
    assert restored.status(detail=True) == router.status(detail=True)


def test_a_snapshot_is_the_router_s_settings_and_its_parts_states_by_name() -> None:
    snapshot = busy().snapshot()
    assert set(snapshot) == {
        "id",
        "settings",
        "seen",
        "counters",
        "tables",
        "composites",
        "custody",
        "sessions",
        "stand_ins",
        "publishers",
        "retention",
        "leases",
    }
    assert set(snapshot["custody"]) == {"channels", "taken_adverts", "opened"}
    assert snapshot["settings"]["session_grace"] == 600 and snapshot["settings"]["epoch"] == "B2.1"


def test_records_two_parts_share_are_one_record_once_restored() -> None:
    restored = kept(busy())
    channels = restored.custody.channels
    assert restored.stand_ins.made and all(
        channels[hop] is then for hop, (then, _) in restored.stand_ins.made.items()
    )
    assert restored.owned is restored.sessions.owned
    restored.counters["probe"] += 1
    assert restored.custody.counters is restored.counters is restored.sessions.counters


def test_a_part_refuses_a_state_of_another_shape() -> None:
    state = busy().snapshot()
    del state["custody"]["opened"]
    with pytest.raises(ValueError, match="Custody: a state of"):
        Router.restore(state)


def test_a_broker_crashed_and_restored_from_its_snapshot_keeps_its_composite_detections() -> None:
    overlay = Overlay.line(2, session_grace=60.0)
    stock = overlay.add_client("stock", "B1")
    stock.advertise("[class,eq,stock],[number,isPresent,0],[price,isPresent,0]")
    sub = overlay.add_client("sub", "B2")
    sub.subscribe_composite(COMPOSITE)
    stock.publish("[class,stock],[number,130],[price,90]")
    overlay.crash("B1")  # a snapshot, restored by ``recover``
    overlay.recover("B1")
    stock.publish("[class,stock],[price,70],[number,0]")
    assert sub.fired() == [["[class,stock],[number,130],[price,90]", "[class,stock],[number,0],[price,70]"]]
