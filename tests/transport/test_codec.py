"""The wire codec: exact round trips, exact framing, and no exception but BadMessage on hostile bytes."""

from __future__ import annotations

import math
import random
import struct
from dataclasses import MISSING, fields
from datetime import UTC, datetime

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.language import Filter, Predicate, Publication, TimeRef, Var, parse_filter, parse_publication
from broker.language.operators import NUMERIC_OPERATORS, PRESENT, STRING_OPERATORS, TIME_OPERATORS
from broker.language.regex import REGEX, valid_pattern
from broker.language.values import MAX_EXACT, MAX_TIME_OFFSET
from broker.messages import (
    Ack,
    Advertise,
    Append,
    AppendReply,
    Bye,
    Cancel,
    Carry,
    Deliver,
    Entry,
    Hello,
    InstallSnapshot,
    LinkDown,
    LinkUp,
    Piece,
    Ping,
    Pong,
    Publish,
    Qos,
    Refuse,
    StatusReply,
    StatusRequest,
    Subscribe,
    Took,
    Unadvertise,
    Unsubscribe,
    VoteReply,
    VoteRequest,
)
from broker.transport import (
    MAX_FRAME,
    BadMessage,
    FrameDecoder,
    FrameTooLarge,
    ProtocolError,
    codec,
    decode,
    encode,
)
from broker.transport.codec import in_pieces

WIRE_TYPES = (
    Advertise,
    Unadvertise,
    Subscribe,
    Unsubscribe,
    Publish,
    Deliver,
    Cancel,
    Ack,
    Refuse,
    StatusRequest,
    StatusReply,
    Bye,
    Carry,
    Took,
    Hello,
    Ping,
    Pong,
    VoteRequest,
    VoteReply,
    Append,
    AppendReply,
    InstallSnapshot,
    Piece,
)

PUBLICATION = parse_publication("[class,stock],[price,100.25],[symbol,IBM],[volume,12000],[note,'Zürich ✓']")
FILTER = Filter(
    "stock",
    (
        Predicate("price", ">", 99.5),
        Predicate("symbol", "str-prefix", "IB"),
        Predicate("volume", PRESENT, 7),
        Predicate("name", PRESENT, "anything"),
        Predicate("gid", "eq", Var("S", "G")),
        Predicate("run", "=", Var("I", "R")),
        Predicate("time", ">=", TimeRef(offset=-7200)),
        Predicate("city", "eq", "São Paulo 東京"),
    ),
)
ABSOLUTE = Filter(
    "job", (Predicate("time", "<", TimeRef(instant=datetime(2024, 5, 17, 8, 30, 15, 123456, tzinfo=UTC))),)
)

EXAMPLES = [
    Advertise("a1", FILTER, ttl=5),
    Unadvertise("b1/c1/a1"),
    Subscribe("s1", FILTER),
    Subscribe("s2", ABSOLUTE, ttl=0),
    Subscribe("s3", parse_filter("[class,eq,'x y'],[v,<>,-0.001],[w,<=,-9007199254740992]")),
    Unsubscribe("s1"),
    Publish("p1", PUBLICATION, ttl=255),
    Publish("p2", Publication("empty")),
    Deliver(("b1/c1/s1", "b1/c2/s9"), PUBLICATION),
    Deliver(("b1/c1/s1",), PUBLICATION, "b2/c3/7", 1_800_000_000.25),
    Publish("b2/c3/7", PUBLICATION, 5, True, 1_800_000_000.25),
    Publish("9@s", PUBLICATION, qos=Qos(priority=9, ttl=30.0, mid="alert-1")),
    Publish("b2/c3/8", PUBLICATION, 5, False, 1.7e9, Qos(0, None, 1.7e9 + 30, False, True, "receipt", "x")),
    Deliver(("b1/c1/s1",), PUBLICATION, "b2/c3/8", 1.7e9, Qos(priority=1, expires=1.7e9 + 30)),
    Publish("3@s", PUBLICATION, ack=False, qos=Qos(persistent=False)),  # non-persistent: bare
    Cancel("c1", "alert-1"),
    Cancel("B1/alice/c2", "B1/alice/7@s", "alice", 31, 1.7e9, b"\x30\x82cert", b"\x30\x45sig"),  # signed
    Deliver(("b1/c1/s1",), PUBLICATION, "b2/c3/9", 1.7e9, Qos(persistent=False)),
    Ack("r1", "b1/c1/r1"),
    Refuse("", "bad frame: not msgpack"),
    Refuse("r2", "attribute 'x' appears more than once"),
    StatusRequest("q1"),
    StatusRequest("q2", detail=True),
    Bye(),
    StatusReply(
        "q1",
        {
            "broker": "b1",
            "links": [["b2", 3], ["b3", 0]],
            "up": True,
            "load": 0.5,
            "none": None,
            "raw": b"\x00\xff",
            "nested": {"prt": {"size": 2**63 - 1, "min": -(2**63)}},
        },
    ),
    Hello("broker", "b1"),
    Hello("client", "agent-7.host:9000", version=3),
    Hello("broker", "b2", epoch="e1:3", peer_epoch="e2:1", took=17),
    Carry(5, Publish("B1/c/1@s", PUBLICATION, ttl=7, time=1.7e9)),
    Carry(1, Subscribe("B1/c/2", parse_filter("[class,eq,a]"))),
    Carry(2, Cancel("B1/alice/c3", "alert-1", "alice")),
    Took(2**63 - 1),
    Ping(),
    Pong(),
    VoteRequest(3, "S1-b", 10, 2, pre_vote=True),
    VoteReply(3, "S1-c", True),
    Append(3, "S1-a", 7, 2, (Entry(3, 8, b"\x95entry"), Entry(3, 9)), 6),
    Append(3, "S1-a", 9, 3, (), 9),
    AppendReply(3, "S1-b", False, 4),
    InstallSnapshot(3, "S1-a", 120, 2, b"\x00state\xff"),
    Piece(9, 4, b"\x93part"),
]


