"""Composite subscriptions and notifications on the wire."""

from __future__ import annotations

import msgpack
import pytest

from broker.errors import BadMessage
from broker.language import parse_composite, parse_filter, parse_publication
from broker.messages import CompositeSubscribe, Notify
from broker.transport.codec import decode, encode
from tests.routing.test_detection import WORKFLOW

COMPOSITES = [
    WORKFLOW,
    "{[class,eq,a]}",
    "{{[class,eq,a]};{[class,eq,b],[n,=,$F$v]}}",
    "Times({{[class,eq,a]}||{[class,eq,b]}},3,n,-1.5)",
    "{{[class,eq,a],[time,>,'2026-01-01']}&{[class,eq,b],[time,<,now+1h]}}",
]


@pytest.mark.parametrize("text", COMPOSITES)
def test_composite_subscriptions_round_trip(text: str) -> None:
    composite = parse_composite(text)
    messages = [CompositeSubscribe("c1", composite)]
    if "$S$X" in text:
        clear = parse_filter("[class,eq,JOBSTATUS],[GID,eq,$S$X]", allow_variables=True)
        messages.append(CompositeSubscribe("c2", composite, clear, 7))
    for message in messages:
        assert decode(encode(message)[4:]) == message


def test_a_clear_condition_must_use_only_variables_of_its_composite() -> None:
    clear = parse_filter("[class,eq,JOBSTATUS],[GID,eq,$S$X]", allow_variables=True)
    with pytest.raises(ValueError, match=r"clear uses \$S\$X, which the composite does not bind"):
        CompositeSubscribe("c", parse_composite("{[class,eq,a]}"), clear)


def test_notifications_round_trip() -> None:
    message = Notify(
        "B1/c/1", (parse_publication("[class,a],[n,1.5]"), parse_publication("[class,b],[s,'x y']"))
    )
    assert decode(encode(message)[4:]) == message
    between_brokers = Notify(message.subscription, message.publications, (("N", 1.5), ("S", "x y")))
    assert decode(encode(between_brokers)[4:]) == between_brokers


ATOM = ["atom", ["a", [["x", "eq", ["var", "S", "X"]]]]]


@pytest.mark.parametrize(
    ("payload", "fragment"),
    [
        (["csub", "1", ["and", [ATOM]], None, 5], "needs at least two different operands"),
        (["csub", "1", ["xor", []], None, 5], "a composite must be"),
        (["csub", "1", ["and", "nope"], None, 5], "operands must be an array"),
        (["csub", "1", ["times", ATOM, 0, "n", 1], None, 5], "count of at least 1"),
        (["csub", "1", ["times", ATOM, 2, "n", "1"], None, 5], "numeric step"),
        (
            ["csub", "1", ["and", [ATOM, ["atom", ["b", [["x", "=", ["var", "I", "X"]]]]]]], None, 5],
            "also used as",
        ),
        (["csub", "1", ATOM, ["c", [["x", "=", ["var", "I", "X"]]]], 5], "clear uses $I$X"),
        (["csub", "1", ATOM, None], "expected 4 fields"),
        (["notify", "s", [], []], "at least one publication"),
        (["notify", "s", "x", []], "publications must be an array"),
        (["notify", "s", [["a", []]]], "expected 3 fields"),
        (["notify", "s", [["a", []]], "ab"], "bindings must be an array"),
        (["notify", "s", [["a", []]], ["ab"]], "binding must be an array"),
        (["notify", "s", [["a", []]], [["1x", 1]]], "not a valid variable name"),
        (["notify", "s", [["a", []]], [["X", 1], ["X", 2]]], "bound twice"),
        (["notify", "s", [["a", []]], [["X", [1]]]], "invalid value|not a number"),
    ],
)
def test_bad_composites_are_bad_messages(payload: list[object], fragment: str) -> None:
    with pytest.raises(BadMessage, match=fragment.replace("$", r"\$")):
        decode(msgpack.packb(payload))


def nested(levels: int) -> bytes:
    """A CompositeSubscribe frame nesting ``levels`` of and and or (alternately, so that nothing is
    flattened) over atoms, built byte by byte: msgpack's packer refuses to nest this deep, a
    hostile peer's need not."""
    pack = msgpack.packb
    return b"".join(
        [
            b"\x95" + pack("csub") + pack("1"),
            *(b"\x92" + pack(("and", "or")[level % 2]) + b"\x92" for level in range(levels)),
            pack(ATOM),
            pack(["atom", ["b", []]]) * levels,
            pack(None) + pack(5),
        ]
    )


def test_a_composite_nested_deeper_than_the_limit_is_a_bad_message_not_a_crash() -> None:
    assert decode(nested(31)).composite.depth == 32  # type: ignore[union-attr]
    for levels in (32, 500, 1000):  # 500: deep enough to exhaust the stack before the limit
        with pytest.raises(BadMessage, match=r"nest at most 32 levels|StackError"):
            decode(nested(levels))
