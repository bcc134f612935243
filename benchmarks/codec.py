"""Frames per second of the wire codec, against msgpack's own Packer in the same run.

The frames a broker handles most: a client's ``Publish`` and the ``Deliver`` of it, each with the
overlay benchmark's publication (a sequence number, a timestamp, 64 bytes of padding). Four
figures, each the best of ``--rounds`` timed loops of ``--count`` frames, the loops of the three
taking turns:

* encode: ``codec.encode`` (message to array, msgspec's msgpack encoder, length prefix) against
  the same with ``msgpack.Packer`` in place of msgspec's encoder, the codec's encoder before;
* decode: ``codec.decode`` of the payload (msgpack, then the checks, then the message and its
  ``Publication``).

``--structs`` measures instead what issue 37 proposed for decoding: a ``msgspec.msgpack.Decoder``
of a tagged union of ``array_like`` Structs (the tag is the frame's, trailing defaults may be left
out: the wire format as it is), then the same message objects, against ``codec.decode`` (the
baseline), for the hot frames (``Publish``, ``Deliver``, ``Ack``, ``Carry`` of a ``Publish``,
``Took``); with the Structs' decoding alone, and for ``Publish`` and ``Deliver`` the bound if the
message classes were Structs themselves (stand-ins that run the same checks in ``__post_init__``),
and what building the ``Publication`` and the message costs on its own (so the ratio the Structs
path would have if its glue cost nothing: the Structs alone, the Publication, the message).

Where the hot path is compiled (``broker.compiled``), the same figures of its pure Python too,
from a process of its own with ``WFM_PURE=1``, the two builds taking turns round by round (the
``--structs`` path's own glue stays this file's Python in both). ``--cpu`` times each loop by the
thread's CPU time rather than the wall clock, for a machine that other work keeps busy.

Prints a line per figure and one result line with the ratios (frames per second: higher is
better), the compiled/pure ratios and the core count.
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import msgpack
import msgspec

from broker import compiled
from broker.language import Publication
from broker.messages import DEFAULT_QOS, Ack, Carry, Deliver, Publish, Took, WireMessage
from broker.messages.overlay import _text, _time, _ttl
from broker.messages.qos import Qos
from broker.transport import codec

HEADER = struct.Struct(">I")
PACKER = msgpack.Packer(use_bin_type=True)  # kept, as the codec kept one per thread


def with_packer(message: WireMessage) -> bytes:
    """``codec.encode`` as it was with msgpack's Packer: the baseline."""
    payload = PACKER.pack(codec._ENCODERS[type(message)](message))
    return HEADER.pack(len(payload)) + payload


def per_second(
    works: list[Callable[[], object]], count: int, rounds: int, clock: Callable[[], float] = time.perf_counter
) -> list[float]:
    """Frames per second of each of ``works``: the best of ``rounds`` loops of ``count``, the
    works taking turns in each round (so that a busy moment of the machine hits them alike),
    after an untimed loop of each (a process of the pure build runs a single round)."""
    for work in works:
        for _ in range(min(count, 1000)):
            work()
    best = [float("inf")] * len(works)
    for _ in range(rounds):
        for i, work in enumerate(works):
            start = clock()
            for _ in range(count):
                work()
            best[i] = min(best[i], clock() - start)
    return [count / seconds for seconds in best]


PUBLICATION = Publication("bench", {"seq": 12345, "t": 1.7e9, "pad": "x" * 64})


def measure(count: int, rounds: int, clock: Callable[[], float]) -> dict[str, dict[str, float]]:
    """Frames per second of each figure, for each message, in this process's build."""
    messages: dict[str, WireMessage] = {
        "Publish": Publish("c-1:pub:12345", PUBLICATION),
        "Deliver": Deliver(("B1:sub:1",), PUBLICATION, "B1:c-1:pub:12345", 1.7e9),
    }
    figures = {}
    for name, message in messages.items():
        assert codec.encode(message) == with_packer(message)  # the same bytes
        payload = codec.encode(message)[HEADER.size :]
        ours, packer, decoded = per_second(
            [partial(codec.encode, message), partial(with_packer, message), partial(codec.decode, payload)],
            count,
            rounds,
            clock,
        )
        figures[name] = {"encode_per_s": ours, "encode_msgpack_per_s": packer, "decode_per_s": decoded}
    return figures


