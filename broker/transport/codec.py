"""The wire codec of broker links: messages <-> length-prefixed msgpack frames. Pure, no I/O.

A frame is a 4-byte big-endian length and that many bytes of msgpack: an array ``[tag, *fields]``.

====================  ==============  =====================================================
message               tag             fields
====================  ==============  =====================================================
Advertise             ``adv``         id, filter, ttl
Unadvertise           ``unadv``       id
Subscribe             ``sub``         id, filter, ttl[, lease]
Renew                 ``renew``       [subscription ids]
Pull                  ``pull``        how many more, or nil: pushed
CompositeSubscribe    ``csub``        id, composite, clear filter or nil, ttl[, policy[, priority]]
Unsubscribe           ``unsub``       id
Publish               ``pub``         id, publication, ttl, ack, time or nil[, qos]
Deliver               ``deliver``     [subscription ids], publication, id, time[, qos]
Retained              ``retained``    subscription id, publication, id, time, qos
Cancel                ``cancel``      id, message id, by, ttl[, at, signer, signature]
Notify                ``notify``      subscription id, [publications], [[name, value], ...][, priority]
Ack                   ``ack``         ref, id
Refuse                ``refuse``      ref, reason
StatusRequest         ``statreq``     ref[, detail]: true for the tables too
StatusReply           ``status``      ref, {str: msgpack-native value}
Bye                   ``bye``         (none): a client leaves for good
Carry                 ``carry``       seq, the carried message's array (one of the above)
Took                  ``took``        seq: custody of everything carried up to it is taken
Hello                 ``hello``       kind, id, version[, epoch, peer epoch, seq[, site[, noted]]]
Standby               ``standby``     ref, [[key, [identity, ...], takeover seconds], ...]
TakeOver              ``takeover``    ref, primary client, key
Ping / Pong           ``ping/pong``   (none)
VoteRequest           ``vote``        term, candidate, last index, last term, pre-vote
VoteReply             ``voted``       term, voter, granted, pre-vote
Append                ``append``      term, leader, prev index, prev term, [[term, index, data], ...], commit
AppendReply           ``appended``    term, follower, success, match
InstallSnapshot       ``install``     term, leader, last index, last term, data
Piece                 ``piece``       total, at, data: a part of a larger frame's payload (member links)
====================  ==============  =====================================================

The five before the last are a site's consensus (``broker.consensus``), between the brokers of
one site; a Piece too. A ``qos`` is ``[priority, ttl or nil, expires or nil, persistent, retain,
ack, mid, cancel]`` (``broker.messages.qos``), left out when it is the default. So are a
composite subscription's policy when it is chronicle and nothing follows it, and its priority and
a notification's when they are the default (4): such frames are the frames from before them.

A composite is ``["atom", filter]``, ``["and" | "or" | "seq", [composites]]`` or ``["times",
composite, count, attribute, step]``. A publication is ``[class, [[name, value], ...]]`` and a
filter ``[class, [[attribute, op, value], ...]]``, values being int, float or str (msgpack keeps int
and float apart), or ``["var", kind, name]``, ``["rel", offset_seconds]`` or ``["abs",
epoch_seconds]``. An instant that a float cannot carry to the microsecond (far from 1970) is sent as
``["abs", whole_seconds, microseconds]``, so every filter the model accepts arrives equal.

Decoding trusts nothing: whatever the bytes, ``decode`` returns a valid message or raises
``BadMessage``, so a hostile peer costs one error reply, never a crashed broker.
"""

from __future__ import annotations

import math
import struct
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import msgpack
import msgspec

from broker.errors import BadMessage, FrameTooLarge
from broker.language import MAX_DEPTH, Policy
from broker.language.model import (
    And,
    Atom,
    Composite,
    Filter,
    Or,
    Predicate,
    Publication,
    Sequence,
    Times,
    predicate_value,
)
from broker.language.values import TimeRef, Var
from broker.messages import (
    CARRIED,
    Ack,
    Advertise,
    Append,
    AppendReply,
    Bye,
    Cancel,
    Carry,
    CompositeSubscribe,
    Deliver,
    Entry,
    Hello,
    InstallSnapshot,
    Notify,
    Piece,
    Ping,
    Pong,
    Publish,
    Pull,
    Refuse,
    Renew,
    Retained,
    Standby,
    StatusReply,
    StatusRequest,
    Subscribe,
    TakeOver,
    Took,
    Unadvertise,
    Unsubscribe,
    VoteReply,
    VoteRequest,
    WireMessage,
)
from broker.messages.qos import DEFAULT_QOS, Qos

