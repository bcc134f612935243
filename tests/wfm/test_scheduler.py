"""A scheduled fire that the broker cannot take is tried again with the same gid, not lost."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from apscheduler.triggers.cron import CronTrigger

from broker.client import NoAnswer
from wfm.scheduler import RETRY_EVERY, fire
from wfm.timetable import Entry
from workflow_messages import Calendar

NOW = datetime(2026, 11, 23, 9, 0, tzinfo=UTC)  # a Monday
ENTRY = Entry("PAYROLL", CronTrigger.from_crontab("0 9 * * *", timezone=UTC), Calendar())


class FlakyPublisher:
    """Refuses the first ``failures`` publications the way a broker that is away does."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.tried: list[str] = []

    def publish(
        self, workflow: str, gid: str, day: object, signed_at: float | None = None, params: object = None
    ) -> None:
        self.params = params
        self.tried.append(gid)
        if len(self.tried) <= self.failures:
            raise NoAnswer("B1 did not answer Publish 1 within 10 s")


def test_a_fire_is_tried_again_with_the_same_gid_until_the_broker_takes_it() -> None:
    publisher, waits = FlakyPublisher(failures=2), []
    gid = fire(ENTRY, publisher, NOW, lambda seconds: waits.append(seconds) or False)  # type: ignore[arg-type]
    assert gid is not None and publisher.tried == [gid, gid, gid]
    assert waits == [RETRY_EVERY, RETRY_EVERY]


def test_a_fire_is_reported_after_its_retry_time() -> None:
    publisher = FlakyPublisher(failures=100)
    with pytest.raises(NoAnswer):
        fire(ENTRY, publisher, NOW, lambda seconds: False, retry_for=2 * RETRY_EVERY)  # type: ignore[arg-type]
    assert len(publisher.tried) == 3 and len(set(publisher.tried)) == 1


def test_a_stop_ends_the_tries_at_once() -> None:
    publisher = FlakyPublisher(failures=100)
    with pytest.raises(NoAnswer):
        fire(ENTRY, publisher, NOW, lambda seconds: True)  # type: ignore[arg-type]
    assert len(publisher.tried) == 1


def test_a_fire_carries_the_entry_s_run_parameters() -> None:
    entry = Entry(ENTRY.workflow, ENTRY.cron, ENTRY.calendar, {"REGION": "eu"})
    publisher = FlakyPublisher(failures=0)
    assert fire(entry, publisher, NOW, lambda seconds: False) is not None  # type: ignore[arg-type]
    assert publisher.params == {"REGION": "eu"}