def payload_of(frame: bytes) -> bytes:
    (size,) = struct.unpack(">I", frame[:4])
    assert size == len(frame) - 4
    return frame[4:]


# ------------------------------------------------------------------------------------------ examples


@pytest.mark.parametrize("message", EXAMPLES, ids=lambda m: type(m).__name__)
def test_every_message_type_round_trips(message: object) -> None:
    decoder = FrameDecoder()
    payloads = decoder.feed(encode(message))  # type: ignore[arg-type]
    assert len(payloads) == 1
    assert decoder.buffered == 0
    back = decode(payloads[0])
    assert type(back) is type(message)
    assert back == message
    assert str(back) == str(message)


def test_examples_cover_every_wire_type() -> None:
    assert {type(m) for m in EXAMPLES} == set(WIRE_TYPES)


def test_a_message_larger_than_a_frame_goes_in_pieces_that_make_it_up_again() -> None:
    """A site's snapshot outgrows a frame: each piece is a frame, and the payload they make up
    is the message's; one that fits stays whole."""
    snapshot = InstallSnapshot(3, "S1-a", 120, 2, random.Random(1).randbytes(2 * MAX_FRAME + 5))
    pieces = list(in_pieces(snapshot))
    assert len(pieces) == 3 and all(isinstance(p, Piece) for p in pieces)
    assert [p.last for p in pieces] == [False, False, True]  # type: ignore[union-attr]
    frames = [encode(p) for p in pieces]  # each fits (encode refuses a frame too large)
    assert decode(b"".join(decode(payload_of(f)).data for f in frames)) == snapshot  # type: ignore[union-attr]
    assert list(in_pieces(EXAMPLES[-2])) == [EXAMPLES[-2]]
    with pytest.raises(FrameTooLarge):
        encode(snapshot)


@pytest.mark.parametrize("size", [0, 1, 255, 256, 65535, 65536, 300_000])
def test_a_snapshot_s_pieces_are_its_payload_made_without_encoding_it_whole(
    monkeypatch: pytest.MonkeyPatch, size: int
) -> None:
    """The state is sliced as it is into the pieces (a large one is not held twice): they must
    make up the very payload ``encode`` writes, whatever the length's msgpack header (bin 8, 16,
    32), and say where each goes."""
    monkeypatch.setattr(codec, "MAX_FRAME", 4096)
    snapshot = InstallSnapshot(3, "S1-a", 120, 2, random.Random(size).randbytes(size))
    payload = codec._payload(snapshot)
    pieces = list(in_pieces(snapshot))
    if len(payload) <= 4096:
        assert pieces == [snapshot]
        return
    assert all(type(p) is Piece and len(encode(p)) <= 4096 + 4 for p in pieces)
    assert [p.at for p in pieces] == list(range(0, len(payload), len(pieces[0].data)))  # type: ignore[union-attr]
    assert {p.total for p in pieces} == {len(payload)}  # type: ignore[union-attr]
    assert b"".join(p.data for p in pieces) == payload  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("total", "at", "data", "error"),
    [
        (4, 3, b"ab", "past its message's 4 bytes"),
        (4, -1, b"ab", "place must be a non-negative integer"),
        (4, 0, b"", "some bytes"),
        (True, 0, b"a", "total must be a non-negative integer"),
    ],
)
def test_a_piece_that_cannot_be_part_of_its_message_is_refused(
    total: int, at: int, data: bytes, error: str
) -> None:
    with pytest.raises(ValueError, match=error):
        Piece(total, at, data)


@pytest.mark.parametrize("message", EXAMPLES, ids=lambda m: type(m).__name__)
def test_a_frame_is_its_message_s_fields_in_order_trailing_defaults_left_out(message: object) -> None:
    """What lets a codec be generated from the definitions in ``broker.messages`` (a compiled
    serialiser's tagged structs): after its tag, a frame's array holds the message's fields in
    the order the dataclass declares them (scalars as they are), and leaves out only trailing
    fields that hold their defaults."""
    array = msgpack.unpackb(payload_of(encode(message)), raw=False)  # type: ignore[arg-type]
    declared = fields(message)  # type: ignore[arg-type]
    sent, left_out = array[1:], declared[len(array) - 1 :]
    assert len(sent) <= len(declared)
    assert all(getattr(message, f.name) == f.default for f in left_out if f.default is not MISSING)
    for field, value in zip(declared, sent, strict=False):
        if type(getattr(message, field.name)) in (str, int, float, bool, type(None)):
            assert value == getattr(message, field.name), field.name