__all__ = [
    "MAX_FRAME",
    "FrameDecoder",
    "carriable",
    "decode",
    "encode",
    "in_pieces",
]

MAX_FRAME = 1 << 20  # bytes of payload; a larger prefix means a broken or hostile peer
_PIECE_FIELDS = 32  # bytes a Piece's frame takes beside its data: its tag, total, place, bin header

_HEADER = struct.Struct(">I")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_STATUS_DEPTH = 32  # nesting allowed inside a status reply; also stops a cyclic dict on encode
_MAX_ERROR = 200  # characters of an error message: a hostile frame must not echo a megabyte back


# ---------------------------------------------------------------------------------------- encoding


def _publication(publication: Publication) -> list[Any]:
    return [publication.cls, tuple(publication.fields.items())]


def _filter(filter_: Filter) -> list[Any]:
    return [filter_.cls, [[p.attribute, p.op, _value(p.value)] for p in filter_.predicates]]


def _value(value: object) -> object:
    if isinstance(value, Var):
        return ["var", value.kind, value.name]
    if isinstance(value, TimeRef):
        if value.instant is None:
            return ["rel", value.offset]
        return ["abs", *_instant(value.instant)]
    return value


def _instant(instant: datetime) -> list[int | float]:
    seconds = instant.timestamp()
    try:
        if datetime.fromtimestamp(seconds, UTC) == instant:
            return [seconds]
    except (ValueError, OverflowError, OSError):
        pass  # 9999-12-31T23:59:59.999999 rounds up into year 10000
    delta = instant - _EPOCH
    return [delta.days * 86400 + delta.seconds, delta.microseconds]


_ENCODERS: dict[type, Callable[[Any], list[Any]]] = {
    Advertise: lambda m: ["adv", m.id, _filter(m.filter), m.ttl],
    Unadvertise: lambda m: ["unadv", m.id],
    Subscribe: lambda m: ["sub", m.id, _filter(m.filter), m.ttl, *((m.lease,) if m.lease else ())],
    Renew: lambda m: ["renew", list(m.ids)],
    Pull: lambda m: ["pull", m.more],
    CompositeSubscribe: lambda m: [
        "csub",
        m.id,
        _composite(m.composite),
        None if m.clear is None else _filter(m.clear),
        m.ttl,
        *_csub_tail(m),
    ],
    Notify: lambda m: [
        "notify",
        m.subscription,
        [_publication(p) for p in m.publications],
        [list(pair) for pair in m.bindings],
        *(() if m.priority == DEFAULT_QOS.priority else (m.priority,)),
    ],
    Unsubscribe: lambda m: ["unsub", m.id],
    Publish: lambda m: [
        "pub",
        m.id,
        _publication(m.publication),
        m.ttl,
        m.ack,
        m.time,
        *(() if m.qos is DEFAULT_QOS else (_qos(m.qos),)),
    ],
    Retained: lambda m: ["retained", m.subscription, _publication(m.publication), m.id, m.time, _qos(m.qos)],
    Cancel: lambda m: [
        "cancel",
        m.id,
        m.mid,
        m.by,
        m.ttl,
        *(() if m.at is None else (m.at, m.signer, m.signature)),
    ],
    Deliver: lambda m: [
        "deliver",
        m.subscriptions,
        _publication(m.publication),
        m.id,
        m.time,
        *(() if m.qos is DEFAULT_QOS else (_qos(m.qos),)),
    ],
    Ack: lambda m: ["ack", m.ref, m.id],
    Refuse: lambda m: ["refuse", m.ref, m.reason],
    StatusRequest: lambda m: ["statreq", m.ref, *([True] if m.detail else [])],
    Bye: lambda m: ["bye"],
    StatusReply: lambda m: ["status", m.ref, _check_status(m.status)],
    Carry: lambda m: ["carry", m.seq, _ENCODERS[type(m.message)](m.message)],
    Took: lambda m: ["took", m.seq],
    Hello: lambda m: [
        "hello",
        m.kind,
        m.id,
        m.version,
        *((m.epoch, m.peer_epoch, m.took) if m.took or m.epoch or m.peer_epoch or m.site or m.noted else ()),
        *((m.site,) if m.site or m.noted else ()),
        *((m.noted,) if m.noted else ()),
    ],
    Standby: lambda m: ["standby", m.ref, [[key, list(who), takeover] for key, who, takeover in m.keys]],
    TakeOver: lambda m: ["takeover", m.ref, m.primary, m.key],
    Ping: lambda m: ["ping"],
    Pong: lambda m: ["pong"],
    VoteRequest: lambda m: ["vote", m.term, m.candidate, m.last_index, m.last_term, m.pre_vote],
    VoteReply: lambda m: ["voted", m.term, m.voter, m.granted, m.pre_vote],
    Append: lambda m: [
        "append",
        m.term,
        m.leader,
        m.prev_index,
        m.prev_term,
        [[e.term, e.index, e.data] for e in m.entries],
        m.commit,
    ],
    AppendReply: lambda m: ["appended", m.term, m.follower, m.success, m.match],
    InstallSnapshot: lambda m: ["install", m.term, m.leader, m.last_index, m.last_term, m.data],
    Piece: lambda m: ["piece", m.total, m.at, m.data],
}


