"""Compaction: idempotent, never loses landed rows, survives a crash between its steps."""

from __future__ import annotations

import shutil
import threading
import time as clock
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from broker.language import Filter, parse_filter, parse_publication
from tests.history.conftest import land
from wfm.history.landing import Landing, segments
from wfm.history.store import HistoryStore

DAY = 86400.0
T0 = 1_780_000_000.0
ROWS = [
    (f"j{n}", T0 + n * DAY / 3, parse_publication(f"[class,JOBSTATUS],[jobname,J{n % 2}],[duration,{n}.5]"))
    for n in range(9)
] + [("t0", T0, parse_publication("[class,Trigger],[applname,PAYROLL],[GID,g1]"))]
EVERYTHING = parse_filter("[class,eq,JOBSTATUS]")


def ids(store: HistoryStore, subscription: Filter = EVERYTHING) -> list[str]:
    return [s.id for s in store.query(subscription, now=T0)]


def table_ids(store: HistoryStore) -> list[str]:
    return sorted(r.id for r in store.spark.read.parquet(str(store.table)).select("id").collect())


def test_compaction_moves_landing_into_a_partitioned_table(store: HistoryStore) -> None:
    land(store, ROWS)
    before = ids(store)
    assert store.compact() == 1
    assert segments(store.landing) == []
    assert ids(store) == before == [f"j{n}" for n in range(9)]
    assert table_ids(store) == sorted(id for id, _, _ in ROWS)
    days = sorted(p.name for p in store.table.glob("date=*"))
    assert days == ["date=2026-05-28", "date=2026-05-29", "date=2026-05-30", "date=2026-05-31"]
    assert {p.name for p in store.table.glob("date=*/class=*")} == {"class=JOBSTATUS", "class=Trigger"}
    frame = store.frame()
    assert dict(frame.dtypes)["n_duration"] == "double" and dict(frame.dtypes)["s_jobname"] == "string"
    assert [s.publication for s in store.query(parse_filter("[class,eq,JOBSTATUS],[duration,>,7]"))] == [
        ROWS[7][2],
        ROWS[8][2],
    ]


def test_compacting_twice_or_the_same_rows_again_changes_nothing(store: HistoryStore) -> None:
    land(store, ROWS[:5])
    store.compact()
    assert store.compact() == 0
    land(store, ROWS)  # a historian that landed the first five again, and more
    store.compact()
    assert table_ids(store) == sorted(id for id, _, _ in ROWS)


def test_crash_between_writing_the_table_and_removing_segments(store: HistoryStore) -> None:
    land(store, ROWS)
    kept = store.path / "kept"
    shutil.copytree(store.landing, kept)
    store.compact()
    shutil.rmtree(store.landing)
    shutil.copytree(kept, store.landing)  # as if the process died before removing the segments
    assert ids(store) == [f"j{n}" for n in range(9)]  # read once, though both in table and landing
    assert store.compact() == 1
    assert table_ids(store) == sorted(id for id, _, _ in ROWS)
    assert segments(store.landing) == []


def test_the_segment_being_written_is_left_alone(store: HistoryStore) -> None:
    land(store, ROWS[:3])
    writer = Landing(store.landing)
    for id, time, publication in ROWS[3:]:
        writer.append(publication, time, "tester", id)
    writer.flush()
    assert store.compact() == 1
    assert len(segments(store.landing)) == 1
    assert ids(store) == [f"j{n}" for n in range(9)]  # visible before it is compacted
    writer.close()
    store.compact()
    assert segments(store.landing) == [] and store.frame().where(F.col("class") == "JOBSTATUS").count() == 9


def test_small_files_of_a_folder_are_merged_into_one(tmp_path: Path, spark: SparkSession) -> None:
    store = HistoryStore(tmp_path / "store", spark, merge_at=3)
    folder = store.table / "date=2026-05-29" / "class=JOBSTATUS"  # j1, j2 and j3 fall on that day
    for n in (1, 2, 3):
        land(store, [ROWS[n]])
        store.compact()
        assert len(list(folder.glob("*.parquet"))) == (n if n < 3 else 1)
    assert ids(store) == ["j1", "j2", "j3"]
    assert list(store.table.glob("date=*/.*")) == list(store.path.glob(".merge-staging-*")) == []


@pytest.mark.parametrize("moment", ["prepared", "renamed away", "swapped"])
def test_a_merge_a_crash_interrupted_is_completed_or_dropped(
    tmp_path: Path, spark: SparkSession, moment: str
) -> None:
    store = HistoryStore(tmp_path / "store", spark)
    land(store, ROWS[1:4])
    store.compact()
    folder = store.table / "date=2026-05-29" / "class=JOBSTATUS"
    merged, old = (folder.with_name(prefix + folder.name) for prefix in (".merge-", ".old-"))
    shutil.copytree(folder, merged)  # the merge, complete, as the swap found it
    if moment != "prepared":
        folder.rename(old)
    if moment == "swapped":
        merged.rename(folder)
    assert store.compact() == 0  # nothing landed: it only recovers
    assert ids(store) == ["j1", "j2", "j3"]  # each once
    assert list(store.table.glob("date=*/.*")) == []


def test_a_query_racing_a_compaction_sees_every_row_once(tmp_path: Path, spark: SparkSession) -> None:
    """A compaction that starts while a query reads writes the table at once, but removes landing
    segments and swaps merged folders only after the query ends: the query read the landing log
    and listed the table's files before, and every row reaches it exactly once."""
    store = HistoryStore(tmp_path / "store", spark, merge_at=2)
    land(store, [ROWS[1]])  # j1's folder gets a second file from this compaction, and is merged
    store.compact()
    land(store, ROWS[2:])
    expected = [f"j{n}" for n in range(1, 9)]
    reading = store.query(EVERYTHING, now=T0)
    got = [next(reading).id]  # the query is under way: landing read, table files listed
    compaction = threading.Thread(target=store.compact)
    compaction.start()
    deadline = clock.monotonic() + 120
    while len(table_ids(store)) < len(ROWS) - 1:  # its write committed; now it waits for the query
        assert compaction.is_alive() and clock.monotonic() < deadline, "compaction did not write"
        clock.sleep(0.2)
    compaction.join(1.0)
    assert compaction.is_alive() and segments(store.landing)  # nothing removed under the query
    got += [stored.id for stored in reading]
    assert got == expected
    compaction.join(120)
    assert not compaction.is_alive() and segments(store.landing) == []
    assert len(list((store.table / "date=2026-05-29" / "class=JOBSTATUS").glob("*.parquet"))) == 1
    assert ids(store) == expected


def test_queries_over_the_landing_log_alone_start_no_spark(tmp_path: Path) -> None:
    def no_spark() -> SparkSession:
        raise AssertionError("Spark was started")

    store = HistoryStore(tmp_path / "store", no_spark)
    land(store, ROWS)
    assert ids(store) == [f"j{n}" for n in range(9)]
    assert ids(store, parse_filter("[class,eq,JOBSTATUS],[duration,>,7],[time,>=,now]")) == ["j7", "j8"]
    assert ids(store, parse_filter("[class,eq,JOBSTATUS],[time,<,now]")) == []  # none before T0
