"""Daily JOBSTATUS rollups: what ``wfm report`` needs per (day, workflow, job), kept beside the table.

Why: a yearly report would otherwise re-read every row of the year (ten million for a 1,000-job
estate). Counts, sums, KLL
sketches (DataSketches, for the p95) and the k slowest runs all merge, so a week or a year is the
merge of its days: about 365,000 small rows for a 1,000-job estate's year instead of ten million.

``STORE/rollup/month=YYYY-MM/`` holds one Parquet file of that month's daily partials (one file
per month: reading a file costs Spark milliseconds, so a year of daily files cost seconds) and
``_source.json``, per day the names and sizes of the table files its partials were computed from.
A day whose table files differ (compaction appended to it) is recomputed before use, its month's
file rewritten, so a rollup is a cache that is never stale: deleting ``rollup/`` only
costs the time to rebuild it. Compaction refreshes the days it wrote; a report refreshes whatever
else is missing. Callers hold the store's lock (``HistoryStore.locked``), so a month's folder is
never swapped while a report reads it.
"""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Callable
from datetime import date
from pathlib import Path

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DateType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from wfm.history.landing import fsync_path
from wfm.history.spark_filter import value_column

__all__ = ["SKETCH_K", "SLOWEST_KEPT", "VIRTUAL_JOBS", "Rollups", "job_rows", "partials"]

VIRTUAL_JOBS = ["APPL_START", "APPL_END"]
SLOWEST_KEPT = 5  # per day and job; a report can show up to this many slowest generations
SKETCH_K = 1000  # KLL accuracy: exact below 1,000 runs per group, else within about 0.3% of rank
_JOBSTATUS = "class=JOBSTATUS"
_SOURCE = "_source.json"  # Spark's reader skips names starting with "_"

_SLOWEST = ArrayType(StructType([StructField("duration", DoubleType()), StructField("gid", StringType())]))
SCHEMA = StructType(
    [
        StructField("workflow", StringType()),
        StructField("job", StringType()),
        StructField("runs", LongType()),
        StructField("failures", LongType()),
        StructField("noruns", LongType()),
        StructField("duration_sum", DoubleType()),
        StructField("duration_count", LongType()),
        StructField("sketch", BinaryType()),
        StructField("slowest", _SLOWEST),
        StructField("date", DateType()),
    ]
)


def job_rows(frame: DataFrame) -> DataFrame:
    """The wide layout's JOBSTATUS rows of real jobs, as (date, time, workflow, job, status, gid,
    duration); a NORUN did not run, so it has no duration."""
    columns = frame.columns

    def text(name: str) -> Column:
        return value_column(name, True, columns)

    status = text("status")
    return frame.where(
        (F.col("class") == "JOBSTATUS")
        & text("applname").isNotNull()
        & text("jobname").isNotNull()
        & ~text("jobname").isin(VIRTUAL_JOBS)
    ).select(
        "date",
        "time",
        text("applname").alias("workflow"),
        text("jobname").alias("job"),
        status.alias("status"),
        text("GID").alias("gid"),
        F.when(status != "NORUN", value_column("duration", False, columns)).alias("duration"),
    )


def partials(rows: DataFrame) -> DataFrame:
    """One mergeable row per (date, workflow, job) of :func:`job_rows` output, in :data:`SCHEMA`."""
    counted = lambda status: F.sum(F.when(F.col("status") == status, 1).otherwise(0)).cast("long")  # noqa: E731
    timed = F.when(F.col("duration").isNotNull(), F.struct("duration", "gid"))
    return (
        rows.groupBy("date", "workflow", "job")
        .agg(
            (counted("SUCCESS") + counted("FAILURE")).alias("runs"),
            counted("FAILURE").alias("failures"),
            counted("NORUN").alias("noruns"),
            F.sum("duration").alias("duration_sum"),
            F.count("duration").alias("duration_count"),
            F.kll_sketch_agg_double("duration", SKETCH_K).alias("sketch"),
            # ordered by (duration, gid), so equal durations are kept the same way on every run
            F.max_by(timed, timed, SLOWEST_KEPT).alias("slowest"),
        )
        .select(*SCHEMA.fieldNames())
    )


