"""The history store: a landing log and a Parquet table, queried together with Spark.

``STORE/landing/`` holds the JSON-lines segments the historian appends (see ``landing.py``);
``STORE/table/`` the Parquet table, partitioned by ``date`` (UTC day of the broker time) and
``class``, in the wide layout of ``spark_filter.py``; ``STORE/table/_attributes.json`` lists its
attribute columns, so reads need no schema merging and files written before an attribute first
appeared simply read null for it. The store holds every envelope the historian kept (commands
too): it is its user's only (0700, made or narrowed so by the historian), so the modes Spark gives
the table's files do not matter.

Compaction (landing -> table) is idempotent and never loses landing data: it records the new
columns, writes only ids the table lacks, and removes the segments after the write committed; a
crash anywhere in between leaves segments whose rows a rerun finds already written.
"""

from __future__ import annotations

import fcntl
import heapq
import json
import os
import threading
import time as clock
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import date
from pathlib import Path
from typing import Any

from pyspark.sql import Column, DataFrame, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DateType, DoubleType, StringType, StructField, StructType

from broker.errors import LocalError
from broker.language import Filter, Publication
from broker.matching.oracle import matches
from wfm.history.landing import StoredPublication, fsync_path, read_landing, sealed_segments, segments
from wfm.history.merging import merge_small_files, recover
from wfm.history.rollup import Rollups
from wfm.history.spark_filter import (
    NUMBER_PREFIX,
    STRING_PREFIX,
    compile_filter,
    date_bounds,
)
from wfm.history.windows import time_bounds

__all__ = ["PYTHON_LANDING_BYTES", "HistoryStore", "StoreError", "require_store", "to_stored"]

_FIXED = [
    StructField("id", StringType()),
    StructField("time", DoubleType()),
    StructField("publisher", StringType()),
]
_FIXED_NAMES = [f.name for f in _FIXED]
_PARTITIONS = [StructField("date", DateType()), StructField("class", StringType())]
_LANDING_SCHEMA = "struct<id:string,time:double,publisher:string,class:string,attributes:map<string,variant>>"


PYTHON_LANDING_BYTES = 32 * 1024 * 1024  # about 100,000 publications: a second or two in Python


class StoreError(LocalError):
    """The store cannot answer: a missing or unreadable store directory."""


def require_store(path: Path) -> None:
    """StoreError unless ``path`` looks like a store (it has a landing log or a table)."""
    if not (path / "landing").is_dir() and not (path / "table").is_dir():
        raise StoreError(f"no history store at {path} (no landing/ or table/ inside)")