def _csub_tail(message: CompositeSubscribe) -> list[Any]:
    """A composite subscription's optional fields: the policy unless chronicle, the priority
    unless the default (then the policy too, whatever it is)."""
    if message.priority != DEFAULT_QOS.priority:
        return [message.policy.value, message.priority]
    return [] if message.policy is Policy.CHRONICLE else [message.policy.value]


# msgspec's encoder writes the same msgpack as msgpack's Packer (bin type for bytes, float64,
# the smallest int encoding) at a quarter of its cost per frame; one per thread, as its docs ask
_ENCODER = threading.local()


def _encoder() -> msgspec.msgpack.Encoder:
    try:
        return _ENCODER.encoder  # type: ignore[no-any-return]
    except AttributeError:
        _ENCODER.encoder = msgspec.msgpack.Encoder()
        return _ENCODER.encoder  # type: ignore[no-any-return]


def encode(message: WireMessage) -> bytes:
    """One complete frame, length prefix included.

    Raises TypeError for what never crosses a link (LinkUp, LinkDown, anything else),
    FrameTooLarge if the peer would refuse the frame, and BadMessage for content msgpack cannot
    carry (a status value that is not msgpack-native, an integer beyond 64 bits, a lone surrogate).
    """
    payload = _payload(message)
    size = len(payload)
    if size > MAX_FRAME:
        raise FrameTooLarge(size, MAX_FRAME)
    return _HEADER.pack(size) + payload


def carriable(message: object) -> bool:
    """Whether ``message`` fits in a frame carried in custody under any seq (a router asks, for
    what may be too large: ``broker.routing.custody``)."""
    try:
        payload = _payload(Carry(1 << 62, message))  # type: ignore[arg-type]
    except (TypeError, ValueError):  # FrameTooLarge, BadMessage: a ValueError
        return False
    return len(payload) <= MAX_FRAME


def in_pieces(message: WireMessage) -> Iterator[WireMessage]:
    """``message`` itself if it fits a frame, else its payload cut into ``Piece``s that do, each
    made as it is taken (a sender writes them as its link drains: ``broker.sites.pieces``).
    For member links only: no other link takes pieces."""
    head, body = _parts(message)
    total = len(head) + len(body)
    if total <= MAX_FRAME:
        yield message
        return
    size = MAX_FRAME - _PIECE_FIELDS
    for at in range(0, total, size):
        end = min(at + size, total)
        if at >= len(head):
            data = body[at - len(head) : end - len(head)]
        else:
            data = head[at:end] + body[: max(0, end - len(head))]
        yield Piece(total, at, data)


