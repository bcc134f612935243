"""A composite subscription's priority and its notifications' on the wire: left out when it is
the default (the frames from before priorities), read with and without, refused out of range."""

from __future__ import annotations

import msgpack
import pytest

from broker.errors import BadMessage
from broker.language import Policy, parse_composite, parse_publication
from broker.messages import Carry, CompositeSubscribe, Notify
from broker.transport.codec import decode, encode

COMPOSITE = parse_composite("{{[class,eq,a],[g,eq,$S$G]}&{[class,eq,b],[g,eq,$S$G]}}")
PUBLICATION = parse_publication("[class,a],[g,'1']")
ATOM = ["atom", ["a", [["x", "eq", ["var", "S", "X"]]]]]
BOTH = ["and", [ATOM, ["atom", ["b", [["x", "eq", ["var", "S", "X"]]]]]]]


def fields(message: object) -> list[object]:
    return msgpack.unpackb(encode(message)[4:])  # type: ignore[arg-type,no-any-return]


@pytest.mark.parametrize(
    ("message", "length"),
    [
        (CompositeSubscribe("c", COMPOSITE), 5),  # as before policies and priorities
        (CompositeSubscribe("c", COMPOSITE, policy=Policy.RECENT), 6),
        (CompositeSubscribe("c", COMPOSITE, priority=9), 7),  # the policy goes too, chronicle
        (CompositeSubscribe("c", COMPOSITE, policy=Policy.RECENT, priority=0), 7),
        (Notify("B1/c/1", (PUBLICATION,)), 4),  # as before priorities
        (Notify("B1/c/1", (PUBLICATION,), priority=9), 5),
        (Notify("B1/c/1", (PUBLICATION,), (("G", "1"),), priority=2), 5),
    ],
)
def test_priorities_round_trip_and_the_default_is_left_out(message: object, length: int) -> None:
    assert len(fields(message)) == length
    assert decode(encode(message)[4:]) == message  # type: ignore[arg-type]
    carried = Carry(3, message)  # type: ignore[arg-type]
    assert decode(encode(carried)[4:]) == carried


def test_frames_from_before_priorities_read_with_the_default() -> None:
    old = decode(msgpack.packb(["csub", "c", BOTH, None, 5, "recent"]))
    assert isinstance(old, CompositeSubscribe) and old.priority == 4 and old.policy is Policy.RECENT
    notify = decode(msgpack.packb(["notify", "s", [["a", [["g", "1"]]]], [["G", "1"]]]))
    assert isinstance(notify, Notify) and notify.priority == 4


@pytest.mark.parametrize("priority", [10, -1, True, "9", 4.0, None])
@pytest.mark.parametrize("carried", [False, True])
def test_a_priority_out_of_range_is_a_bad_message(priority: object, carried: bool) -> None:
    frames = [
        (["csub", "c", BOTH, None, 5, "chronicle", priority], "CompositeSubscribe"),
        (["notify", "s", [["a", []]], [], priority], "Notify"),
    ]
    for payload, name in frames:
        frame = ["carry", 1, payload] if carried else payload
        with pytest.raises(
            BadMessage, match=f"bad {'Carry' if carried else name}: .*priority must be an integer from 0 to 9"
        ):
            decode(msgpack.packb(frame))
    with pytest.raises(ValueError, match="priority must be an integer from 0 to 9"):
        CompositeSubscribe("c", COMPOSITE, priority=priority)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="priority must be an integer from 0 to 9"):
        Notify("s", (PUBLICATION,), priority=priority)  # type: ignore[arg-type]


def test_a_bad_policy_before_a_priority_is_a_bad_message() -> None:
    with pytest.raises(BadMessage, match="bad CompositeSubscribe"):
        decode(msgpack.packb(["csub", "c", BOTH, None, 5, "whatever", 9]))
    with pytest.raises(BadMessage, match="expected 4 fields, got 7"):
        decode(msgpack.packb(["csub", "c", BOTH, None, 5, "recent", 9, 9]))
