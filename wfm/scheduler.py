"""``wfm schedule``'s loop: APScheduler calls back at each cron fire of a :class:`Entry`, and a fire
triggers the generation of its date if the entry's calendar allows that date."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from datetime import datetime, tzinfo

from apscheduler.schedulers.background import BackgroundScheduler

from wfm.timetable import Entry
from wfm.triggers import TriggerPublisher, new_gid

__all__ = ["NEVER_STOPPED", "RETRY_EVERY", "RETRY_FOR", "fire", "run_schedule"]

log = logging.getLogger(__name__)


RETRY_EVERY = 5.0  # seconds between tries of a fire the broker did not take
RETRY_FOR = 300.0  # seconds a fire is tried for, before it is reported lost
NEVER_STOPPED = threading.Event()  # a wait that sleeps its whole time


def fire(
    entry: Entry,
    publisher: TriggerPublisher,
    now: datetime,
    wait: Callable[[float], bool] = NEVER_STOPPED.wait,
    retry_for: float = RETRY_FOR,
) -> str | None:
    """Trigger the generation of ``now``'s date and return its gid, or None if the calendar does
    not allow that date. A broker that cannot take it is tried again with the same gid (agents
    run a generation once however often its Trigger comes) every RETRY_EVERY seconds for
    ``retry_for`` seconds: a broker restart must not cost a scheduled generation. Then the last
    ConnectError, OSError or TimeoutError; ``wait(seconds)`` returning true (a stop) ends the
    tries at once."""
    if not entry.calendar.allows(now.date()):
        return None
    gid = new_gid(now)
    for _ in range(int(retry_for // RETRY_EVERY)):  # the tries that are followed by a wait
        try:
            publisher.publish(entry.workflow, gid, now.date())
            return gid
        except (ConnectionError, OSError, TimeoutError) as error:
            log.warning(
                "cannot trigger %s %s yet (%s); again in %g s", entry.workflow, gid, error, RETRY_EVERY
            )
            if wait(RETRY_EVERY):
                raise
    publisher.publish(entry.workflow, gid, now.date())  # the last: its error is the caller's
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
