"""``wfm schedule``'s loop: one thread per :class:`Entry` waits for each cron fire (a *slot*) and
triggers the generation of the slot's date if the entry's calendar allows that date.

Leaderless: a slot's generation is named by the slot (:func:`wfm.slots.slot_gid`) and its Trigger
signed at the slot's time, so two or three schedulers with the same config, on different hosts,
publish the same Trigger for each slot and the workflow's coordinator starts it once. No lock, no
database, no election: a scheduler that dies (even kill -9) leaves nothing half done, and one that
comes back may catch up the slots it missed (:func:`wfm.slots.missed`), which its peers have
usually fired already: those Triggers are duplicates the coordinator ignores.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta

from wfm.slots import missed, slot_gid
from wfm.timetable import Entry
from wfm.triggers import TriggerPublisher

__all__ = ["GRACE", "NEVER_STOPPED", "RETRY_EVERY", "RETRY_FOR", "fire", "next_slot", "run_schedule"]

log = logging.getLogger(__name__)


RETRY_EVERY = 5.0  # seconds between tries of a fire the broker did not take
RETRY_FOR = 300.0  # seconds a fire is tried for, before it is reported lost
GRACE = 60.0  # seconds late a slot is still fired (one that a slow fire before it delayed)
NEVER_STOPPED = threading.Event()  # a wait that sleeps its whole time

Job = Callable[[Entry, datetime], None]


def fire(
    entry: Entry,
    publisher: TriggerPublisher,
    slot: datetime,
    wait: Callable[[float], bool] = NEVER_STOPPED.wait,
    retry_for: float = RETRY_FOR,
) -> str | None:
    """Trigger the generation of ``slot`` (a cron fire time, with its time zone) for the slot's
    date and return its gid, or None if the calendar does not allow that date. The gid is the
    slot's (:func:`slot_gid`) and the Trigger is signed at the slot's time, whoever fires it and
    whenever. A broker that cannot take it is tried again, with the same gid, every RETRY_EVERY
    seconds for ``retry_for`` seconds: a broker restart must not cost a scheduled generation.
    Then the last ConnectError, OSError or TimeoutError; ``wait(seconds)`` returning true (a
    stop) ends the tries at once."""
    if not entry.calendar.allows(slot.date()):
        return None
    gid = slot_gid(entry.workflow, slot)

    def send() -> None:
        publisher.publish(entry.workflow, gid, slot.date(), signed_at=slot.timestamp(), params=entry.params)

    for _ in range(int(retry_for // RETRY_EVERY)):  # the tries that are followed by a wait
        try:
            send()
            return gid
        except (ConnectionError, OSError, TimeoutError) as error:
            log.warning(
                "cannot trigger %s %s yet (%s); again in %g s", entry.workflow, gid, error, RETRY_EVERY
            )
            if wait(RETRY_EVERY):
                raise
    send()  # the last try: its error is the caller's
    return gid


def next_slot(entry: Entry, previous: datetime | None, now: datetime) -> datetime | None:
    """The slot to fire after ``previous`` (None: the first from ``now`` on): the next cron fire,
    unless it is more than GRACE seconds late (a fire before it took that long), then the first
    not that late. None when cron never fires again."""
    at = entry.cron.get_next_fire_time(previous, now)
    if at is not None and previous is not None and at < now - timedelta(seconds=GRACE):
        skipped_from = at
        at = entry.cron.get_next_fire_time(None, now - timedelta(seconds=GRACE))
        log.warning("%s: slots from %s on were missed (a fire ran late)", entry.workflow, skipped_from)
    return at


def run_schedule(
    entries: Sequence[Entry],
    job: Job,
    stop: threading.Event,
    catch_up: float | None = None,
    last: Mapping[str, datetime] | None = None,
) -> None:
    """Call ``job(entry, slot)`` at each cron fire of every entry until ``stop`` is set, one thread
    per entry. With ``catch_up`` (seconds), first the slots missed since ``last[workflow]`` (the
    last slot fired before; none if unknown), at most ``catch_up`` seconds back."""
    threads = [
        threading.Thread(
            target=_follow,
            args=(entry, job, stop, catch_up, (last or {}).get(entry.workflow)),
            name=f"schedule-{entry.workflow}",
            daemon=True,
        )
        for entry in entries
    ]
    for thread in threads:
        thread.start()
    try:
        stop.wait()
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=1.0)


def _follow(
    entry: Entry, job: Job, stop: threading.Event, catch_up: float | None, last: datetime | None
) -> None:
    timezone = entry.cron.timezone
    now = datetime.now(timezone)
    if catch_up is not None:
        for late in missed(entry, last, now, catch_up):
            if stop.is_set():
                return
            job(entry, late)
    previous: datetime | None = None
    while not stop.is_set():  # the first slot is the first from ``now``: after the caught-up ones
        upcoming = next_slot(entry, previous, datetime.now(timezone) if previous else now)
        if upcoming is None:
            return
        slot = upcoming
        while (left := (slot - datetime.now(timezone)).total_seconds()) > 0:
            if stop.wait(left):
                return
        job(entry, slot)
        previous = slot
