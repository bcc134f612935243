"""``wfm report``: per job and period, runs, failures, NORUNs, mean and p95 duration and the slowest
generations, computed by Spark SQL from the daily rollups of the JOBSTATUS history (``rollup.py``).

A JOBSTATUS publication is ``[applname,W],[jobname,J],[GID,G],[status,SUCCESS|FAILURE|NORUN]`` and,
from the agents, a numeric ``duration`` in seconds. Runs are SUCCESS and FAILURE (a NORUN did not
run); durations are those of runs. The virtual jobs APPL_START and APPL_END are left out.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from datetime import date
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import DateType, DoubleType, StringType, StructField, StructType

from wfm.history.landing import StoredPublication, read_landing, segments
from wfm.history.rollup import SKETCH_K, SLOWEST_KEPT, VIRTUAL_JOBS, job_rows, partials
from wfm.history.spark_filter import utc_day
from wfm.history.store import HistoryStore

__all__ = ["HEADERS", "PERIODS", "JobPeriod", "job_report"]

PERIODS = ("day", "week")
HEADERS = ("workflow", "job", "period", "runs", "failures", "NORUN", "mean s", "p95 s", "slowest generations")


@dataclass(frozen=True, slots=True)
class JobPeriod:
    workflow: str
    job: str
    period: date  # the first day of the period (weeks start on Monday)
    runs: int
    failures: int
    noruns: int
    mean_duration: float | None
    p95_duration: float | None
    slowest: tuple[tuple[str, float], ...]  # (GID, duration), slowest first

    def cells(self) -> list[str]:
        """The row as text, in the order of HEADERS."""
        return [
            self.workflow,
            self.job,
            self.period.isoformat(),
            str(self.runs),
            str(self.failures),
            str(self.noruns),
            _seconds(self.mean_duration),
            _seconds(self.p95_duration),
            ", ".join(f"{gid} ({duration:.1f})" for gid, duration in self.slowest),
        ]

    def to_json(self) -> dict[str, object]:
        record = asdict(self)
        record["period"] = self.period.isoformat()
        record["slowest"] = [{"gid": gid, "duration": duration} for gid, duration in self.slowest]
        return record


def job_report(
    store: HistoryStore,
    workflow: str | None = None,
    since: float | None = None,
    by: str = "day",
    slowest: int = 3,
) -> list[JobPeriod]:
    """One entry per (workflow, job, period), sorted by those: the merge of the daily rollups of
    whole days, and of the same partials computed from the rows of a partial first day and of the
    landing log."""
    if by not in PERIODS:
        raise ValueError(f"period must be one of {', '.join(PERIODS)}, not {by!r}")
    if not 0 <= slowest <= SLOWEST_KEPT:
        raise ValueError(f"slowest must be 0 to {SLOWEST_KEPT}, not {slowest}")
    with store.locked():
        merged = _merged(store, workflow, since)
        timed = F.sum("duration_count") > 0  # a merged sketch of no durations has no quantile
        rows = (
            merged.groupBy(
                "workflow",
                "job",
                F.to_date(F.date_trunc(by, F.col("date").cast("timestamp"))).alias("period"),
            )
            .agg(
                F.sum("runs").alias("runs"),
                F.sum("failures").alias("failures"),
                F.sum("noruns").alias("noruns"),
                F.when(timed, F.sum("duration_sum") / F.sum("duration_count")).alias("mean"),
                F.when(
                    timed,
                    F.kll_sketch_get_quantile_double(F.kll_merge_agg_double("sketch", SKETCH_K), F.lit(0.95)),
                ).alias("p95"),
                F.slice(F.sort_array(F.flatten(F.collect_list("slowest")), asc=False), 1, slowest).alias(
                    "slowest"
                ),
            )
            .orderBy("workflow", "job", "period")
            # one JSON text per row: PySpark turns nested Rows into Python objects slowly, and a
            # year by day is 365,000 of them
            .select(F.to_json(F.struct("*")))
            .collect()
        )
    return [_job_period(json.loads(row[0])) for row in rows]


def _merged(store: HistoryStore, workflow: str | None, since: float | None) -> Any:
    """The daily partials (runs, failures, noruns, duration sums, sketches, slowest) of every job
    since ``since``: the rollups of whole days, and those computed from the rows of a partial
    first day and of the landing log. Call with the store locked."""
    store.rollups.refresh()
    days, raw = store.rollups.frame(), _landed_jobs(store)
    if since is not None:
        first = utc_day(since)
        days = days.where(F.col("date") > first)
        table = job_rows(store.table_frame().where(F.col("date") == first))
        raw = table if raw is None else table.unionByName(raw)
        raw = raw.where(F.col("time") >= since)
    merged = days if raw is None else days.unionByName(partials(raw))
    if workflow is not None:
        merged = merged.where(F.col("workflow") == workflow)
    return merged


@dataclass(frozen=True)
class JobSummary:
    """One job over a whole range: its runs, failures and NORUNs, and its durations' mean, median
    and 95th percentile (None when no run has a duration)."""

    workflow: str
    job: str
    runs: int
    failures: int
    noruns: int
    mean_duration: float | None
    p50_duration: float | None
    p95_duration: float | None


def job_summary(
    store: HistoryStore, workflow: str | None = None, since: float | None = None, until: date | None = None
) -> list[JobSummary]:
    """One entry per (workflow, job), sorted by those, over the days from ``since`` to ``until``
    (included): what :func:`job_report` gives per period, merged over them all (the quantiles
    from the merged sketches, not from the periods' own)."""
    with store.locked():
        merged = _merged(store, workflow, since)
        if until is not None:
            merged = merged.where(F.col("date") <= F.lit(until.isoformat()).cast("date"))
        timed = F.sum("duration_count") > 0
        sketch = F.kll_merge_agg_double("sketch", SKETCH_K)
        rows = (
            merged.groupBy("workflow", "job")
            .agg(
                F.sum("runs").alias("runs"),
                F.sum("failures").alias("failures"),
                F.sum("noruns").alias("noruns"),
                F.when(timed, F.sum("duration_sum") / F.sum("duration_count")).alias("mean"),
                F.when(timed, F.kll_sketch_get_quantile_double(sketch, F.lit(0.5))).alias("p50"),
                F.when(timed, F.kll_sketch_get_quantile_double(sketch, F.lit(0.95))).alias("p95"),
            )
            .orderBy("workflow", "job")
            .select(F.to_json(F.struct("*")))
            .collect()
        )
    found = [json.loads(row[0]) for row in rows]
    return [
        JobSummary(
            r["workflow"],
            r["job"],
            r["runs"],
            r["failures"],
            r["noruns"],
            r.get("mean"),
            r.get("p50"),
            r.get("p95"),
        )
        for r in found
    ]


_JOB_ROW = StructType(
    [
        StructField("id", StringType()),
        StructField("date", DateType()),
        StructField("time", DoubleType()),
        StructField("workflow", StringType()),
        StructField("job", StringType()),
        StructField("status", StringType()),
        StructField("gid", StringType()),
        StructField("duration", DoubleType()),
    ]
)


def _landed_jobs(store: HistoryStore) -> DataFrame | None:
    """The landing log's rows as :func:`job_rows` makes them, those the table lacks; None when
    nothing is landing. A landing log under ``python_landing_bytes`` (the minutes since the last
    compaction) is read in Python and handed to Spark as a few rows of the report's plan: parsing
    it with Spark would cost a report a job of its own (the columns and days it covers) and JSON
    parsing in the next, seconds even through a warm Spark Connect server (docs/performance.md)."""
    paths = segments(store.landing)
    if not paths:
        return None
    if sum(path.stat().st_size for path in paths) > store.python_landing_bytes:
        landed = store.landed()
        return None if landed is None else job_rows(landed)
    rows: list[tuple[Any, ...]] = [row for row in map(_job_row, read_landing(paths)) if row is not None]
    if not rows:
        return None
    days = sorted({row[1] for row in rows})
    written = store.table_frame().where(F.col("date").isin(days)).select("id")  # after a crash
    local = store.spark.createDataFrame(rows, _JOB_ROW)
    return local.join(written, "id", "left_anti").select(*_JOB_ROW.fieldNames()[1:])


def _job_row(stored: StoredPublication) -> tuple[Any, ...] | None:
    """What :func:`job_rows` makes of one landed publication (with its id first), or None: the
    table's typed columns are a string's or a number's, so an attribute of the other type reads
    as missing there and here."""
    publication = stored.publication
    if publication.cls != "JOBSTATUS":
        return None
    text = {k: v for k, v in publication.items() if isinstance(v, str) and k != "class"}
    workflow, job = text.get("applname"), text.get("jobname")
    if workflow is None or job is None or job in VIRTUAL_JOBS:
        return None
    status = text.get("status")
    duration = publication.get("duration")
    number = isinstance(duration, int | float) and not isinstance(duration, bool)
    when = utc_day(stored.time)  # the date partition it would be compacted into
    timed = float(duration) if number and status is not None and status != "NORUN" else None  # type: ignore[arg-type]
    return (stored.id, when, stored.time, workflow, job, status, text.get("GID"), timed)


def _job_period(r: dict[str, Any]) -> JobPeriod:
    """A row of the report's frame, from its JSON (which leaves out null fields)."""
    return JobPeriod(
        r["workflow"],
        r["job"],
        date.fromisoformat(r["period"]),
        r["runs"],
        r["failures"],
        r["noruns"],
        r.get("mean"),
        r.get("p95"),
        tuple((s.get("gid", ""), s["duration"]) for s in r["slowest"]),  # a GID not a string: none
    )


def _seconds(value: float | None) -> str:
    return "" if value is None else f"{value:.1f}"
