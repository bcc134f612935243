"""The landing log without Spark: batching, torn lines, duplicates, segments, and kill -9."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from broker.language import parse_publication
from wfm.history.landing import Landing, StoredPublication, read_landing, sealed_segments, segments

PUB = parse_publication("[class,JOBSTATUS],[applname,PAYROLL],[duration,1.5],[note,'a b']")


def test_flushes_by_count_and_by_time(tmp_path: Path) -> None:
    landing = Landing(tmp_path, batch_count=3, batch_seconds=1.0)
    landing.append(PUB, 1.0, "p", "1")
    assert landing.maybe_flush(100.0) == 0  # the first look starts the clock
    landing.append(PUB, 1.0, "p", "2")
    assert landing.maybe_flush(100.5) == 0
    assert landing.maybe_flush(101.0) == 2  # a second since the last flush
    for n in range(3):
        landing.append(PUB, 1.0, "p", f"c{n}")
    assert landing.maybe_flush(101.1) == 3  # a full batch
    assert landing.durable == 5 and landing.pending == 0
    assert [s.id for s in read_landing(segments(tmp_path))] == ["1", "2", "c0", "c1", "c2"]
    landing.close()


def test_round_trip_keeps_types(tmp_path: Path) -> None:
    with Landing(tmp_path) as landing:
        landing.append(
            parse_publication("[class,x],[n,100],[s,'100'],[f,0.1],[big,9007199254740992]"), 5.25, "p", "i"
        )
    (stored,) = read_landing(segments(tmp_path))
    assert stored == StoredPublication(
        "i", 5.25, "p", parse_publication("[class,x],[n,100],[s,'100'],[f,0.1],[big,9007199254740992]")
    )
    assert isinstance(stored.publication["n"], int) and isinstance(stored.publication["s"], str)


def test_torn_last_line_and_duplicates(tmp_path: Path) -> None:
    with Landing(tmp_path) as landing:
        landing.append(PUB, 1.0, "p", "a")
        landing.append(PUB, 2.0, "p", "b")
    with Landing(tmp_path) as landing:  # a restarted historian lands "b" again
        landing.append(PUB, 2.0, "p", "b")
        landing.append(PUB, 3.0, "p", "c")
    last = segments(tmp_path)[-1]
    line = StoredPublication("d", 4.0, "p", PUB).to_json()
    with open(last, "a") as handle:
        handle.write(line[: len(line) // 2])  # killed mid-write
    assert [(s.id, s.time) for s in read_landing(segments(tmp_path))] == [("a", 1.0), ("b", 2.0), ("c", 3.0)]


def test_segments_roll_over_and_held_ones_are_not_sealed(tmp_path: Path) -> None:
    with Landing(tmp_path, segment_bytes=1) as small:  # every flush fills a segment
        for n in range(3):
            small.append(PUB, 1.0, "p", str(n))
            small.flush()
    assert len(segments(tmp_path)) == 3
    landing = Landing(tmp_path)
    landing.append(PUB, 1.0, "p", "held")
    landing.flush()
    assert len(segments(tmp_path)) == 4
    assert sealed_segments(tmp_path) == segments(tmp_path)[:3]  # the one being written is not sealed
    landing.close()
    assert sealed_segments(tmp_path) == segments(tmp_path)
    assert [s.id for s in read_landing(segments(tmp_path))] == ["0", "1", "2", "held"]


WRITER = textwrap.dedent(
    """
    import sys, time
    from broker.language import parse_publication
    from wfm.history.landing import Landing
    pub = parse_publication("[class,JOBSTATUS],[applname,PAYROLL],[detail,'%s']" % ("x" * 200))
    landing = Landing(sys.argv[1], batch_count=50, batch_seconds=0.01, segment_bytes=200_000)
    n = 0
    while True:
        landing.append(pub, time.time(), "w", str(n))
        n += 1
        if landing.maybe_flush(time.monotonic()):
            print(landing.durable, flush=True)
    """
)


def test_kill_9_loses_nothing_reported_durable(tmp_path: Path) -> None:
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(tmp_path)], stdout=subprocess.PIPE, text=True, cwd=os.getcwd()
    )
    assert writer.stdout is not None
    durable = 0
    while durable < 3000:
        line = writer.stdout.readline()
        assert line, "the writer died"
        durable = int(line)
    os.kill(writer.pid, signal.SIGKILL)
    writer.wait(timeout=10)
    writer.stdout.close()
    ids = [int(s.id) for s in read_landing(segments(tmp_path))]
    assert ids[:durable] == list(range(durable))  # every line reported durable, in order
    assert ids == list(range(len(ids)))  # and nothing torn or out of order after them
    assert len(segments(tmp_path)) > 1  # it rolled over at least once
    records = [json.loads(line) for line in segments(tmp_path)[0].read_text().splitlines()]
    assert records[0]["class"] == "JOBSTATUS" and set(records[0]) == {
        "id",
        "time",
        "publisher",
        "class",
        "attributes",
    }
