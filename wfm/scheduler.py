"""``wfm schedule``'s loop: APScheduler calls back at each cron fire of a :class:`Entry`, and a fire
triggers the generation of its date if the entry's calendar allows that date."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from datetime import datetime, tzinfo

from apscheduler.schedulers.background import BackgroundScheduler

from wfm.timetable import Entry
from wfm.triggers import TriggerPublisher, new_gid

__all__ = ["fire", "run_schedule"]


def fire(entry: Entry, publisher: TriggerPublisher, now: datetime) -> str | None:
    """Trigger the generation of ``now``'s date and return its gid, or None if the calendar does
    not allow that date. ConnectError, OSError or TimeoutError if the broker cannot take it."""
    if not entry.calendar.allows(now.date()):
        return None
    gid = new_gid(now)
    publisher.publish(entry.workflow, gid, now.date())
    return gid


def run_schedule(
    entries: Sequence[Entry], timezone: tzinfo, job: Callable[[Entry], None], stop: threading.Event
) -> None:
    """Call ``job(entry)`` at each cron fire of every entry until ``stop`` is set; a fire missed
    while a job ran late is made up once, up to a minute late."""
    scheduler = BackgroundScheduler(timezone=timezone)
    for entry in entries:
        scheduler.add_job(job, entry.cron, args=(entry,), coalesce=True, misfire_grace_time=60)
    scheduler.start()
    try:
        stop.wait()
    finally:
        scheduler.shutdown(wait=False)