class Rollups:
    """The rollup directory of one store's table (``table``: ``STORE/table``)."""

    def __init__(
        self,
        store: Path,
        table: Path,
        spark: Callable[[], SparkSession],
        read_days: Callable[[list[date]], DataFrame],
    ) -> None:
        self.path = store / "rollup"
        self._staging_root = store / ".rollup-staging"
        self.table = table
        self.spark = spark
        self._read_days = read_days  # the table's rows of those days

    def frame(self) -> DataFrame:
        """Every day's partials (refresh first)."""
        return self.spark().read.schema(SCHEMA).parquet(str(self.path)).select(*SCHEMA.fieldNames())

    def refresh(self) -> list[date]:
        """Recompute the days whose table files changed, drop those the table no longer has;
        returns the days recomputed."""
        self.path.mkdir(parents=True, exist_ok=True)
        current: dict[str, dict[str, list[list[object]]]] = {}  # month -> day -> table files
        for folder in self.table.glob(f"date=*/{_JOBSTATUS}"):
            day = folder.parent.name.removeprefix("date=")
            current.setdefault(day[:7], {})[day] = _source(folder)
        for folder in self.path.glob("month=*"):
            if _month(folder) not in current:
                shutil.rmtree(folder)
        recorded = {month: _recorded(self._folder(month)) for month in current}
        stale_months = sorted(month for month, days in current.items() if recorded[month] != days)
        if not stale_months:
            return []
        stale = sorted(
            date.fromisoformat(day)
            for month in stale_months
            for day, files in current[month].items()
            if (recorded[month] or {}).get(day) != files
        )
        rows = partials(job_rows(self._read_days(stale)))
        kept = [self._folder(m) for m in stale_months if recorded[m] is not None]
        if kept:  # the stale months' other days, rewritten unchanged into the month's new file
            present = [date.fromisoformat(day) for month in stale_months for day in current[month]]
            old = self.spark().read.schema(SCHEMA).parquet(*map(str, kept))
            rows = rows.unionByName(old.where(F.col("date").isin(present) & ~F.col("date").isin(stale)))
        staging = self._staging_root / uuid.uuid4().hex
        month = F.date_format("date", "yyyy-MM")
        rows.withColumn("month", month).repartition("month").write.partitionBy("month").parquet(str(staging))
        for name in stale_months:
            self._install(name, staging / f"month={name}", current[name])
        shutil.rmtree(self._staging_root)
        fsync_path(self.path)
        return stale

    def _folder(self, month: str) -> Path:
        return self.path / f"month={month}"

    def _install(self, month: str, computed: Path, source: dict[str, list[list[object]]]) -> None:
        """Swap the month's folder for the new one, its source list written (and fsync'd) first;
        a month without real jobs' rows gets a folder with the source list alone."""
        computed.mkdir(parents=True, exist_ok=True)
        for file in computed.iterdir():
            fsync_path(file)
        (computed / _SOURCE).write_text(json.dumps(source))
        fsync_path(computed / _SOURCE)
        fsync_path(computed)
        folder = self._folder(month)
        if folder.exists():
            shutil.rmtree(folder)
        computed.rename(folder)


def _source(folder: Path) -> list[list[object]]:
    return sorted([file.name, file.stat().st_size] for file in folder.glob("*.parquet"))


def _recorded(folder: Path) -> dict[str, list[list[object]]] | None:
    """The month folder's source list; None if missing or unreadable (the month is recomputed)."""
    try:
        recorded = json.loads((folder / _SOURCE).read_text())
    except (OSError, ValueError):
        return None
    return recorded if isinstance(recorded, dict) else None


def _month(folder: Path) -> str:
    return folder.name.removeprefix("month=")