def test_exact_bytes_of_small_frames() -> None:
    assert encode(Ping()) == b"\x00\x00\x00\x06\x91\xa4ping"
    assert encode(Pong()) == b"\x00\x00\x00\x06\x91\xa4pong"
    assert encode(Unsubscribe("s1")) == b"\x00\x00\x00\x0a\x92\xa5unsub\xa2s1"
    assert encode(Hello("broker", "b1")) == b"\x00\x00\x00\x12\x94\xa5hello\xa6broker\xa2b1\x01"


def test_publication_layout_keeps_int_and_float_apart() -> None:
    array = msgpack.unpackb(payload_of(encode(Publish("p1", PUBLICATION))))
    assert array == [
        "pub",
        "p1",
        ["stock", [["note", "Zürich ✓"], ["price", 100.25], ["symbol", "IBM"], ["volume", 12000]]],
        32,
        True,
        None,
    ]
    assert type(array[2][1][3][1]) is int
    assert type(array[2][1][1][1]) is float


def test_filter_layout_of_variables_and_times() -> None:
    array = msgpack.unpackb(payload_of(encode(Subscribe("s1", FILTER))))
    assert array[0] == "sub" and array[1] == "s1" and array[3] == 32
    assert array[2] == [
        "stock",
        [
            ["city", "eq", "São Paulo 東京"],
            ["gid", "eq", ["var", "S", "G"]],
            ["name", "isPresent", ""],
            ["price", ">", 99.5],
            ["run", "=", ["var", "I", "R"]],
            ["symbol", "str-prefix", "IB"],
            ["time", ">=", ["rel", -7200]],
            ["volume", "isPresent", 0],
        ],
    ]
    absolute = msgpack.unpackb(payload_of(encode(Subscribe("s2", ABSOLUTE))))
    assert absolute[2] == ["job", [["time", "<", ["abs", 1715934615.123456]]]]


@pytest.mark.parametrize(
    "instant",
    [
        datetime(1, 1, 1, 0, 0, 0, 1, tzinfo=UTC),
        datetime(1, 1, 1, tzinfo=UTC),
        datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        datetime(1970, 1, 1, tzinfo=UTC),
        datetime(2500, 6, 1, 12, 0, 0, 500001, tzinfo=UTC),
        datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
    ],
)
def test_absolute_times_round_trip_to_the_microsecond(instant: datetime) -> None:
    message = Subscribe("s", Filter("c", (Predicate("time", ">", TimeRef(instant=instant)),)))
    back = decode(payload_of(encode(message)))
    assert isinstance(back, Subscribe)
    assert back == message
    assert back.filter["time"].value.instant == instant  # type: ignore[union-attr]


def test_absolute_time_beyond_float_precision_uses_seconds_and_microseconds() -> None:
    instant = datetime(2500, 6, 1, 12, 0, 0, 500001, tzinfo=UTC)
    message = Subscribe("s", Filter("c", (Predicate("time", ">", TimeRef(instant=instant)),)))
    value = msgpack.unpackb(payload_of(encode(message)))[2][1][0][2]
    assert value == ["abs", 16738315200, 500001]  # 193730 days after 1970-01-01, plus 12h


def test_link_events_and_other_objects_are_not_sent() -> None:
    for thing in (LinkUp(broker=True), LinkDown(), object(), "pub", PUBLICATION):
        with pytest.raises(TypeError, match="not a message sent on a link"):
            encode(thing)  # type: ignore[arg-type]


def test_encode_refuses_what_the_peer_would_refuse() -> None:
    big = Publish("p", Publication("c", {"blob": "x" * MAX_FRAME}))
    with pytest.raises(FrameTooLarge) as caught:
        encode(big)
    assert caught.value.limit == MAX_FRAME
    assert caught.value.size == len(pack(["pub", "p", ["c", [["blob", "x" * MAX_FRAME]]], 32, True, None]))
    with pytest.raises(BadMessage, match="cannot encode StatusReply: a status value cannot be set"):
        encode(StatusReply("q", {"x": {1, 2}}))
    with pytest.raises(BadMessage, match="status keys must be strings, not int"):
        encode(StatusReply("q", {"x": {1: 2}}))
    cycle: list[object] = []
    cycle.append(cycle)
    with pytest.raises(BadMessage, match="nest at most 32 levels"):
        encode(StatusReply("q", {"x": cycle}))
    with pytest.raises(ValueError, match="within 365000d of now"):  # refused before it gets here
        TimeRef(offset=-(10**20))


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        (("server", "b1", 1), "hello kind must be 'client' or 'broker', not 'server'"),
        (("broker", "", 1), "'' is not a valid peer id"),
        (("broker", "a" * 65, 1), "is not a valid peer id"),
        (("broker", "b 1", 1), "'b 1' is not a valid peer id"),
        (("broker", "b1\n", 1), "is not a valid peer id"),
        (("broker", b"b1", 1), "b'b1' is not a valid peer id"),
        (("broker", "b1", True), "protocol version must be an integer from 1 to 65535, not True"),
        (("broker", "b1", 0), "not 0"),
        (("broker", "b1", 1.0), "not 1.0"),
    ],
)
def test_hello_validates(fields: tuple[object, object, object], error: str) -> None:
    with pytest.raises(ValueError, match=error.replace("(", r"\(").replace(")", r"\)")):
        Hello(*fields)  # type: ignore[arg-type]
    assert Hello("client", "a" * 64).id == "a" * 64