# ---------------------------------------------------------------------- --structs: msgspec Structs

# The frames as Structs: ``array_like`` with the frame's tag first is the wire format itself,
# ``[tag, *fields]``, and a trailing field with a default may be left out of the array.
Value = int | float | str
PublicationArray = tuple[str, list[tuple[str, Value]]]


class QosArray(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    priority: int
    ttl: int | float | None
    expires: int | float | None
    persistent: bool
    retain: bool
    ack: str
    mid: str
    cancel: str


class PublishArray(msgspec.Struct, array_like=True, forbid_unknown_fields=True, tag="pub"):
    id: str
    publication: PublicationArray
    ttl: int
    ack: bool
    time: int | float | None
    qos: QosArray | None = None


class DeliverArray(msgspec.Struct, array_like=True, forbid_unknown_fields=True, tag="deliver"):
    subscriptions: tuple[str, ...]
    publication: PublicationArray
    id: str
    time: int | float
    qos: QosArray | None = None


class AckArray(msgspec.Struct, array_like=True, forbid_unknown_fields=True, tag="ack"):
    ref: str
    id: str


class TookArray(msgspec.Struct, array_like=True, forbid_unknown_fields=True, tag="took"):
    seq: int


class CarryArray(msgspec.Struct, array_like=True, forbid_unknown_fields=True, tag="carry"):
    seq: int
    message: PublishArray | DeliverArray


STRUCTS = msgspec.msgpack.Decoder(PublishArray | DeliverArray | AckArray | TookArray | CarryArray)


def _qos(array: QosArray | None) -> Qos:
    if array is None:
        return DEFAULT_QOS
    a = array
    return Qos(a.priority, a.ttl, a.expires, a.persistent, a.retain, a.ack, a.mid, a.cancel)


def _publish(s: PublishArray) -> Publish:
    cls, attributes = s.publication
    return Publish(s.id, Publication(cls, attributes), s.ttl, s.ack, s.time, _qos(s.qos))


def _deliver(s: DeliverArray) -> Deliver:
    cls, attributes = s.publication
    return Deliver(s.subscriptions, Publication(cls, attributes), s.id, s.time, _qos(s.qos))


def _carry(s: CarryArray) -> Carry:
    return Carry(s.seq, _BUILD[type(s.message)](s.message))  # type: ignore[arg-type]


_BUILD: dict[type, Callable[[Any], WireMessage]] = {
    PublishArray: _publish,
    DeliverArray: _deliver,
    AckArray: lambda s: Ack(s.ref, s.id),
    TookArray: lambda s: Took(s.seq),
    CarryArray: _carry,
}


def structs_decode(payload: bytes) -> WireMessage:
    """The message in ``payload`` through the Structs, then the same message objects as
    ``codec.decode`` builds (and so the same checks in them)."""
    s = STRUCTS.decode(payload)
    return _BUILD[type(s)](s)


# The bound if the message classes were Structs themselves: stand-ins for Publish and Deliver
# that run the same checks after msgspec's, the Publication built by the codec's own function.


class PublishStruct(msgspec.Struct, array_like=True, forbid_unknown_fields=True, frozen=True, tag="pub"):
    id: str
    publication: Publication
    ttl: int
    ack: bool
    time: int | float | None
    qos: QosArray | None = None  # the default in these frames: never a Qos to build

    def __post_init__(self) -> None:
        _text(self.id, "publication id")
        _ttl(self.ttl)
        if not isinstance(self.ack, bool):
            raise ValueError("ack must be true or false")
        _time(self.time, optional=True)
        if not isinstance(self.publication, Publication):
            raise ValueError("a publication message needs a Publication")


class DeliverStruct(msgspec.Struct, array_like=True, forbid_unknown_fields=True, frozen=True, tag="deliver"):
    subscriptions: tuple[str, ...]
    publication: Publication
    id: str
    time: int | float
    qos: QosArray | None = None

    def __post_init__(self) -> None:
        _text(self.id, "publication id")
        _time(self.time)
        if not self.subscriptions:
            raise ValueError("a delivery names at least one subscription")
        for sid in self.subscriptions:
            _text(sid, "subscription id")
        if not isinstance(self.publication, Publication):
            raise ValueError("a delivery needs a Publication")


def _publication_hook(kind: type, value: Any) -> Any:
    if kind is Publication:
        return codec._to_publication(value)  # the codec's checks, then the model's
    raise NotImplementedError(kind)


AS_STRUCTS = msgspec.msgpack.Decoder(PublishStruct | DeliverStruct, dec_hook=_publication_hook)


def measure_structs(count: int, rounds: int, clock: Callable[[], float]) -> dict[str, dict[str, float]]:
    """Decode frames per second of the Structs path against ``codec.decode``, in this build."""
    messages: dict[str, WireMessage] = {
        "Publish": Publish("c-1:pub:12345", PUBLICATION),
        "Deliver": Deliver(("B1:sub:1",), PUBLICATION, "B1:c-1:pub:12345", 1.7e9),
        "Ack": Ack("c-1:pub:12345", "B1:c-1:pub:12345"),
        "Carry": Carry(7, Publish("B1:c-1:pub:12345", PUBLICATION, 31, True, 1.7e9)),
        "Took": Took(7),
    }
    cls, attributes = "bench", list(PUBLICATION.fields.items())
    build_message: dict[str, Callable[[], object]] = {
        "Publish": partial(Publish, "c-1:pub:12345", PUBLICATION, 32, True, None, DEFAULT_QOS),
        "Deliver": partial(Deliver, ("B1:sub:1",), PUBLICATION, "B1:c-1:pub:12345", 1.7e9, DEFAULT_QOS),
    }
    figures = {}
    for name, message in messages.items():
        payload = codec.encode(message)[HEADER.size :]
        assert structs_decode(payload) == codec.decode(payload) == message, name  # the same messages
        works: list[Callable[[], object]] = [
            partial(codec.decode, payload),
            partial(structs_decode, payload),
            partial(STRUCTS.decode, payload),
        ]
        if name in build_message:
            bound = AS_STRUCTS.decode(payload)
            assert (bound.id, bound.publication) == (message.id, message.publication)  # type: ignore[union-attr]
            works += [
                partial(AS_STRUCTS.decode, payload),
                partial(Publication, cls, attributes),
                build_message[name],
            ]
        rates = per_second(works, count, rounds, clock)
        keys = ["decode_per_s", "structs_per_s", "structs_alone_per_s", "as_structs_per_s"]
        figures[name] = dict(zip(keys, rates, strict=False))
        if name in build_message:
            figures[name]["publication_us"] = 1e6 / rates[4]
            figures[name]["message_us"] = 1e6 / rates[5]
    return figures


# ---------------------------------------------------------------------------------------- report


def pure_round(count: int, flags: list[str]) -> dict[str, dict[str, float]]:
    """One round in a process of the pure build."""
    env = {**os.environ, compiled.ENV: "1"}
    command = [sys.executable, __file__, "--count", str(count), "--rounds", "1", "--figures", *flags]
    out = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
    return json.loads(out)  # type: ignore[no-any-return]


def best(rounds: list[dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    """Each figure's best round: the most frames per second, the fewest microseconds."""
    pick = {key: min if key.endswith("_us") else max for f in rounds[0].values() for key in f}
    return {
        name: {key: pick[key](r[name][key] for r in rounds) for key in rounds[0][name]} for name in rounds[0]
    }


def codec_lines(
    figures: dict[str, dict[str, float]], pure_figures: dict[str, dict[str, float]]
) -> dict[str, object]:
    result: dict[str, object] = {}
    for name, f in figures.items():
        ours, packer, decoded = f["encode_per_s"], f["encode_msgpack_per_s"], f["decode_per_s"]
        line = (
            f"{name:8} encode {ours:12,.0f}/s  msgpack Packer {packer:12,.0f}/s  ratio {ours / packer:.2f}"
            f"   decode {decoded:12,.0f}/s"
        )
        entry: dict[str, object] = {
            "encode_per_s": round(ours),
            "encode_msgpack_per_s": round(packer),
            "ratio": round(ours / packer, 3),
            "decode_per_s": round(decoded),
        }
        if pure_figures:
            p = pure_figures[name]
            line += (
                f"   pure: encode {p['encode_per_s']:10,.0f}/s decode {p['decode_per_s']:10,.0f}/s"
                f"   compiled/pure: encode {ours / p['encode_per_s']:.2f}"
                f" decode {decoded / p['decode_per_s']:.2f}"
            )
            entry["pure"] = {
                "encode_per_s": round(p["encode_per_s"]),
                "decode_per_s": round(p["decode_per_s"]),
            }
            entry["compiled_over_pure"] = {
                "encode": round(ours / p["encode_per_s"], 3),
                "decode": round(decoded / p["decode_per_s"], 3),
            }
        print(line, flush=True)
        result[name] = entry
    return result


def structs_entry(f: dict[str, float]) -> tuple[str, dict[str, object]]:
    """One build's line and figures of the Structs path for one frame."""
    old, new, alone = f["decode_per_s"], f["structs_per_s"], f["structs_alone_per_s"]
    line = f"codec.decode {old:10,.0f}/s  Structs, then the messages {new:10,.0f}/s  ratio {new / old:.2f}"
    entry: dict[str, object] = {
        "decode_per_s": round(old),
        "structs_per_s": round(new),
        "ratio": round(new / old, 3),
        "structs_alone_per_s": round(alone),
    }
    if "as_structs_per_s" in f:
        bound = f["as_structs_per_s"]
        line += f"   messages as Structs {bound:10,.0f}/s  ratio {bound / old:.2f}"
        entry["as_structs_per_s"] = round(bound)
        entry["as_structs_ratio"] = round(bound / old, 3)
        entry["publication_us"] = round(f["publication_us"], 2)
        entry["message_us"] = round(f["message_us"], 2)
        # the Structs path if its glue (dispatch, attribute reads, calls) cost nothing
        parts = 1e6 / alone + f["publication_us"] + f["message_us"]
        entry["no_glue_ratio"] = round(1e6 / old / parts, 3)
        line += (
            f"   (Publication {f['publication_us']:.2f} us, message {f['message_us']:.2f} us:"
            f" without glue the ratio {1e6 / old / parts:.2f})"
        )
    return line + f"   Structs alone {alone:11,.0f}/s", entry


def structs_lines(
    figures: dict[str, dict[str, float]], pure_figures: dict[str, dict[str, float]]
) -> dict[str, object]:
    result: dict[str, object] = {}
    for name, f in figures.items():
        line, entry = structs_entry(f)
        print(f"{name:8} {compiled.BUILD:8} {line}", flush=True)
        if pure_figures:
            pure_line, entry["pure"] = structs_entry(pure_figures[name])
            print(f"{name:8} {'pure':8} {pure_line}", flush=True)
        result[name] = entry
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=100_000, help="frames per timed loop")
    parser.add_argument("--rounds", type=int, default=5, help="timed loops; the best counts")
    parser.add_argument(
        "--structs", action="store_true", help="decode through msgspec Structs against codec.decode"
    )
    parser.add_argument(
        "--cpu", action="store_true", help="time loops by the thread's CPU time, not the wall clock"
    )
    parser.add_argument("--figures", action="store_true", help=argparse.SUPPRESS)  # one build's, as JSON
    args = parser.parse_args()
    clock = time.thread_time if args.cpu else time.perf_counter
    run = measure_structs if args.structs else measure
    if args.figures:
        print(json.dumps(run(args.count, args.rounds, clock)))
        return
    flags = [flag for flag, on in (("--structs", args.structs), ("--cpu", args.cpu)) if on]
    both = compiled.BUILD == "compiled"
    here, pure = [], []
    for _ in range(args.rounds):  # the builds take turns, a round each
        here.append(run(args.count, 1, clock))
        if both:
            pure.append(pure_round(args.count, flags))
    figures, pure_figures = best(here), best(pure) if both else {}
    result: dict[str, object] = {
        "benchmark": "codec-structs" if args.structs else "codec",
        "cores": os.cpu_count(),
        "build": compiled.BUILD,
        "clock": "cpu" if args.cpu else "wall",
    }
    result.update((structs_lines if args.structs else codec_lines)(figures, pure_figures))
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main()
