"""A composite subscription's firings go with its priority: custody moves an urgent firing ahead
of a backlog, a part sent to a neighbour carries the highest priority of those who want it, and
state pickled before priorities restores with the default."""

from __future__ import annotations

import copyreg
import pickle
from typing import Any

import pytest

from broker.language import Policy, Publication, parse_composite, parse_filter, parse_publication
from broker.messages import (
    Advertise,
    Carry,
    CompositeSubscribe,
    LinkDown,
    LinkUp,
    Message,
    Notify,
    Publish,
)
from broker.routing import custody
from broker.routing.composites import Detection
from broker.routing.router import Router
from broker.sim import Overlay
from tests.routing.test_backlog import WINDOW, carried, numbers, publish, small, took
from tests.routing.test_expiry import wired

URGENT = parse_composite("{{[class,eq,u],[k,=,1]}&{[class,eq,u],[k,=,2]}}")


def with_firings(priority: int | None) -> Router:
    """``wired()`` B1 with a small window, whose ``pub`` also publishes class ``u``, and whose
    ``sub`` holds a composite subscription of two ``u`` (at ``priority``, or none given)."""
    router = small(wired())
    router.handle(Advertise("a2", parse_filter("[class,eq,u],[k,>,-1]")), "pub", 1.0)
    extra = {} if priority is None else {"priority": priority}
    router.handle(CompositeSubscribe("c", URGENT, **extra), "sub", 1.0)
    return router


def fire(router: Router, now: float = 10.0, session: str = "f") -> list[Message]:
    """``pub`` publishes the two ``u`` that complete the composite: what ``sub`` gets carried."""
    out: list[Message] = []
    for k in (1, 2):
        publication = Publication("u", {"k": k})
        out += carried(router.handle(Publish(f"{k}@{session}", publication), "pub", now), "sub")
    return out


@pytest.mark.parametrize(("priority", "first"), [(9, "Notify"), (None, "Deliver")])
def test_an_urgent_composite_s_firing_overtakes_a_backlog_of_deliveries(
    priority: int | None, first: str
) -> None:
    router = with_firings(priority)
    for n in range(200):
        publish(router, n)  # default priority: a window carried, the rest waits
    assert fire(router) == []  # the firing waits too: the window is full
    (moved,) = took(router, 1)  # room for one
    assert type(moved).__name__ == first
    if priority is None:
        assert numbers([moved]) == [WINDOW]  # in its turn, behind 192 deliveries
    else:
        assert isinstance(moved, Notify) and moved.priority == 9
        assert numbers(took(router, 2)) == [WINDOW]  # then the backlog, in order


def test_a_firing_carries_its_subscription_s_priority_and_custody_gives_it_that_lane() -> None:
    (notify,) = fire(with_firings(7))
    assert isinstance(notify, Notify) and notify.priority == 7 and custody.priority(notify) == 7
    (default,) = fire(with_firings(None))
    assert isinstance(default, Notify) and default.priority == 4 and custody.priority(default) == 4


def line(**options: Any) -> Overlay:
    """B1 - B2; publishers of ``a`` and ``b`` at B2, of ``c`` at B1."""
    overlay = Overlay(prompt_tooks=True, **options)
    for broker in ("B1", "B2"):
        overlay.add_broker(broker)
    overlay.connect("B1", "B2")
    for cls, broker in (("a", "B2"), ("b", "B2"), ("c", "B1")):
        overlay.add_client(cls, broker).advertise(f"[class,eq,{cls}],[g,isPresent,'']")
    return overlay


def between_brokers(overlay: Overlay) -> list[tuple[str, str, Message]]:
    """Record every message that crosses the B1 - B2 link from now on (what a Carry carries)."""
    seen: list[tuple[str, str, Message]] = []
    send = overlay._send

    def recording(source: str, target: str, message: Message) -> None:
        if {source, target} == {"B1", "B2"}:
            seen.append((source, target, message.message if isinstance(message, Carry) else message))
        send(source, target, message)

    overlay._send = recording  # type: ignore[method-assign]
    return seen


def notified(seen: list[tuple[str, str, Message]]) -> list[int]:
    return [m.priority for s, t, m in seen if (s, t) == ("B2", "B1") and isinstance(m, Notify)]


def asked(seen: list[tuple[str, str, Message]]) -> list[int]:
    return [m.priority for s, t, m in seen if (s, t) == ("B1", "B2") and isinstance(m, CompositeSubscribe)]