def test_errors_are_one_hierarchy() -> None:
    assert issubclass(FrameTooLarge, ProtocolError) and issubclass(BadMessage, ProtocolError)
    assert issubclass(ProtocolError, ValueError)
    error = FrameTooLarge(2_000_000, 1_048_576)
    assert str(error) == "frame of 2000000 bytes exceeds the limit of 1048576"
    assert (error.size, error.limit) == (2_000_000, 1_048_576)


# ------------------------------------------------------------------------------------------ framing


def test_frames_split_at_every_byte_boundary() -> None:
    frames = [encode(m) for m in EXAMPLES]  # type: ignore[arg-type]
    stream = b"".join(frames)
    expected = [payload_of(f) for f in frames]
    for cut in range(len(stream) + 1):
        decoder = FrameDecoder()
        got = decoder.feed(stream[:cut])
        assert decoder.buffered == cut - sum(len(f) for f in frames[: len(got)])
        got += decoder.feed(stream[cut:])
        assert got == expected
        assert decoder.buffered == 0


def test_one_byte_at_a_time() -> None:
    frame = encode(Publish("p1", PUBLICATION))
    decoder = FrameDecoder()
    for i in range(len(frame) - 1):
        assert decoder.feed(frame[i : i + 1]) == []
        assert decoder.buffered == i + 1
    assert decoder.feed(frame[-1:]) == [frame[4:]]
    assert decoder.buffered == 0


def test_many_frames_in_one_chunk() -> None:
    messages = [Publish(f"p{i}", Publication("c", {"i": i})) for i in range(20_000)]
    stream = b"".join(encode(m) for m in messages)
    decoder = FrameDecoder()
    payloads = decoder.feed(stream + b"\x00\x00")  # and the start of a next prefix
    assert [decode(p) for p in payloads] == messages
    assert decoder.buffered == 2
    assert decoder.feed(b"\x00\x06\x91\xa4ping") == [b"\x91\xa4ping"]
    assert decoder.buffered == 0


def test_empty_frames_and_feeds() -> None:
    decoder = FrameDecoder()
    assert decoder.feed(b"") == []
    assert decoder.feed(b"\x00\x00\x00\x00" * 3) == [b"", b"", b""]
    with pytest.raises(BadMessage, match="bad msgpack: Unpack failed: incomplete input"):
        decode(b"")


def test_frame_too_large() -> None:
    decoder = FrameDecoder(limit=100)
    assert decoder.feed(struct.pack(">I", 100) + b"\xc0" * 100) == [b"\xc0" * 100]
    ok = encode(Ping())
    with pytest.raises(FrameTooLarge) as caught:
        decoder.feed(ok + struct.pack(">I", 101))  # raised on the prefix alone, before any payload
    assert (caught.value.size, caught.value.limit) == (101, 100)
    assert str(caught.value) == "frame of 101 bytes exceeds the limit of 100"
    with pytest.raises(FrameTooLarge, match="frame of 101 bytes"):
        decoder.feed(ok)  # the stream has lost its boundaries for good
    with pytest.raises(FrameTooLarge) as default:
        FrameDecoder().feed(b"\xff\xff\xff\xff")
    assert (default.value.size, default.value.limit) == (2**32 - 1, MAX_FRAME)


# ------------------------------------------------------------------------------------------ hostile input


def pack(obj: object) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


GOOD_PUB = ["stock", [["price", 1]]]
GOOD_FILTER = ["stock", [["price", ">", 1]]]


