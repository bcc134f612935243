"""What a broker of a site asks its site to take: one entry of the site's log.

An input is what a router takes (a message, the hop it came from, the time), and the member it
came through: the site's routing state is one router for the whole site, and which member a hop
is attached to decides who sends it what. Encoded as a msgpack array ``[member, hop, now, kind,
payload]``: a message that crosses links as its wire frame (the codec's checks on the way back
in), the adapter's own events by their fields. The entry is read by every member of the site,
so it is as strictly checked as a frame off the network.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgpack

from broker.errors import BadMessage
from broker.messages import LinkDown, LinkUp, Message, Tick
from broker.transport.codec import decode, encode

__all__ = ["Input", "MemberDown", "decode_input", "encode_input"]


@dataclass(frozen=True, slots=True)
class MemberDown:
    """A member of the site is gone (its leader stopped hearing it): every hop attached to it is
    down, as if each of its links had closed."""

    member: str


@dataclass(frozen=True, slots=True)
class Input:
    member: str
    hop: str
    now: float
    message: Message | MemberDown


def encode_input(item: Input) -> bytes:
    message = item.message
    payload: object
    if isinstance(message, LinkUp):
        fields = [message.broker, message.epoch, message.resume, message.identity, message.role, message.name]
        kind, payload = "up", fields
    elif isinstance(message, LinkDown):
        kind, payload = "down", None
    elif isinstance(message, Tick):
        kind, payload = "tick", None
    elif isinstance(message, MemberDown):
        kind, payload = "member-down", message.member
    else:
        kind, payload = "wire", encode(message)[4:]  # type: ignore[arg-type]
    return msgpack.packb([item.member, item.hop, item.now, kind, payload])  # type: ignore[no-any-return]


def decode_input(data: bytes) -> Input:
    """The input in an entry; ValueError (one line) for anything else."""
    try:
        member, hop, now, kind, payload = msgpack.unpackb(data, raw=False)
        if not (isinstance(member, str) and isinstance(hop, str) and type(now) in (int, float)):
            raise ValueError("member, hop and time must be two strings and a number")
        return Input(member, hop, float(now), _message(kind, payload))
    except (ValueError, TypeError, BadMessage, msgpack.UnpackException) as error:
        raise ValueError(f"not a site input: {error}") from None


def _message(kind: Any, payload: Any) -> Message | MemberDown:
    if kind == "up" and isinstance(payload, list) and len(payload) == 6:
        return LinkUp(*payload)
    if kind == "down":
        return LinkDown()
    if kind == "tick":
        return Tick()
    if kind == "member-down" and isinstance(payload, str):
        return MemberDown(payload)
    if kind == "wire" and isinstance(payload, bytes):
        message = decode(payload)
        if isinstance(message, LinkUp | LinkDown | Tick):
            raise ValueError("a link event cannot arrive as a frame")
        return message  # type: ignore[return-value]
    raise ValueError(f"unknown input {kind!r}")
