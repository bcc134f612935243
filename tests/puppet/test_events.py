"""SESDAD's event lines, and the BroEvents read from the brokers' forwarding traces (files
written by hand here; a broker writing one: tests/transport/test_trace.py)."""

from __future__ import annotations

import json
from pathlib import Path

from wfm.puppet.events import Traces, bro_event, pub_event, sub_event
from wfm.puppet.topics import CLASS


def test_the_seed_formats() -> None:
    assert pub_event("publisher0", "/edu/ulisboa", 3) == "PubEvent publisher0, publisher0, /edu/ulisboa, 3"
    assert (
        bro_event("broker0", "publisher0", "/edu/ulisboa", 3)
        == "BroEvent broker0, publisher0, /edu/ulisboa, 3"
    )
    assert sub_event("sub0", "publisher0", "/edu/ulisboa", 3) == "SubEvent sub0, publisher0, /edu/ulisboa, 3"


def line(publisher: str, topic: str, seq: object, cls: str = CLASS) -> bytes:
    attributes = {"class": cls, "publisher": publisher, "seq": seq, "topic": topic}
    traced = {"t": 1.0, "to": "b1", "id": "x", "publication": "-", "attributes": attributes}
    return json.dumps(traced).encode() + b"\n"


def test_each_forwarding_is_told_once_as_the_traces_grow(tmp_path: Path) -> None:
    files = {"b0": tmp_path / "b0.jsonl", "b1": tmp_path / "b1.jsonl"}
    traces = Traces(files)
    assert traces.read() == []  # no broker has written yet
    files["b0"].write_bytes(line("p", "/a", 1) + line("p", "/a", 2))
    assert traces.read() == [("b0", "p", "/a", 1), ("b0", "p", "/a", 2)]
    with files["b0"].open("ab") as b0:
        b0.write(line("p", "/a", 1))  # sent again after a reconnection: told once
    files["b1"].write_bytes(line("p", "/a", 1))  # another broker on the way: its own BroEvent
    assert traces.read() == [("b1", "p", "/a", 1)]
    assert traces.read() == []


def test_a_line_being_written_waits_for_its_end(tmp_path: Path) -> None:
    path = tmp_path / "b0.jsonl"
    whole = line("p", "/a", 3)
    path.write_bytes(whole[:20])
    traces = Traces({"b0": path})
    assert traces.read() == []
    with path.open("ab") as file:
        file.write(whole[20:])
    assert traces.read() == [("b0", "p", "/a", 3)]


def test_what_is_not_a_puppet_publication_is_skipped(tmp_path: Path) -> None:
    """Other publications (an agent's), a torn line (a broker killed while writing it: restarted,
    it starts a new line), and attributes of the wrong types are counted, not told."""
    path = tmp_path / "b0.jsonl"
    path.write_bytes(
        line("p", "/a", 1, cls="JOBSTATUS")
        + b'{"t": 1.0, "to": "b1", "attr\n'
        + line("p", "/a", 2)  # the restarted broker's first line, after the torn one
        + line("p", "/a", "3")
        + b"[]\n"
    )
    traces = Traces({"b0": path})
    assert traces.read() == [("b0", "p", "/a", 2)]
    assert traces.skipped == 4