@pytest.mark.parametrize(
    ("payload", "error"),
    [
        (b"\xc1", "bad msgpack: FormatError"),
        (b"\x91" * 100_000 + b"\xc0", "bad msgpack: StackError"),
        (b"\x81\xa1a" * 100_000 + b"\xc0", "bad msgpack: StackError"),
        (pack(["ping"]) + b"\xc0", "bad msgpack: unpack(b) received extra data."),
        (b"\xdd\xff\xff\xff\xff", "bad msgpack: 4294967295 exceeds max_array_len(5)"),
        (b"\x92\xa4ping\xa2\xff\xfe", "bad msgpack: 'utf-8' codec can't decode byte 0xff"),
        (b"\x81\x01\x01", "bad msgpack: int is not allowed for map key"),
        (pack({"ping": 1}), "a message must be an array that starts with its type tag"),
        (pack([]), "a message must be an array that starts with its type tag"),
        (pack([b"ping"]), "a message must be an array that starts with its type tag"),
        (pack(["PING"]), "unknown message type 'PING'"),
        (pack(["x" * 1000]), "unknown message type 'xxxxxx"),
        (pack(["ping", 1]), "bad Ping: expected 0 fields, got 1"),
        (pack(["vote", 1, "b", 0, 0, "yes"]), "bad VoteRequest: pre-vote must be true or false"),
        (pack(["voted", -1, "b", True, False]), "bad VoteReply: term must be a non-negative integer"),
        (pack(["voted", 1, "", True, False]), "bad VoteReply: voter must be a member's name"),
        (pack(["append", 2, "a", 0, 0, [[2, 2, b""]], 0]), "bad Append: an Append's entries must follow"),
        (
            pack(["append", 2, "a", 0, 0, [[3, 1, b""]], 0]),
            "bad Append: an Append's entries must be of terms up to its own (2)",
        ),
        (pack(["append", 2, "a", 0, 0, [[2, 1, "text"]], 0]), "bad Append: an entry's data must be bytes"),
        (pack(["append", 2, "a", 0, 0, [[2, 1]], 0]), "bad Append: an entry must be an array"),
        (pack(["append", 2, "a", 0, 0, {}, 0]), "bad Append: the entries must be an array"),
        (pack(["appended", 1, "b", 1, 0]), "bad AppendReply: success must be true or false"),
        (pack(["install", 2, "a", 5, 1, "text"]), "bad InstallSnapshot: a snapshot's data must be bytes"),
        (pack(["install", 2, "a", 0, 0, b""]), "bad InstallSnapshot: a snapshot stands for entries 1"),
        (pack(["install", 2, "a", 5, 3, b""]), "bad InstallSnapshot: a snapshot's last term must be"),
        (pack(["cancel", "c", "a1", "", 32, 1.7e9]), "bad Cancel: expected 4 fields, got 5"),
        (pack(["cancel", "c", "a1", "", 32, "now", b"c", b"s"]), "bad Cancel: time must be epoch seconds"),
        (
            pack(["cancel", "c", "a1", "", 32, 1.7e9, "cert", b"s"]),
            "bad Cancel: a signed cancel's certificate is 1 to 4096 bytes",
        ),
        (
            pack(["cancel", "c", "a1", "", 32, 1.7e9, b"c" * 4097, b"s"]),
            "bad Cancel: a signed cancel's certificate is 1 to 4096 bytes",
        ),
        (
            pack(["cancel", "c", "a1", "", 32, 1.7e9, b"c", b""]),
            "bad Cancel: a signed cancel's signature is 1 to 160 bytes",
        ),
        (
            pack(["cancel", "c", "a1", "", 32, None, b"c", b"s"]),
            "bad Cancel: time must be epoch seconds",
        ),
        (pack(["pub", "p1", GOOD_PUB]), "bad Publish: expected 5 fields, got 2"),
        (pack(["pub", "p1", GOOD_PUB, 5, True]), "bad Publish: expected 5 fields, got 4"),
        (pack(["pub", "p1", GOOD_PUB, 5, 1, None]), "bad Publish: ack must be true or false"),
        (
            pack(["pub", "p1", GOOD_PUB, True, True, None]),
            "bad Publish: ttl must be an integer from 0 to 255",
        ),
        (pack(["pub", "p1", GOOD_PUB, 256, True, None]), "bad Publish: ttl must be an integer from 0 to 255"),
        (pack(["pub", "p1", GOOD_PUB, 5, True, "now"]), "bad Publish: time must be epoch seconds"),
        (pack(["pub", "p1", GOOD_PUB, 5, True, -1.0]), "bad Publish: time must be epoch seconds"),
        (
            pack(["pub", b"p1", GOOD_PUB, 1, True, None]),
            "bad Publish: publication id must be a non-empty string",
        ),
        (pack(["pub", "p1", {"stock": 1}, 1, True, None]), "bad Publish: a publication must be an array"),
        (
            pack(["pub", "p1", ["stock", {"price": 1}], 1, True, None]),
            "bad Publish: the attributes of a publication",
        ),
        (
            pack(["pub", "p1", ["stock", ["ab"]], 1, True, None]),
            "bad Publish: an attribute of a publication must",
        ),
        (
            pack(["pub", "p1", ["stock", [{"a": 1, "b": 2}]], 1, True, None]),
            "bad Publish: an attribute of a publ",
        ),
        (pack(["pub", "p1", ["stock", [["p", True]]], 1, True, None]), "bad Publish: True is not a number"),
        (pack(["pub", "p1", ["stock", [["p", None]]], 1, True, None]), "bad Publish: None is not a number"),
        (pack(["pub", "p1", ["stock", [["p", b"x"]]], 1, True, None]), "bad Publish: b'x' is not a number"),
        (
            pack(["pub", "p1", ["stock", [["p", math.nan]]], 1, True, None]),
            "bad Publish: nan is not a finite number",
        ),
        (
            pack(["pub", "p1", ["stock", [["p", 2**64 - 1]]], 1, True, None]),
            "bad Publish: number 18446744073709551615",
        ),
        (
            pack(["pub", "p1", ["stock", [[b"p", 1]]], 1, True, None]),
            "bad Publish: b'p' is not a valid attribute name",
        ),
        (
            pack(["pub", "p1", [b"stock", []], 1, True, None]),
            "bad Publish: class must be a string, not b'stock'",
        ),
        (
            pack(["pub", "p1", ["stock", [["p", 1], ["p", 2]]], 1, True, None]),
            "bad Publish: attribute 'p' appears more",
        ),
        (
            pack(["sub", "s1", ["c", [["x", "eq", "a"], ["x", "eq", "b"]]], 1]),
            "bad Subscribe: attribute 'x' appears more than once",
        ),
        (pack(["sub", "s1", ["c", [["x", "eq"]]], 1]), "bad Subscribe: a predicate must be an array"),
        (pack(["sub", "s1", ["c", [["x", b"eq", "a"]]], 1]), "bad Subscribe: an operator must be a string"),
        (pack(["sub", "s1", ["c", [["x", "eq", True]]], 1]), "bad Subscribe: string operator 'eq' needs"),
        (pack(["sub", "s1", ["c", [["x", ">", True]]], 1]), "bad Subscribe: numeric operator '>' needs"),
        (pack(["sub", "s1", ["c", [["x", PRESENT, False]]], 1]), "bad Subscribe: False is not a number"),
        (pack(["sub", "s1", ["c", [["x", "eq", ["var", "X", "n"]]]], 1]), "bad Subscribe: unknown variable"),
        (pack(["sub", "s1", ["c", [["x", "eq", ["var", "I", "n"]]]], 1]), "needs the operator '=', not 'eq'"),
        (pack(["sub", "s1", ["c", [["time", ">", ["rel", True]]]], 1]), "bad Subscribe: a value array must"),
        (pack(["sub", "s1", ["c", [["time", ">", ["rel", 1.5]]]], 1]), "bad Subscribe: a value array must"),
        (pack(["sub", "s1", ["c", [["time", ">", ["abs", math.nan]]]], 1]), "a value array must"),
        (pack(["sub", "s1", ["c", [["time", ">", ["abs", math.inf]]]], 1]), "a value array must"),
        (pack(["sub", "s1", ["c", [["time", ">", ["abs", 1e300]]]], 1]), "bad Subscribe: "),
        (pack(["sub", "s1", ["c", [["time", ">", ["abs", -(2**63)]]]], 1]), "bad Subscribe: "),
        (pack(["sub", "s1", ["c", [["time", ">", ["abs", 0, 10**6]]]], 1]), "microseconds of an instant"),
        (pack(["sub", "s1", ["c", [["time", ">", ["abs", 2**63 - 1, 0]]]], 1]), "bad Subscribe: "),
        (pack(["sub", "s1", ["c", [["time", ">", 5]]], 1]), "bad Subscribe: 'time' takes"),
        (pack(["sub", "s1", ["c", [["time", ">", ["rel", -(10**15)]]]], 1]), "within 365000d of now"),
        (pack(["sub", "s1", ["c", [["x", ">", ["rel", 5]]]], 1]), "a time value is only allowed for 'time'"),
        (pack(["sub", "s1", ["c", [["x", "eq", []]]], 1]), "bad Subscribe: a value array must"),
        (pack(["carry", 1, ["carry", 2, ["unsub", "s"]]]), "bad Carry: a carried message must be"),
        (pack(["carry", 1, ["ack", "r", "id"]]), "bad Carry: a carried message must be"),
        (pack(["carry", 1, ["unsub"]]), "bad Carry: the carried Unsubscribe has 0 fields"),
        (pack(["carry", -1, ["unsub", "s"]]), "bad Carry: a sequence number must be"),
        (pack(["carry", True, ["unsub", "s"]]), "bad Carry: a sequence number must be"),
        (pack(["took", 2**64 - 1]), "bad Took: a sequence number must be"),
        (pack(["hello", "broker", "b1", 1, "e", "p", -3]), "bad Hello: a sequence number must be"),
        (pack(["sub", "s1", ["c", [["x", "eq", {"a": 1}]]], 1]), "string operator 'eq' needs a string"),
        (pack(["sub", "s1", ["c", [["x", "eq\nfoo", "a"]]], 1]), "bad Subscribe: unknown operator 'eq foo'"),
        (pack(["deliver", "s1", GOOD_PUB, "p", 1.0]), "bad Deliver: the subscriptions of a delivery must be"),
        (
            pack(["deliver", [], GOOD_PUB, "p", 1.0]),
            "bad Deliver: a delivery names at least one subscription",
        ),
        (
            pack(["deliver", [1], GOOD_PUB, "p", 1.0]),
            "bad Deliver: subscription id must be a non-empty string",
        ),
        (pack(["deliver", ["s"], GOOD_PUB]), "bad Deliver: expected 4 fields, got 2"),
        (
            pack(["deliver", ["s"], GOOD_PUB, "", 1.0]),
            "bad Deliver: publication id must be a non-empty string",
        ),
        (pack(["deliver", ["s"], GOOD_PUB, "p", "t"]), "bad Deliver: time must be epoch seconds"),
        (pack(["refuse", "r", None]), "bad Refuse: a refusal needs a reason"),
        (pack(["status", "q", []]), "bad StatusReply: a status must be a map, not list"),
        (pack(["status", "q", {"a": {b"k": 1}}]), "bad StatusReply: status keys must be strings, not bytes"),
        (pack(["status", "q", {"a": msgpack.ExtType(5, b"x")}]), "a status value cannot be ExtType"),
        (pack(["status", "q", {"t": msgpack.Timestamp(0)}]), "a status value cannot be Timestamp"),
        (b"\x93\xa6status\xa1q\x81\xa1a" + b"\x91" * 32 + b"\x01", "a status may nest at most 32"),
        (pack(["hello", "broker", "b1", 2**64 - 1]), "bad Hello: protocol version must be an integer"),
        (pack(["hello", "broker", "b 1", 1]), "bad Hello: 'b 1' is not a valid peer id"),
    ],
)
def test_hostile_payloads_are_bad_messages(payload: bytes, error: str) -> None:
    with pytest.raises(BadMessage) as caught:
        decode(payload)
    text = str(caught.value)
    assert error in text and text.startswith(("bad ", "a message", "unknown")), text
    assert "\n" not in text and len(text) <= 240


