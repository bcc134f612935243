"""CPU per publication of the router alone, in process: no sockets, no codec, no event loop.

The one-broker path of ``benchmarks/overlay.py`` as the router sees it, fed straight to
``Router.handle``: a publisher's ``Publish`` (its advertisement made first, a ref counted in its
own session, acknowledged), matched against the subscriber's subscription and 1,000 others that
never match (held by a third client), carried to the subscriber as ``Carry(Deliver)``, then the
subscriber's ``Took`` of it, which releases custody. The publication is the overlay benchmark's
(a sequence number, a timestamp, 64 bytes of padding). The figure is the thread's CPU time per
publication (the ``Publish`` and the ``Took``), the best of ``--rounds`` loops of ``--count``.

Where the hot path is compiled (``broker.compiled``), the same figure of its pure Python too,
from a process of its own with ``WFM_PURE=1``, the two builds taking turns round by round.

Prints a line per build and one result line (microseconds per publication: lower is better).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time

from broker import compiled
from broker.language import Publication, parse_filter
from broker.messages import Advertise, Carry, Deliver, LinkUp, Publish, Subscribe, Took
from broker.messages.ids import client_session
from broker.routing.router import Router

CLASS = "bench"
PAYLOAD = "x" * 64
OTHERS = 1000
START = 1_800_000_000.0  # epoch seconds of the first input


def router() -> Router:
    """A broker with the three clients of the one-broker figure, its index settled."""
    r = Router("B")
    for hop in ("pub", "sub", "others"):
        r.handle(LinkUp(broker=False), hop, START)
    advert = parse_filter(f"[class,eq,{CLASS}],[seq,isPresent,0],[t,isPresent,0],[pad,isPresent,'']")
    r.handle(Advertise("a", advert), "pub", START)
    r.handle(Subscribe("s", parse_filter(f"[class,eq,{CLASS}]")), "sub", START)
    for i in range(OTHERS):
        r.handle(Subscribe(f"o{i}", parse_filter(f"[class,eq,{CLASS}],[seq,<,{-10 - i}]")), "others", START)
    while r.settle():  # as the broker does once no input came for a while
        pass
    return r


def loop(r: Router, session: str, first: int, count: int) -> float:
    """CPU seconds per publication over ``count`` of them, numbered from ``first``."""
    handle = r.handle
    publishes = [
        Publish(f"{i}@{session}", Publication(CLASS, {"seq": i, "t": START + i * 1e-5, "pad": PAYLOAD}))
        for i in range(first, first + count)
    ]  # made first: decoding is the codec's (``benchmarks/codec.py``)
    started = time.thread_time()
    for i, publish in enumerate(publishes, first):
        now = START + 1 + i * 1e-5
        out = handle(publish, "pub", now)
        carry = out[-1][1]
        assert type(carry) is Carry and type(carry.message) is Deliver, out
        handle(Took(carry.seq), "sub", now)
    return (time.thread_time() - started) / count


def measure(count: int, rounds: int) -> float:
    """The best of ``rounds`` loops, on one router (custody is empty after each publication)."""
    gc.set_threshold(50_000, 20, 100)  # as ``wfm broker`` runs (docs/performance.md, Overlay)
    r = router()
    session = client_session(START, 1)
    loop(r, session, 0, min(count, 2000))  # warm up
    best = min(loop(r, session, (n + 1) * count, count) for n in range(rounds))
    held = sum(len(channel.held) for channel in r.custody.channels.values())
    assert held == 0 and r.counters["delivered"] > 0, (held, r.counters)
    return best * 1e6


def pure_round(count: int) -> float:
    """One round in a process of the pure build."""
    env = {**os.environ, compiled.ENV: "1"}
    command = [sys.executable, __file__, "--count", str(count), "--rounds", "1", "--figure"]
    return float(subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=20_000, help="publications per timed loop")
    parser.add_argument("--rounds", type=int, default=5, help="timed loops; the best counts")
    parser.add_argument("--figure", action="store_true", help=argparse.SUPPRESS)  # one build's µs
    args = parser.parse_args()
    if args.figure:
        print(measure(args.count, args.rounds))
        return
    both = compiled.BUILD == "compiled"
    here, pure = [], []
    for _ in range(args.rounds):  # the builds take turns, a round each
        here.append(measure(args.count, 1))
        if both:
            pure.append(pure_round(args.count))
    result: dict[str, object] = {"benchmark": "router", "cores": os.cpu_count(), "count": args.count}
    result[compiled.BUILD] = {"us_per_publication": round(min(here), 2)}
    print(f"{compiled.BUILD:8} {min(here):6.2f} us per publication (Publish and Took)", flush=True)
    if both:
        result["pure"] = {"us_per_publication": round(min(pure), 2)}
        result["compiled_over_pure"] = round(min(here) / min(pure), 3)
        print(f"{'pure':8} {min(pure):6.2f} us per publication (Publish and Took)", flush=True)
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main()
