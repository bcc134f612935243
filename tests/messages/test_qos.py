"""A publication's quality of service: what it accepts, how the first broker fixes its expiry,
how it crosses the wire, and a broker's log of the version before (messages without it)."""

from __future__ import annotations

import pickle

import msgpack
import pytest

from broker.language import Publication
from broker.messages import DEFAULT_QOS, Cancel, Deliver, Publish, Qos
from broker.messages.qos import parse_duration
from broker.transport import BadMessage, decode


@pytest.mark.parametrize(
    ("settings", "error"),
    [
        ({"priority": 10}, "priority must be an integer from 0 to 9, not 10"),
        ({"priority": True}, "priority must be an integer from 0 to 9"),
        ({"ttl": 0}, "ttl must be a number of seconds above 0"),
        ({"ttl": "5"}, "ttl must be a number of seconds above 0"),
        ({"expires": -1.0}, "expires must be epoch seconds"),
        ({"ack": "maybe"}, "ack must be one of none, client, receipt, not 'maybe'"),
        ({"mid": "two words"}, "a message id is at most 128 characters without spaces"),
        ({"retain": 1}, "persistent and retain must be true or false"),
        ({"cancel": "me"}, "cancel must be one of originator, any, not 'me'"),
    ],
)
def test_a_bad_setting_is_refused_naming_it(settings: dict[str, object], error: str) -> None:
    with pytest.raises(ValueError, match=error):
        Qos(**settings)  # type: ignore[arg-type]


def test_the_first_broker_turns_a_ttl_into_an_expiry_on_its_clock() -> None:
    asked = Qos(priority=9, ttl=30.0, mid="m1")
    fixed = asked.fixed(1000.0)
    assert fixed == Qos(priority=9, expires=1030.0, mid="m1")
    assert not fixed.expired(1029.9) and fixed.expired(1030.0)
    assert DEFAULT_QOS.fixed(1000.0) is DEFAULT_QOS and not DEFAULT_QOS.expired(1e10)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30s", 30), ("250ms", 0.25), ("5m", 300), ("2h", 7200), ("1d", 86400), ("1.5", 1.5)],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "s", "5 minutes", "-3s", "1e3"])
def test_a_bad_duration_says_what_is_accepted(text: str) -> None:
    with pytest.raises(ValueError, match="is not a duration: give a number with ms, s, m, h or d"):
        parse_duration(text)


def test_a_bad_quality_of_service_off_the_wire_is_a_bad_message() -> None:
    frame = msgpack.packb(
        ["pub", "1", ["t", []], 32, True, None, [12, None, None, True, False, "none", "", "any"]]
    )
    with pytest.raises(BadMessage, match="bad Publish: priority must be an integer from 0 to 9, not 12"):
        decode(frame)
    with pytest.raises(BadMessage, match="a quality of service must be an array of 8 fields"):
        decode(msgpack.packb(["deliver", ["s"], ["t", []], "i", 1.0, [9]]))


@pytest.mark.parametrize("kind", [Publish, Deliver])
def test_a_message_pickled_before_it_had_a_quality_of_service_has_the_default(kind: type) -> None:
    """A broker's log of the format before holds such messages (in custody): they come back with
    the default, not without the field."""
    message = (
        Publish("1", Publication("t", {"n": 1}))
        if kind is Publish
        else Deliver(("s",), Publication("t", {"n": 1}), "B1/c/1", 1.0)
    )
    rebuild, args, state = message.__reduce_ex__(pickle.HIGHEST_PROTOCOL)[:3]
    older = rebuild(*args)
    older.__setstate__(list(state)[:-1])  # as the version before pickled it
    assert older == message and older.qos is DEFAULT_QOS


def test_a_cancel_pickled_before_cancels_were_signed_is_unsigned() -> None:
    """Held in custody in a snapshot of the version before (four fields): it comes back with no
    signature, which is what it was, and a signed one keeps its own."""
    message = Cancel("B1/c/1", "a1", "c")
    rebuild, args, state = message.__reduce_ex__(pickle.HIGHEST_PROTOCOL)[:3]
    older = rebuild(*args)
    older.__setstate__(list(state)[:4])
    assert older == message and not older.signed
    signed = Cancel("B1/c/2", "a1", "c", at=1.7e9, signer=b"cert", signature=b"sig")
    assert pickle.loads(pickle.dumps(signed)) == signed and signed.signed