def test_error_messages_are_short_and_one_line() -> None:
    long_op = "x\n" * 100_000
    with pytest.raises(BadMessage) as caught:
        decode(pack(["sub", "s1", ["c", [["x", long_op, "a"]]], 1]))
    assert str(caught.value) == "bad Subscribe: unknown operator '" + ("x " * 100)[:179] + "..."


def test_bool_is_not_accepted_where_an_int_is_expected() -> None:
    valid = decode(pack(["sub", "s1", ["c", [["time", ">", ["abs", 0, 0]]]], 1]))
    epoch = TimeRef(instant=datetime(1970, 1, 1, tzinfo=UTC))
    assert valid == Subscribe("s1", Filter("c", (Predicate("time", ">", epoch),)), 1)
    with pytest.raises(BadMessage):
        decode(pack(["sub", "s1", ["c", [["time", ">", ["abs", True, 0]]]], 1]))
    with pytest.raises(BadMessage):
        decode(pack(["sub", "s1", ["c", [["time", ">", ["abs", False]]]], 1]))


# ------------------------------------------------------------------------------------------ hypothesis

names = st.from_regex(r"[A-Za-z_:/][A-Za-z0-9_\-:/]{0,8}", fullmatch=True).filter(
    lambda n: n not in ("class", "time")
)
# any text the language accepts; lone surrogates cannot be UTF-8 encoded, so they never reach a link
strings = st.text(st.characters(exclude_characters="\r\n", exclude_categories=["Cs"]), max_size=12).filter(
    lambda s: not ("'" in s and '"' in s)
)
numbers = st.integers(-MAX_EXACT, MAX_EXACT) | st.floats(
    -float(MAX_EXACT), float(MAX_EXACT), allow_nan=False, allow_infinity=False
)
values = numbers | strings
# str-regex values: any string RE2 accepts (most random ones), and patterns full of syntax
patterns = strings.filter(valid_pattern) | st.sampled_from(["^a.*b$", "(?i)ibm|msft", "[^'\\]]+", 'x{2,5}"'])
times = st.builds(TimeRef, offset=st.integers(-MAX_TIME_OFFSET, MAX_TIME_OFFSET)) | st.builds(
    TimeRef, instant=st.datetimes(timezones=st.just(UTC))
)


