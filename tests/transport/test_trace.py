"""A broker's forwarding trace (``wfm broker --trace-forwarding``): real ``RouterService``s over
memory streams (``tests.routing.test_conformance``'s star: B1 in the middle, B2-B5 around it)."""

from __future__ import annotations

import json
import logging
from collections import Counter
from pathlib import Path

from broker.clock import ManualClock
from broker.language import parse_publication
from broker.messages import Deliver
from broker.transport.trace import ForwardingTrace
from tests.routing.test_conformance import MemoryBackend


def lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_each_broker_on_the_way_traces_what_it_sent_on(tmp_path: Path) -> None:
    """Publisher on B2, subscriber on B3: B2 sends it to B1, B1 to B3, B3 to its client; B4 and
    B5, with no subscriber, trace nothing; a publication no one subscribed to is traced by no
    broker; nothing else (advertisements, subscriptions, answers) is traced."""
    backend = MemoryBackend(traces=tmp_path)
    try:
        publisher, subscriber = backend.client("B2"), backend.client("B3")
        publisher.advertise("[class,eq,stock],[price,>,0]")
        publisher.advertise("[class,eq,bond],[price,>,0]")
        subscriber.subscribe("[class,eq,stock],[price,>,10]")
        backend.settle()
        publisher.publish("[class,stock],[price,20]")
        publisher.publish("[class,stock],[price,5]")  # matches no subscription: goes nowhere
        publisher.publish("[class,bond],[price,20]")
        assert backend.received(subscriber) == ["[class,stock],[price,20]"]
    finally:
        backend.close()
    traced = {broker: lines(tmp_path / f"{broker}.jsonl") for broker in ("B1", "B2", "B3", "B4", "B5")}
    assert {broker: [line["to"] for line in got] for broker, got in traced.items()} == {
        "B1": ["B3"],
        "B2": ["B1"],
        "B3": [traced["B3"][0]["to"]],
        "B4": [],
        "B5": [],
    }
    assert str(traced["B3"][0]["to"]).startswith("c")  # the subscriber, a client
    for got in (traced["B1"], traced["B2"], traced["B3"]):
        (line,) = got
        assert line["publication"] == "[class,stock],[price,20]"
        assert line["attributes"] == {"class": "stock", "price": 20}
        assert isinstance(line["t"], float)
    assert traced["B1"][0]["id"] == traced["B3"][0]["id"]  # one overlay-wide id along the way


def trace(path: Path, counters: Counter[str]) -> ForwardingTrace:
    log = logging.LoggerAdapter(logging.getLogger("broker"), {"broker": "B1"})
    return ForwardingTrace(path, ManualClock(now=7.0), counters, log)


DELIVER = Deliver(("s1",), parse_publication("[class,stock],[price,20]"), "B1/c/1")


def test_a_restarted_broker_goes_on_on_a_line_of_its_own(tmp_path: Path) -> None:
    path = tmp_path / "B1.jsonl"
    path.write_text('{"t": 1.0, "to": "c1", "id": "B1/c/0", "publ')  # torn by a kill
    counters: Counter[str] = Counter()
    traced = trace(path, counters)
    traced("c1", DELIVER)
    traced.close()
    torn, line = path.read_text().splitlines()
    assert torn.endswith('"publ') and json.loads(line)["id"] == "B1/c/1"
    assert counters == {"trace.lines": 1}


def test_a_full_disk_ends_the_trace_not_the_broker() -> None:
    counters: Counter[str] = Counter()
    traced = trace(Path("/dev/full"), counters)  # every write: no space left on device
    traced("c1", DELIVER)
    traced("c1", DELIVER)  # after the first failure: not tried again, not logged again
    assert counters == {"trace.failed": 1}
    traced.close()
