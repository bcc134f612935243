"""``wfm report``: per job and period, runs, failures, NORUNs, mean and p95 duration and the slowest
generations, computed by Spark SQL over the JOBSTATUS history.

A JOBSTATUS publication is ``[applname,W],[jobname,J],[GID,G],[status,SUCCESS|FAILURE|NORUN]`` and,
from the agents, a numeric ``duration`` in seconds. Runs are SUCCESS and FAILURE (a NORUN did not
run); durations are those of runs. The virtual jobs APPL_START and APPL_END are left out.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import date

from pyspark.sql import Column
from pyspark.sql import functions as F

from broker.language import Filter, Predicate
from wfm.history.spark_filter import compile_filter, date_bounds, value_column
from wfm.history.store import HistoryStore

__all__ = ["HEADERS", "PERIODS", "JobPeriod", "job_report"]

PERIODS = ("day", "week")
VIRTUAL_JOBS = ["APPL_START", "APPL_END"]
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
    """One entry per (workflow, job, period), sorted by those."""
    if by not in PERIODS:
        raise ValueError(f"period must be one of {', '.join(PERIODS)}, not {by!r}")
    frame = store.frame()
    columns = frame.columns
    wanted = Filter("JOBSTATUS", (Predicate("applname", "eq", workflow),) if workflow else ())
    condition = compile_filter(wanted, columns, now=0.0) & date_bounds(since, None)
    if since is not None:
        condition &= F.col("time") >= F.lit(since)

    def text(name: str) -> Column:
        return value_column(name, True, columns)

    jobs = frame.where(condition & ~text("jobname").isin(VIRTUAL_JOBS)).select(
        text("applname").alias("workflow"),
        text("jobname").alias("job"),
        F.to_date(F.date_trunc(by, F.timestamp_seconds("time"))).alias("period"),
        text("status").alias("status"),
        text("GID").alias("gid"),
        F.when(text("status") != "NORUN", value_column("duration", False, columns)).alias("duration"),
    )
    counted = lambda status: F.sum(F.when(F.col("status") == status, 1).otherwise(0))  # noqa: E731
    rows = (
        jobs.where(F.col("workflow").isNotNull() & F.col("job").isNotNull())
        .groupBy("workflow", "job", "period")
        .agg(
            (counted("SUCCESS") + counted("FAILURE")).alias("runs"),
            counted("FAILURE").alias("failures"),
            counted("NORUN").alias("noruns"),
            F.avg("duration").alias("mean"),
            F.percentile_approx("duration", 0.95, 1000).alias("p95"),
            F.slice(
                F.sort_array(
                    F.collect_list(F.when(F.col("duration").isNotNull(), F.struct("duration", "gid"))),
                    asc=False,
                ),
                1,
                slowest,
            ).alias("slowest"),
        )
        .orderBy("workflow", "job", "period")
        .collect()
    )
    return [
        JobPeriod(
            r.workflow,
            r.job,
            r.period,
            r.runs,
            r.failures,
            r.noruns,
            r.mean,
            r.p95,
            tuple((s.gid, s.duration) for s in r.slowest),
        )
        for r in rows
    ]


def _seconds(value: float | None) -> str:
    return "" if value is None else f"{value:.1f}"