@st.composite
def publications(draw: st.DrawFn) -> Publication:
    return Publication(draw(strings), draw(st.dictionaries(names, values, max_size=6)))


@st.composite
def predicates(draw: st.DrawFn, attribute: str) -> Predicate:
    kind = draw(st.sampled_from(["string", "number", "present", "variable"]))
    if kind == "string":
        op = draw(st.sampled_from(sorted(STRING_OPERATORS)))
        return Predicate(attribute, op, draw(patterns if op == REGEX else strings))
    if kind == "number":
        return Predicate(attribute, draw(st.sampled_from(sorted(NUMERIC_OPERATORS))), draw(numbers))
    if kind == "present":
        return Predicate(attribute, PRESENT, draw(values))
    var = Var(draw(st.sampled_from("SIF")), draw(names))
    return Predicate(attribute, "eq" if var.kind == "S" else "=", var)


@st.composite
def filters(draw: st.DrawFn) -> Filter:
    preds = [draw(predicates(a)) for a in draw(st.lists(names, unique=True, max_size=5))]
    if draw(st.booleans()):
        preds.append(Predicate("time", draw(st.sampled_from(sorted(TIME_OPERATORS))), draw(times)))
    return Filter(draw(strings), tuple(preds))


ids = st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=20)
ttls = st.integers(0, 255)


def through_the_wire(message: object) -> object:
    payloads = FrameDecoder().feed(encode(message))  # type: ignore[arg-type]
    assert len(payloads) == 1
    return decode(payloads[0])


@settings(derandomize=True, deadline=None, max_examples=200)
@given(ids, publications(), ttls, st.lists(ids, min_size=1, max_size=3))
def test_publications_round_trip(ref: str, publication: Publication, ttl: int, subs: list[str]) -> None:
    for message in (Publish(ref, publication, ttl), Deliver(tuple(subs), publication)):
        back = through_the_wire(message)
        assert back == message
        assert str(back.publication) == str(publication)  # type: ignore[attr-defined]


@settings(derandomize=True, deadline=None, max_examples=200)
@given(ids, filters(), ttls)
def test_filters_round_trip(ref: str, filter_: Filter, ttl: int) -> None:
    for message in (Subscribe(ref, filter_, ttl), Advertise(ref, filter_, ttl)):
        back = through_the_wire(message)
        assert back == message
        assert str(back.filter) == str(filter_)  # type: ignore[attr-defined]


# ------------------------------------------------------------------------------------------ fuzz

VALID_PAYLOADS = [payload_of(encode(m)) for m in EXAMPLES]  # type: ignore[arg-type]


LEAVES: list[object] = [
    *(None, True, False, 0, 1, -1, 255, 256, 2**53, 2**53 + 1, 2**63 - 1, -(2**63), 2**64 - 1),
    *(0.0, -0.0, 0.5, 1e308, -1e308, math.nan, math.inf, -math.inf, 5e-324),
    *("", "x", "class", "time", "eq", ">", "isPresent", "var", "rel", "abs", "S", "I", "pub", "sub"),
    *("a\nb", "'\"", "é", "\x00", "x" * 600, b"", b"pub", b"\xff", [], {}, {"a": 1}, {1: 2}, {b"k": "v"}),
    *(msgpack.ExtType(1, b"abc"), msgpack.Timestamp(1, 2)),
]


