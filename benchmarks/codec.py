"""Frames per second of the wire codec, against msgpack's own Packer in the same run.

The frames a broker handles most: a client's ``Publish`` and the ``Deliver`` of it, each with the
overlay benchmark's publication (a sequence number, a timestamp, 64 bytes of padding). Four
figures, each the best of ``--rounds`` timed loops of ``--count`` frames, the loops of the three
taking turns:

* encode: ``codec.encode`` (message to array, msgspec's msgpack encoder, length prefix) against
  the same with ``msgpack.Packer`` in place of msgspec's encoder, the codec's encoder before;
* decode: ``codec.decode`` of the payload (msgpack, then the checks, then the message and its
  ``Publication``).

Prints a line per figure and one result line with the encode ratio (msgspec/msgpack, frames per
second: higher is better) and the core count.
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import time
from collections.abc import Callable
from functools import partial

import msgpack

from broker.language import Publication
from broker.messages import Deliver, Publish, WireMessage
from broker.transport import codec

HEADER = struct.Struct(">I")
PACKER = msgpack.Packer(use_bin_type=True)  # kept, as the codec kept one per thread


def with_packer(message: WireMessage) -> bytes:
    """``codec.encode`` as it was with msgpack's Packer: the baseline."""
    payload = PACKER.pack(codec._ENCODERS[type(message)](message))
    return HEADER.pack(len(payload)) + payload


def per_second(works: list[Callable[[], object]], count: int, rounds: int) -> list[float]:
    """Frames per second of each of ``works``: the best of ``rounds`` loops of ``count``, the
    works taking turns in each round (so that a busy moment of the machine hits them alike)."""
    best = [float("inf")] * len(works)
    for _ in range(rounds):
        for i, work in enumerate(works):
            start = time.perf_counter()
            for _ in range(count):
                work()
            best[i] = min(best[i], time.perf_counter() - start)
    return [count / seconds for seconds in best]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=100_000, help="frames per timed loop")
    parser.add_argument("--rounds", type=int, default=5, help="timed loops; the best counts")
    args = parser.parse_args()
    publication = Publication("bench", {"seq": 12345, "t": time.time(), "pad": "x" * 64})
    messages = {
        "Publish": Publish("c-1:pub:12345", publication),
        "Deliver": Deliver(("B1:sub:1",), publication, "B1:c-1:pub:12345", time.time()),
    }
    result: dict[str, object] = {"benchmark": "codec", "cores": os.cpu_count()}
    for name, message in messages.items():
        assert codec.encode(message) == with_packer(message)  # the same bytes
        payload = codec.encode(message)[HEADER.size :]
        ours, packer, decoded = per_second(
            [partial(codec.encode, message), partial(with_packer, message), partial(codec.decode, payload)],
            args.count,
            args.rounds,
        )
        print(
            f"{name:8} encode {ours:12,.0f}/s  msgpack Packer {packer:12,.0f}/s  ratio {ours / packer:.2f}"
            f"   decode {decoded:12,.0f}/s",
            flush=True,
        )
        result[name] = {
            "encode_per_s": round(ours),
            "encode_msgpack_per_s": round(packer),
            "ratio": round(ours / packer, 3),
            "decode_per_s": round(decoded),
        }
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main()