def _parts(message: WireMessage) -> tuple[bytes, bytes]:
    """``message``'s payload as two parts, the second a snapshot's state as it is (not copied
    into the payload: a large state is not held twice, once as itself and once encoded)."""
    if type(message) is not InstallSnapshot:
        return _payload(message), b""
    data = message.data
    empty = _payload(
        InstallSnapshot(message.term, message.leader, message.last_index, message.last_term, b"")
    )
    assert empty.endswith(_EMPTY_BIN), "msgpack writes an empty byte string as bin 8 of length 0"
    size = len(data)
    if size < 1 << 8:
        header = b"\xc4" + size.to_bytes(1, "big")
    elif size < 1 << 16:
        header = b"\xc5" + size.to_bytes(2, "big")
    else:
        header = b"\xc6" + size.to_bytes(4, "big")
    return empty[: -len(_EMPTY_BIN)] + header, data


_EMPTY_BIN = b"\xc4\x00"


def _payload(message: WireMessage) -> bytes:
    try:
        to_array = _ENCODERS[type(message)]
    except KeyError:
        raise TypeError(f"{type(message).__name__} is not a message sent on a link") from None
    try:
        return _encoder().encode(to_array(message))
    except (ValueError, TypeError, OverflowError, msgspec.EncodeError) as error:
        raise BadMessage(f"cannot encode {type(message).__name__}: {_describe(error)}") from None


# ---------------------------------------------------------------------------------------- decoding


_COMBINATORS: dict[type, str] = {And: "and", Or: "or", Sequence: "seq"}


def _composite(node: Composite) -> list[Any]:
    if isinstance(node, Atom):
        return ["atom", _filter(node.filter)]
    if isinstance(node, Times):
        return ["times", _composite(node.operand), node.count, node.attribute, node.step]
    return [_COMBINATORS[type(node)], [_composite(o) for o in node.operands]]


def _array(value: object, what: str) -> list[Any]:
    if type(value) is not list:
        raise ValueError(f"{what} must be an array")
    return value


def _to_composite(array: object, depth: int = 1) -> Composite:
    """The composite in ``array``, refusing one nested deeper than the model allows before
    recursing further (msgpack alone lets a frame nest arrays 1024 deep)."""
    if depth > MAX_DEPTH:
        raise ValueError(f"a composite may nest at most {MAX_DEPTH} levels")
    node = _array(array, "a composite")
    kind = node[0] if node else None
    if kind == "atom" and len(node) == 2:
        return Atom(_to_filter(node[1]))
    if kind == "times" and len(node) == 5:
        count, attribute, step = node[2], node[3], node[4]
        if type(count) is not int or type(attribute) is not str or type(step) not in (int, float):
            raise ValueError("Times needs a whole count, an attribute name and a numeric step")
        return Times(_to_composite(node[1], depth + 1), count, attribute, step)
    combinators: dict[str, type[And] | type[Or] | type[Sequence]] = {"and": And, "or": Or, "seq": Sequence}
    if kind in combinators and len(node) == 2:
        operands = _array(node[1], "operands")
        return combinators[kind](tuple(_to_composite(o, depth + 1) for o in operands))
    raise ValueError("a composite must be [atom, filter], [and|or|seq, [...]] or [times, ...]")


def _to_pair(pair: object, what: str) -> tuple[Any, Any]:
    # without this, a 2-character string or a 2-key map would unpack as a pair
    if type(pair) is not list or len(pair) != 2:
        raise ValueError(f"{what} must be an array [name, value]")
    return pair[0], pair[1]


def _to_publication(array: object) -> Publication:
    if type(array) is not list or len(array) != 2:
        raise ValueError("a publication must be an array [class, [[name, value], ...]]")
    cls, pairs = array
    if type(pairs) is not list:
        raise ValueError("the attributes of a publication must be an array of [name, value] pairs")
    for pair in pairs:  # inline, not _to_pair: every publication that crosses a link comes here
        if type(pair) is not list or len(pair) != 2:
            raise ValueError("an attribute of a publication must be an array [name, value]")
    if type(cls) is not str:  # the model's refusal, before a compiled type check
        raise ValueError(f"class must be a string, not {cls!r}")
    return Publication(cls, pairs)


