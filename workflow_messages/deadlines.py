"""Deadlines: when a job (or a whole generation) must have ended, and the alert its miss publishes.

A deadline is written as in the definition's ``deadline`` attribute:

* a duration (``90s``, ``30m``, ``2h``, ``1d``; :func:`broker.messages.qos.parse_duration`):
  that long after the generation started, i.e. after its APPL_START as the watching agent heard it;
* a time of day ``HH:MM`` (24-hour clock, in the watching agent's local timezone): the first such
  time at or after the generation started, so a nightly run started at 22:00 with ``deadline="06:00"``
  is due at 06:00 the next morning, and a backfill for last week is not missed the moment it starts.

A miss publishes an ALERT of the same shape and quality of service as a failed job's
(:mod:`workflow_messages.alerts`), ``status`` :data:`DEADLINE`, id ``W.J.G.deadline`` (a job that
misses its deadline and then fails has both alerts); the generation's own deadline is APPL_END's.
Pure: no clock, no I/O; times are epoch seconds passed in.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, datetime, timedelta, tzinfo

from broker.language import Filter, Publication, Value, Var
from broker.messages.qos import Qos, parse_duration
from workflow_messages._build import filter_of
from workflow_messages.alerts import ALERT, ALERT_PRIORITY, alert_id

__all__ = [
    "DEADLINE",
    "DEADLINE_RULE",
    "Deadline",
    "alert_quality",
    "deadline_alert",
    "deadline_filter",
    "parse_deadline",
]

DEADLINE = "DEADLINE"  # the status of a deadline's alert
DEADLINE_RULE = "deadline must be a duration (30m, 2h, 90s) or a time of day HH:MM"
MAX_DURATION = 366 * 86_400.0  # a year: a longer one is a typo

_TIME_OF_DAY = re.compile(r"([01][0-9]|2[0-3]):([0-5][0-9])")


@dataclass(frozen=True, slots=True)
class Deadline:
    """A parsed deadline: ``after`` seconds after the start, or the time of day ``at`` (hour, minute)."""

    text: str
    after: float | None = None
    at: tuple[int, int] | None = None

    def due(self, started: float, tz: tzinfo | None = None) -> float:
        """When a generation that started at ``started`` (epoch seconds) is due; ``tz`` the
        timezone of a time of day (None: the local one, daylight saving time included)."""
        if self.after is not None:
            return started + self.after
        assert self.at is not None
        hour, minute = self.at
        start = datetime.fromtimestamp(started, tz)
        day = start.date()
        for _ in range(3):  # today, else tomorrow (a day skipped by a DST gap: the day after)
            moment = _moment(day, hour, minute, tz)
            if moment >= started:
                return moment
            day += timedelta(days=1)
        return _moment(day, hour, minute, tz)  # pragma: no cover - unreachable

    def __str__(self) -> str:
        return self.text


def _moment(day: date, hour: int, minute: int, tz: tzinfo | None) -> float:
    if tz is None:  # local time: mktime resolves the offset of that very moment
        return time.mktime((day.year, day.month, day.day, hour, minute, 0, 0, 0, -1))
    return datetime(day.year, day.month, day.day, hour, minute, tzinfo=tz).timestamp()


def parse_deadline(text: str) -> Deadline:
    """The deadline ``text`` says; ValueError (:data:`DEADLINE_RULE`) if it is neither form."""
    if not isinstance(text, str):
        raise ValueError(f"{DEADLINE_RULE}, not {text!r}")
    match = _TIME_OF_DAY.fullmatch(text)
    if match is not None:
        return Deadline(text, at=(int(match[1]), int(match[2])))
    try:
        seconds = parse_duration(text)
    except ValueError:
        raise ValueError(f"{DEADLINE_RULE}, not {text!r}") from None
    if text.strip() != text or not 0 < seconds <= MAX_DURATION or not text[-1:].isalpha():
        raise ValueError(f"{DEADLINE_RULE} (more than nothing, at most a year, with its unit), not {text!r}")
    return Deadline(text, after=seconds)


def deadline_alert(
    workflow: str, job: str, gid: str, deadline: str, started: float, due: float, agent: str
) -> Publication:
    """The ALERT of ``job`` (APPL_END: the whole generation) missing its ``deadline`` in ``gid``;
    it goes with :func:`alert_quality`."""
    what = "the generation" if job == "APPL_END" else job
    detail = (
        f"deadline {deadline} missed: {what} had not ended by {_utc(due)}"
        f" (the generation started {_utc(started)})"
    )
    fields = {
        "applname": workflow,
        "jobname": job,
        "GID": gid,
        "status": DEADLINE,
        "detail": detail,
        "agentname": agent,
    }
    return Publication(ALERT, fields)


def deadline_filter(scope: Mapping[str, Value | Var]) -> Filter:
    """The deadlines' alerts of a monitor's ``scope`` (its workflow, its generation, or none)."""
    return filter_of(ALERT, {**scope, "status": DEADLINE}, present=() if "GID" in scope else ("GID",))


def alert_quality(publication: Publication) -> Qos | None:
    """The quality of service of a deadline's ALERT, that of a failure's alert with the id
    ``W.J.G.deadline``; None for another publication."""
    if publication.cls != ALERT or publication.get("status") != DEADLINE:
        return None
    workflow, job, gid = (str(publication.get(name)) for name in ("applname", "jobname", "GID"))
    mid = alert_id(workflow, job, f"{gid}.deadline")
    return Qos(priority=ALERT_PRIORITY, retain=True, ack="client", mid=mid, cancel="any")


def _utc(epoch: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(epoch))