class HistoryStore:
    """``HistoryStore(path, spark).query(filter, since, until)``: stored publications in time order."""

    def __init__(
        self, path: Path | str, spark: SparkSession | Callable[[], SparkSession], merge_at: int = 8
    ) -> None:
        """``spark`` may be a function that makes the session: a store whose table is still empty
        answers queries from its landing log without starting Spark."""
        self.path = Path(path)
        # neither session class is callable (a Spark Connect session is no subclass of the classic
        # one, so an isinstance test against SparkSession would call a Connect session)
        self._make_spark: Callable[[], SparkSession] | None = spark if callable(spark) else None
        self._spark: SparkSession | None = None if callable(spark) else spark
        self._spark_lock = threading.Lock()
        self.landing = self.path / "landing"
        self.table = self.path / "table"
        self._attributes_file = self.table / "_attributes.json"
        self.rollups = Rollups(self.path, self.table, lambda: self.spark, self._table_days)
        self.merge_at = merge_at  # small files in a folder that make compaction merge them
        self.python_landing_bytes = PYTHON_LANDING_BYTES

    # -- reading

    def has_table(self) -> bool:
        """Whether a compaction wrote the table: only then do queries need Spark."""
        return self._attributes_file.exists()

    def frame(self) -> DataFrame:
        """Every stored publication, compacted or still landing, one row per id (wide layout).

        Ids are unique in the table (compaction writes only new ones), so only landed rows are
        checked against it."""
        table = self.table_frame()
        landed = self.landed(table)
        return table if landed is None else table.unionByName(landed, allowMissingColumns=True)

    @property
    def spark(self) -> SparkSession:
        with self._spark_lock:  # a historian's query may ask while its start-up thread makes it
            if self._spark is None:
                assert self._make_spark is not None  # one of the two is set
                self._spark = self._make_spark()
        return self._spark

    def landed(self, table: DataFrame | None = None) -> DataFrame | None:
        """The landing log's rows the table (``table``: what :meth:`table_frame` returned) does
        not hold yet; None when nothing is landing."""
        paths = segments(self.landing)
        if not paths:
            return None
        return self._unwritten(paths, self.table_frame() if table is None else table)[0]

    def select(
        self,
        subscription: Filter,
        since: float | None = None,
        until: float | None = None,
        now: float | None = None,
        frame: DataFrame | None = None,
    ) -> DataFrame:
        """Rows matching ``subscription`` with ``since <= time < until``, in time order; from
        ``frame`` (what :meth:`frame` returned earlier) if given."""
        now = clock.time() if now is None else now
        frame = self.frame() if frame is None else frame
        condition = compile_filter(subscription, frame.columns, now)
        condition &= date_bounds(*time_bounds(subscription, now, since, until))
        if since is not None:
            condition &= F.col("time") >= F.lit(since)
        if until is not None:
            condition &= F.col("time") < F.lit(until)
        return frame.where(condition).orderBy("time", "id")

    def query(
        self,
        subscription: Filter,
        since: float | None = None,
        until: float | None = None,
        now: float | None = None,
    ) -> Iterator[StoredPublication]:
        """The stored publications matching ``subscription`` in time order (ties by id).

        ``time`` predicates are resolved at ``now`` (default: the clock); ``since`` is inclusive
        and ``until`` exclusive, so a caller joining history to live data at an instant T asks for
        ``until=T`` and takes live publications from T on.

        The table is read by Spark. The landing log, normally the few minutes of publications
        between compactions, is read by the oracle matcher in Python (the compiled filters are
        tested equal to it) while it is under ``python_landing_bytes``: that spares Spark a job
        or two per query and, while the table is empty, Spark altogether. A larger landing log
        (compaction off or failing) goes through Spark with the table.
        """
        now = clock.time() if now is None else now
        with self.reading():
            paths = segments(self.landing)
            if sum(path.stat().st_size for path in paths) > self.python_landing_bytes:
                frame = self.select(subscription, since, until, now)
                columns = frame.columns
                yield from (to_stored(row, columns) for row in frame.toLocalIterator())
                return
            landed = [s for s in read_landing(paths) if _in(subscription, s, since, until, now)]
            written: Iterator[StoredPublication] = iter(())
            if self.has_table():
                frame = self.select(subscription, since, until, now, self.table_frame())
                columns = frame.columns
                written = (to_stored(row, columns) for row in frame.toLocalIterator())
            last = None  # a landed row the table also has (compaction died before removing it) once
            for stored in heapq.merge(written, sorted(landed, key=_time_order), key=_time_order):
                if stored.id != last:
                    yield stored
                last = stored.id

    # -- compaction

    @contextmanager
    def locked(self) -> Iterator[None]:
        """The store's lock (a lock file, so across processes and threads): compactions and
        reports take it, so a second compaction waits and then finds the segments gone, and no
        rollup or landing segment is removed while a report reads it."""
        self.path.mkdir(mode=0o700, parents=True, exist_ok=True)  # the historian's is narrowed if need be
        with open(self.path / ".compact.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    @contextmanager
    def _files_lock(self, kind: int) -> Iterator[None]:
        self.path.mkdir(mode=0o700, parents=True, exist_ok=True)  # the historian's is narrowed if need be
        with open(self.path / ".files.lock", "w") as lock:
            fcntl.flock(lock, kind)
            yield

    def reading(self) -> AbstractContextManager[None]:
        """Held while a query lists and reads files: compaction removes none meanwhile."""
        return self._files_lock(fcntl.LOCK_SH)

    def _removing(self) -> AbstractContextManager[None]:
        return self._files_lock(fcntl.LOCK_EX)

    def compact(self) -> int:
        """Move every sealed landing segment into the table, merge folders of small files and
        bring the daily rollups up to date; returns how many segments."""
        with self.locked():
            recover(self.table)
            moved = self._compact()
            merge_small_files(self.table, self.merge_at, self._table_files, self._removing)
            self.rollups.refresh()
            return moved

    def _compact(self) -> int:
        paths = sealed_segments(self.landing)
        if not paths:
            return 0
        fresh, dates = self._unwritten(paths, self.table_frame())
        known = self.attributes()
        new = [c for c in fresh.columns if c.startswith((STRING_PREFIX, NUMBER_PREFIX)) and c not in known]
        if new or not self.has_table():
            self._write_attributes(sorted({*known, *new}))
        # one file per day and class and compaction, rather than one per day, class and input split
        fresh = fresh.repartition("date", "class")
        fresh.write.mode("append").partitionBy("date", "class").parquet(str(self.table))
        self._fsync_days(dates)  # Spark's local writes are not fsync'd; the segments go next
        with self._removing():
            for path in paths:
                path.unlink()
        fsync_path(self.landing)
        return len(paths)

    def _fsync_days(self, dates: list[date]) -> None:
        for day in dates:
            folder = self.table / f"date={day.isoformat()}"
            for directory in [folder, *folder.iterdir()] if folder.is_dir() else []:
                for file in directory.iterdir():
                    if file.is_file():
                        fsync_path(file)
                fsync_path(directory)
        fsync_path(self.table)

    def attributes(self) -> list[str]:
        """The table's attribute columns."""
        if not self.has_table():
            return []
        return list(json.loads(self._attributes_file.read_text()))

    def _write_attributes(self, columns: list[str]) -> None:
        self.table.mkdir(parents=True, exist_ok=True)
        temporary = self._attributes_file.with_suffix(".tmp")
        with open(temporary, "w") as handle:
            json.dump(columns, handle)
            handle.flush()
            os.fsync(handle.fileno())
        temporary.replace(self._attributes_file)
        fsync_path(self.table)

    def table_frame(self) -> DataFrame:
        fields = [*_FIXED, *(_attribute_field(c) for c in self.attributes()), *_PARTITIONS]
        schema = StructType(fields)
        if not self.has_table():
            return self.spark.createDataFrame([], schema)
        frame = self.spark.read.schema(schema).parquet(str(self.table))
        # Spark writes the empty class as the null partition; no class is null.
        return frame.withColumn("class", F.coalesce(F.col("class"), F.lit("")))

    def _table_days(self, days: list[date]) -> DataFrame:
        return self.table_frame().where(F.col("date").isin(days))

    def _table_files(self, files: list[Path]) -> DataFrame:
        schema = self.table_frame().schema
        return self.spark.read.schema(schema).option("basePath", str(self.table)).parquet(*map(str, files))

    def _unwritten(self, paths: Sequence[Path], table: DataFrame) -> tuple[DataFrame, list[date]]:
        """The landed rows the table lacks (after a crash between writing the table and removing
        the segments, it has them): an anti-join on the ids of the days they fall on; and the days."""
        landed, dates = self._landing_frame(paths)
        return landed.join(table.where(F.col("date").isin(dates)).select("id"), "id", "left_anti"), dates

    def _landing_frame(self, paths: Sequence[Path]) -> tuple[DataFrame, list[date]]:
        """Segments parsed by Spark into the wide layout (torn lines dropped, one row per id), and
        the days they cover."""
        lines = self.spark.read.text([str(p) for p in paths])
        parsed = lines.select(F.from_json("value", _LANDING_SCHEMA).alias("r")).select("r.*")
        parsed = parsed.where(F.col("id").isNotNull()).dropDuplicates(["id"])
        is_string: Any = lambda _, v: F.schema_of_variant(v) == "STRING"  # noqa: E731
        typed = parsed.select(
            *_FIXED_NAMES,
            "class",
            F.to_date(F.timestamp_seconds("time")).alias("date"),
            F.transform_values(
                F.map_filter("attributes", is_string), lambda _, v: F.variant_get(v, "$", "string")
            ).alias("strings"),
            # the number's JSON text, parsed by Java: correctly rounded like Python's float()
            F.transform_values(
                F.map_filter("attributes", lambda k, v: ~is_string(k, v)), lambda _, v: F.to_json(v)
            ).alias("numbers"),
        )
        keys = F.array_union(
            F.transform(F.map_keys("strings"), lambda k: F.concat(F.lit(STRING_PREFIX), k)),
            F.transform(F.map_keys("numbers"), lambda k: F.concat(F.lit(NUMBER_PREFIX), k)),
        )
        found = typed.agg(
            F.array_distinct(F.flatten(F.collect_set(keys))).alias("columns"),
            F.collect_set("date").alias("dates"),
        ).first()
        assert found is not None
        columns: list[Column | str] = [*_FIXED_NAMES, *map(_landed, sorted(found.columns)), "date", "class"]
        return typed.select(*columns), list(found.dates)


def _time_order(stored: StoredPublication) -> tuple[float, str]:
    return stored.time, stored.id


def _in(
    subscription: Filter, stored: StoredPublication, since: float | None, until: float | None, now: float
) -> bool:
    """Within [since, until), and matched with its broker time as the publication's time."""
    if (since is not None and stored.time < since) or (until is not None and stored.time >= until):
        return False
    return matches(subscription, stored.publication, now, stored.time)


def _landed(column: str) -> Column:
    if column.startswith(STRING_PREFIX):
        return F.col("strings")[column.removeprefix(STRING_PREFIX)].alias(column)
    return F.col("numbers")[column.removeprefix(NUMBER_PREFIX)].cast("double").alias(column)


def _attribute_field(column: str) -> StructField:
    return StructField(column, StringType() if column.startswith(STRING_PREFIX) else DoubleType())


def to_stored(row: Row, columns: Sequence[str]) -> StoredPublication:
    """A row of the wide layout back to the publication it stores."""
    values = row.asDict()
    attributes = {
        column.removeprefix(STRING_PREFIX).removeprefix(NUMBER_PREFIX): values[column]
        for column in columns
        if column.startswith((STRING_PREFIX, NUMBER_PREFIX)) and values[column] is not None
    }
    return StoredPublication(
        values["id"], values["time"], values["publisher"], Publication(values["class"], attributes)
    )