_PREDICATE_VALUES = (int, float, str, Var, TimeRef)  # the types a Predicate's value has


def _to_filter(array: object) -> Filter:
    if type(array) is not list or len(array) != 2:
        raise ValueError("a filter must be an array [class, [[attribute, op, value], ...]]")
    cls, triples = array
    if type(triples) is not list:
        raise ValueError("the predicates of a filter must be an array of [attribute, op, value]")
    predicates = []
    for triple in triples:
        if type(triple) is not list or len(triple) != 3:
            raise ValueError("a predicate must be an array [attribute, op, value]")
        attribute, op, value = triple
        if type(op) is not str:
            raise ValueError(f"an operator must be a string, not {type(op).__name__}")
        if type(value) is list:
            value = _to_tagged_value(value)
        if type(attribute) is not str or type(value) not in _PREDICATE_VALUES:
            predicate_value(attribute, op, value)  # the model's refusal, before a compiled type check
        predicates.append(Predicate(attribute, op, value))
    return Filter(cls, tuple(predicates))


def _to_tagged_value(array: list[Any]) -> Var | TimeRef:
    tag = array[0] if array else None
    if tag == "var" and len(array) == 3:
        return Var(array[1], array[2])
    if tag == "rel" and len(array) == 2 and type(array[1]) is int:
        return TimeRef(offset=array[1])
    if tag == "abs" and len(array) == 2 and type(array[1]) in (int, float) and math.isfinite(array[1]):
        return TimeRef(instant=datetime.fromtimestamp(array[1], UTC))
    if tag == "abs" and len(array) == 3 and type(array[1]) is int and type(array[2]) is int:
        if not 0 <= array[2] < 1_000_000:
            raise ValueError("microseconds of an instant must be from 0 to 999999")
        return TimeRef(instant=_EPOCH + timedelta(seconds=array[1], microseconds=array[2]))
    raise ValueError(
        'a value array must be ["var", kind, name], ["rel", int seconds], ["abs", epoch seconds]'
        ' or ["abs", int seconds, int microseconds]'
    )


def _check_status(status: object) -> dict[str, object]:
    """Only what msgpack carries without extensions, with string keys, so a reply is printable."""
    if type(status) is not dict:
        raise ValueError(f"a status must be a map, not {type(status).__name__}")
    stack: list[tuple[object, int]] = [(status, 0)]
    while stack:
        item, depth = stack.pop()
        # exact types: msgpack's ExtType is a namedtuple
        if type(item) is dict or type(item) is list or type(item) is tuple:
            if depth >= _STATUS_DEPTH:
                raise ValueError(f"a status may nest at most {_STATUS_DEPTH} levels")
            if type(item) is dict:
                for key in item:
                    if not isinstance(key, str):
                        raise ValueError(f"status keys must be strings, not {type(key).__name__}")
                item = item.values()
            stack.extend((value, depth + 1) for value in item)
        elif item is not None and not isinstance(item, bool | int | float | str | bytes):
            raise ValueError(f"a status value cannot be {type(item).__name__}")
    return status


def _to_deliver(array: list[Any]) -> Deliver:
    if type(array[1]) is not list:
        raise ValueError("the subscriptions of a delivery must be an array of ids")
    qos = _to_qos(array[5]) if len(array) > 5 else DEFAULT_QOS
    return Deliver(tuple(array[1]), _to_publication(array[2]), array[3], array[4], qos)


def _to_csub(array: list[Any]) -> CompositeSubscribe:
    clear = None if array[3] is None else _to_filter(array[3])
    policy = Policy(array[5]) if len(array) > 5 else Policy.CHRONICLE
    priority = array[6] if len(array) > 6 else DEFAULT_QOS.priority
    return CompositeSubscribe(array[1], _to_composite(array[2]), clear, array[4], policy, priority)


def _qos(qos: Qos) -> list[Any]:
    return [qos.priority, qos.ttl, qos.expires, qos.persistent, qos.retain, qos.ack, qos.mid, qos.cancel]


def _to_qos(array: object) -> Qos:
    if type(array) is not list or len(array) != 8:
        raise ValueError("a quality of service must be an array of 8 fields")
    return Qos(*array)