def test_a_part_detected_at_a_remote_broker_fires_back_with_its_priority() -> None:
    overlay = line()
    seen = between_brokers(overlay)
    urgent = overlay.add_client("urgent", "B1")
    urgent.subscribe_composite("{{[class,eq,a],[g,eq,$S$G]}&{[class,eq,b],[g,eq,$S$G]}}", priority=9)
    assert asked(seen) == [9]  # the whole detection goes to B2, with its priority
    overlay.clients["a"].publish("[class,a],[g,'1']")
    overlay.clients["b"].publish("[class,b],[g,'1']")
    assert notified(seen) == [9]
    assert [n.priority for n in urgent.notifications] == [9]


def test_a_part_shared_by_several_priorities_carries_the_highest_and_follows_it() -> None:
    overlay = line()
    seen = between_brokers(overlay)
    text = "{{{[class,eq,a],[g,eq,$S$G]};{[class,eq,b],[g,eq,$S$G]}}&{[class,eq,c],[g,eq,$S$G]}}"
    routine = overlay.add_client("routine", "B1")
    routine.subscribe_composite(text, priority=2)
    urgent = overlay.add_client("urgent", "B1")
    urgent_id = urgent.subscribe_composite(text, priority=9)
    assert asked(seen) == [2, 9]  # the part of a & b at B2: asked again when an urgent one came

    def generation(g: str) -> None:
        for cls in "abc":
            overlay.clients[cls].publish(f"[class,{cls}],[g,'{g}']")

    generation("1")
    assert notified(seen) == [9]  # between brokers: the highest of those who want it
    assert [n.priority for n in routine.notifications] == [2]  # each its own again at B1
    assert [n.priority for n in urgent.notifications] == [9]
    urgent.unsubscribe(urgent_id)
    assert asked(seen) == [2, 9, 2]  # the urgent one gone: the part is routine again
    generation("2")
    assert notified(seen) == [9, 2]
    assert [n.priority for n in routine.notifications] == [2, 2]


class _Old:
    """Pickles as ``cls`` with ``state``: the shape a version before priorities wrote."""

    def __init__(self, cls: type, state: object) -> None:
        self.cls, self.state = cls, state

    def __reduce__(self) -> tuple[object, ...]:
        return (copyreg._reconstructor, (self.cls, object, None), self.state)  # type: ignore[attr-defined]


def test_notifications_and_composite_subscriptions_pickled_before_priorities_have_the_default() -> None:
    publication = parse_publication("[class,u],[k,1]")
    notify = pickle.loads(pickle.dumps(_Old(Notify, ["B1/sub/c", (publication,), ()])))
    assert notify == Notify("B1/sub/c", (publication,)) and notify.priority == 4
    old = _Old(CompositeSubscribe, ["c", URGENT, None, 5, Policy.RECENT])
    subscribe = pickle.loads(pickle.dumps(old))
    assert subscribe == CompositeSubscribe("c", URGENT, None, 5, Policy.RECENT) and subscribe.priority == 4


def test_a_router_state_pickled_before_priorities_restores_with_the_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A detection without its requesters' priorities, and a Notify held for a client away
    without its own: both the default once restored, and the router goes on."""
    router = with_firings(9)
    router.handle(LinkDown(), "sub", 5.0)
    fire(router)  # held for sub while it is away
    held = [m for m, _ in router.custody.channels["sub"].held.values() if isinstance(m, Notify)]
    assert [n.priority for n in held] == [9]

    def old_notify(self: Notify) -> list[object]:
        return [self.subscription, self.publications, self.bindings]

    def old_detection(self: Detection) -> tuple[None, dict[str, object]]:
        slots = {name: getattr(self, name) for name in Detection.__slots__}
        del slots["priorities"], slots["priority"]
        return None, slots

    with monkeypatch.context() as patched:
        patched.setattr(Notify, "__getstate__", old_notify, raising=False)
        patched.setattr(Detection, "__getstate__", old_detection, raising=False)
        old = pickle.dumps(router.snapshot())
    restored = small(Router.restore(pickle.loads(old)))
    (detection,) = restored.composites.detections.values()
    assert detection.priorities == {} and detection.priority == 4
    held = [m for m, _ in restored.custody.channels["sub"].held.values() if isinstance(m, Notify)]
    assert [n.priority for n in held] == [4]
    restored.handle(LinkUp(False), "sub", 20.0)
    (again,) = fire(restored, 20.0, "g")
    assert isinstance(again, Notify) and again.priority == 4
