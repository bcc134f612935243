"""Frames per second of the wire codec, against msgpack's own Packer in the same run.

The frames a broker handles most: a client's ``Publish`` and the ``Deliver`` of it, each with the
overlay benchmark's publication (a sequence number, a timestamp, 64 bytes of padding). Four
figures, each the best of ``--rounds`` timed loops of ``--count`` frames, the loops of the three
taking turns:

* encode: ``codec.encode`` (message to array, msgspec's msgpack encoder, length prefix) against
  the same with ``msgpack.Packer`` in place of msgspec's encoder, the codec's encoder before;
* decode: ``codec.decode`` of the payload (msgpack, then the checks, then the message and its
  ``Publication``).

Where the hot path is compiled (``broker.compiled``), the same figures of its pure Python too,
from a process of its own with ``WFM_PURE=1``, the two builds taking turns round by round.

Prints a line per figure and one result line with the encode ratio (msgspec/msgpack, frames per
second: higher is better), the compiled/pure ratios and the core count.
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

import msgpack

from broker import compiled
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


def measure(count: int, rounds: int) -> dict[str, dict[str, float]]:
    """Frames per second of each figure, for each message, in this process's build."""
    publication = Publication("bench", {"seq": 12345, "t": 1.7e9, "pad": "x" * 64})
    messages = {
        "Publish": Publish("c-1:pub:12345", publication),
        "Deliver": Deliver(("B1:sub:1",), publication, "B1:c-1:pub:12345", 1.7e9),
    }
    figures = {}
    for name, message in messages.items():
        assert codec.encode(message) == with_packer(message)  # the same bytes
        payload = codec.encode(message)[HEADER.size :]
        ours, packer, decoded = per_second(
            [partial(codec.encode, message), partial(with_packer, message), partial(codec.decode, payload)],
            count,
            rounds,
        )
        figures[name] = {"encode_per_s": ours, "encode_msgpack_per_s": packer, "decode_per_s": decoded}
    return figures


def pure_round(count: int) -> dict[str, dict[str, float]]:
    """One round in a process of the pure build."""
    env = {**os.environ, compiled.ENV: "1"}
    command = [sys.executable, __file__, "--count", str(count), "--rounds", "1", "--figures"]
    out = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
    return json.loads(out)  # type: ignore[no-any-return]


def best(rounds: list[dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    return {name: {key: max(r[name][key] for r in rounds) for key in rounds[0][name]} for name in rounds[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=100_000, help="frames per timed loop")
    parser.add_argument("--rounds", type=int, default=5, help="timed loops; the best counts")
    parser.add_argument("--figures", action="store_true", help=argparse.SUPPRESS)  # one build's, as JSON
    args = parser.parse_args()
    if args.figures:
        print(json.dumps(measure(args.count, args.rounds)))
        return
    both = compiled.BUILD == "compiled"
    here, pure = [], []
    for _ in range(args.rounds):  # the builds take turns, a round each
        here.append(measure(args.count, 1))
        if both:
            pure.append(pure_round(args.count))
    figures, pure_figures = best(here), best(pure) if both else {}
    result: dict[str, object] = {"benchmark": "codec", "cores": os.cpu_count(), "build": compiled.BUILD}
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
        if both:
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
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main()