# tag -> (name for errors, array length including the tag, builder)
_DECODERS: dict[str, tuple[str, int, Callable[[list[Any]], WireMessage]]] = {
    "adv": ("Advertise", 4, lambda a: Advertise(a[1], _to_filter(a[2]), a[3])),
    "unadv": ("Unadvertise", 2, lambda a: Unadvertise(a[1])),
    "sub": ("Subscribe", 4, lambda a: Subscribe(a[1], _to_filter(a[2]), *a[3:])),
    "renew": ("Renew", 2, lambda a: Renew(tuple(_array(a[1], "subscription ids")))),
    "pull": ("Pull", 2, lambda a: Pull(a[1])),
    "csub": ("CompositeSubscribe", 5, _to_csub),
    "notify": (
        "Notify",
        4,
        lambda a: Notify(
            a[1],
            tuple(_to_publication(p) for p in _array(a[2], "publications")),
            tuple(_to_pair(pair, "binding") for pair in _array(a[3], "bindings")),
            *a[4:],
        ),
    ),
    "unsub": ("Unsubscribe", 2, lambda a: Unsubscribe(a[1])),
    "pub": (
        "Publish",
        6,
        lambda a: Publish(a[1], _to_publication(a[2]), a[3], a[4], a[5], *map(_to_qos, a[6:])),
    ),
    "deliver": ("Deliver", 5, _to_deliver),
    "retained": ("Retained", 6, lambda a: Retained(a[1], _to_publication(a[2]), a[3], a[4], _to_qos(a[5]))),
    "cancel": ("Cancel", 5, lambda a: Cancel(*a[1:])),
    "ack": ("Ack", 3, lambda a: Ack(a[1], a[2])),
    "refuse": ("Refuse", 3, lambda a: Refuse(a[1], a[2])),
    "statreq": ("StatusRequest", 3, lambda a: StatusRequest(*a[1:])),  # 2 without detail: see _OTHER_LENGTHS
    "bye": ("Bye", 1, lambda a: Bye()),
    "status": ("StatusReply", 3, lambda a: StatusReply(a[1], _check_status(a[2]))),
    "carry": ("Carry", 3, lambda a: Carry(a[1], _carried(a[2]))),
    "took": ("Took", 2, lambda a: Took(a[1])),
    "hello": ("Hello", 7, lambda a: Hello(*a[1:])),  # 4 without custody, 8 with a site, 9 noted
    "standby": ("Standby", 3, lambda a: Standby(a[1], _to_standby_keys(a[2]))),
    "takeover": ("TakeOver", 4, lambda a: TakeOver(a[1], a[2], a[3])),
    "ping": ("Ping", 1, lambda a: Ping()),
    "pong": ("Pong", 1, lambda a: Pong()),
    "vote": ("VoteRequest", 6, lambda a: VoteRequest(*a[1:])),
    "voted": ("VoteReply", 5, lambda a: VoteReply(*a[1:])),
    "append": ("Append", 7, lambda a: Append(a[1], a[2], a[3], a[4], _to_entries(a[5]), a[6])),
    "appended": ("AppendReply", 5, lambda a: AppendReply(*a[1:])),
    "install": ("InstallSnapshot", 6, lambda a: InstallSnapshot(*a[1:])),
    "piece": ("Piece", 4, lambda a: Piece(a[1], a[2], a[3])),
}


def _to_standby_keys(array: object) -> tuple[tuple[str, tuple[str, ...], float], ...]:
    keys = []
    for item in _array(array, "the standby keys"):
        if type(item) is not list or len(item) != 3:
            raise ValueError("a standby key must be an array [key, [identities], takeover]")
        keys.append((item[0], tuple(_array(item[1], "the identities")), item[2]))
    return tuple(keys)


def _to_entries(array: object) -> tuple[Entry, ...]:
    entries = []
    for item in _array(array, "the entries"):
        if type(item) is not list or len(item) != 3:
            raise ValueError("an entry must be an array [term, index, data]")
        entries.append(Entry(*item))
    return tuple(entries)