TAGS: list[object] = [msgpack.unpackb(p)[0] for p in VALID_PAYLOADS]


def hostile_fields(rng: random.Random) -> list[object]:
    return [hostile(rng, 1) for _ in range(rng.randint(0, 4))]


def hostile(rng: random.Random, depth: int = 0) -> object:
    roll = rng.random()
    if depth > 3 or roll < 0.6:
        return rng.choice(LEAVES)
    if roll < 0.85:
        return [hostile(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {rng.choice(["a", "class", "ttl"]): hostile(rng, depth + 1) for _ in range(rng.randint(0, 3))}


def mutate_tree(rng: random.Random, tree: object) -> object:
    """Replace one random node of a valid message array: reaches checks that random bytes never do."""
    if not isinstance(tree, list) or not tree or rng.random() < 0.25:
        return hostile(rng)
    copy = list(tree)
    i = rng.randrange(len(copy))
    roll = rng.random()
    if roll < 0.1:
        del copy[i]
    elif roll < 0.2:
        copy.insert(i, hostile(rng))
    else:
        copy[i] = mutate_tree(rng, copy[i])
    return copy


def mutate_bytes(rng: random.Random, data: bytes) -> bytes:
    buffer = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        roll = rng.random()
        if roll < 0.4 and buffer:
            buffer[rng.randrange(len(buffer))] ^= 1 << rng.randrange(8)
        elif roll < 0.6 and buffer:
            buffer[rng.randrange(len(buffer))] = rng.randrange(256)
        elif roll < 0.8:
            buffer.insert(rng.randrange(len(buffer) + 1), rng.randrange(256))
        elif buffer:
            del buffer[rng.randrange(len(buffer))]
    return bytes(buffer)


def check_decode(payload: bytes) -> bool:
    """True if the payload was a valid message; then it must survive another round trip unchanged."""
    try:
        message = decode(payload)
    except BadMessage as error:
        text = str(error)
        assert text and "\n" not in text and len(text) <= 240, text
        return False
    assert isinstance(message, WIRE_TYPES)
    frame = encode(message)
    assert encode(decode(payload_of(frame))) == frame  # bytes, not ==: a status may hold NaN
    return True


def test_fuzz_random_bytes_and_truncations() -> None:
    rng = random.Random(1)
    for _ in range(3000):
        check_decode(rng.randbytes(rng.randint(0, 40)))
    valid = sum(check_decode(p[:cut]) for p in VALID_PAYLOADS for cut in range(len(p) + 1))
    assert valid == len(VALID_PAYLOADS)  # only the untruncated payloads decode


def test_fuzz_byte_mutations_of_valid_payloads() -> None:
    rng = random.Random(2)
    outcomes = [check_decode(mutate_bytes(rng, rng.choice(VALID_PAYLOADS))) for _ in range(6000)]
    assert 100 < sum(outcomes) < len(outcomes) - 1000  # both paths are exercised


def test_fuzz_hostile_msgpack_structures() -> None:
    rng = random.Random(3)
    trees = [msgpack.unpackb(p) for p in VALID_PAYLOADS]
    outcomes = []
    for i in range(6000):
        tree = (
            mutate_tree(rng, rng.choice(trees))
            if i % 4
            else [rng.choice(TAGS + LEAVES), *hostile_fields(rng)]
        )
        outcomes.append(check_decode(pack(tree)))
    assert 50 < sum(outcomes) < len(outcomes) - 3000
    for depth in (100, 1000, 5000):
        assert not check_decode(b"\x91" * depth + b"\xa4ping")
        assert not check_decode(b"\x92\xa4ping" + b"\x91" * depth + b"\xc0")


def test_fuzz_frame_decoder_streams() -> None:
    rng = random.Random(4)
    for round_ in range(300):
        limit = rng.choice([0, 10, 1000, MAX_FRAME])
        decoder = FrameDecoder(limit)
        if round_ % 2:  # valid frames, corrupted now and then, in random chunks
            stream = b"".join(encode(rng.choice(EXAMPLES)) for _ in range(20))  # type: ignore[arg-type]
            if rng.random() < 0.5:
                stream = mutate_bytes(rng, stream)
        else:
            stream = rng.randbytes(rng.randint(0, 2000))
        received: list[bytes] = []
        position = 0
        try:
            while position < len(stream):
                step = rng.randint(1, 64)
                received += decoder.feed(stream[position : position + step])
                position += step
        except FrameTooLarge as error:
            assert error.limit == limit and error.size > limit
            continue
        # what came out is exactly the stream's frames, and the rest is buffered
        rebuilt = b"".join(struct.pack(">I", len(p)) + p for p in received)
        assert stream.startswith(rebuilt)
        assert decoder.buffered == len(stream) - len(rebuilt)
        if decoder.buffered >= 4:  # what is left is an incomplete frame
            (size,) = struct.unpack_from(">I", stream, len(rebuilt))
            assert size + 4 > decoder.buffered
        for payload in received:
            check_decode(payload)