# The other lengths a message's array may have: a Hello without custody or with a site, a
# CompositeSubscribe with a policy (the default one is left out, so such a frame reads as it did
# before policies) and a priority, a Notify with a priority, a StatusRequest without detail, a
# Publish or Deliver with a quality of service, a Cancel signed.
_OTHER_LENGTHS: dict[str, tuple[int, ...]] = {
    "hello": (4, 8, 9),
    "csub": (6, 7),
    "notify": (5,),
    "statreq": (2,),
    "pub": (7,),  # with a quality of service other than the default
    "sub": (5,),  # with a lease
    "cancel": (8,),  # signed
    "deliver": (6,),
}


def _carried(array: object) -> Any:
    """The message inside a Carry: one that custody carries, never another Carry."""
    if type(array) is not list or not array or array[0] not in _CARRIED_TAGS:
        raise ValueError(
            "a carried message must be an advertisement, subscription, publication, notification, "
            "retained publication or cancel"
        )
    name, length, build = _DECODERS[array[0]]
    if len(array) != length and len(array) not in _OTHER_LENGTHS.get(array[0], ()):
        raise ValueError(f"the carried {name} has {len(array) - 1} fields, not {length - 1}")
    return build(array)


def _describe(error: BaseException) -> str:
    text = " ".join(str(error).split()) or type(error).__name__  # msgpack's StackError has no text
    return text if len(text) <= _MAX_ERROR else text[: _MAX_ERROR - 3] + "..."


_CARRIED_TAGS = {tag for tag, (name, _, _) in _DECODERS.items() if name in {t.__name__ for t in CARRIED}}


def decode(payload: bytes | bytearray | memoryview) -> WireMessage:
    """The message in one frame's payload (no length prefix); anything invalid is BadMessage."""
    try:
        # unpackb caps every string, array and map length at len(payload): no huge allocations
        array = msgpack.unpackb(payload, raw=False, strict_map_key=True)
    except (ValueError, TypeError, OverflowError, msgpack.UnpackException) as error:
        raise BadMessage(f"bad msgpack: {_describe(error)}") from None
    if type(array) is not list or not array or type(array[0]) is not str:
        raise BadMessage("a message must be an array that starts with its type tag")
    entry = _DECODERS.get(array[0])
    if entry is None:
        raise BadMessage(f"unknown message type {_describe(ValueError(repr(array[0])))}")
    name, length, build = entry
    if len(array) != length and len(array) not in _OTHER_LENGTHS.get(array[0], ()):
        raise BadMessage(f"bad {name}: expected {length - 1} fields, got {len(array) - 1}")
    try:
        return build(array)
    except (ValueError, TypeError, OverflowError, OSError) as error:
        raise BadMessage(f"bad {name}: {_describe(error)}") from None


# ---------------------------------------------------------------------------------------- framing


class FrameDecoder:
    """Cuts a byte stream into frame payloads, whatever the chunking; one per connection.

    After ``FrameTooLarge`` the stream has lost its frame boundaries, so every later ``feed``
    raises it again: the caller must close the connection.
    """

    __slots__ = ("_buffer", "_too_large", "limit")

    def __init__(self, limit: int = MAX_FRAME) -> None:
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
            raise ValueError(f"frame limit must be a non-negative integer, not {limit!r}")
        self.limit = limit
        self._buffer = bytearray()
        self._too_large: int | None = None

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned (a partial frame)."""
        return len(self._buffer)

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """Every payload completed by ``data``, in order; a partial frame stays buffered."""
        if self._too_large is not None:
            raise FrameTooLarge(self._too_large, self.limit)
        buffer = self._buffer
        buffer += data
        end = len(buffer)
        start = 0
        payloads: list[bytes] = []
        unpack_from = _HEADER.unpack_from
        limit = self.limit
        with memoryview(buffer) as view:  # slices of a view copy once; the buffer is not resized inside
            while end - start >= 4:
                (size,) = unpack_from(view, start)
                if size > limit:
                    self._too_large = size
                    raise FrameTooLarge(size, limit)
                stop = start + 4 + size
                if stop > end:
                    break
                payloads.append(view[start + 4 : stop].tobytes())
                start = stop
        if start:
            del buffer[:start]  # CPython drops a bytearray's head without moving the rest
        return payloads
