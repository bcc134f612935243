"""Leaderless schedule slots: a slot's gid is a pure function of the slot; catch-up fires the
slots missed since the last one fired, within its window; the state file survives a kill."""

from __future__ import annotations

import threading
from datetime import UTC, date, datetime, timedelta, timezone
from pathlib import Path

import pytest
from apscheduler.triggers.cron import CronTrigger

from wfm.scheduler import fire, next_slot, run_schedule
from wfm.slots import MAX_CATCH_UP, SlotState, backfill_gid, missed, parse_catch_up, slot_gid
from wfm.timetable import Entry, parse_cron
from workflow_messages import Calendar, parse_weekdays
from workflow_messages.signature import check_publication

MONDAY_9 = datetime(2026, 11, 23, 9, 0, tzinfo=UTC)
HOURLY = Entry("PAYROLL", CronTrigger.from_crontab("0 * * * *", timezone=UTC), Calendar())


def test_a_slot_s_gid_is_the_same_for_every_scheduler_and_sorts_by_time() -> None:
    gid = slot_gid("PAYROLL", MONDAY_9)
    assert gid.startswith("20261123-090000-") and len(gid) == len("20261123-090000-3f9a")
    assert slot_gid("PAYROLL", MONDAY_9) == gid  # another process, another host: the same
    paris = MONDAY_9.astimezone(timezone(timedelta(hours=1)))
    assert slot_gid("PAYROLL", paris) == gid  # the same instant in another time zone
    assert slot_gid("LEDGER", MONDAY_9) != gid
    assert slot_gid("PAYROLL", MONDAY_9 + timedelta(hours=1)) > gid
    with pytest.raises(ValueError, match="time zone"):
        slot_gid("PAYROLL", MONDAY_9.replace(tzinfo=None))


def test_a_backfill_gid_names_the_date() -> None:
    assert backfill_gid(date(2026, 11, 1)) == "20261101-backfill"
    assert backfill_gid(date(2026, 11, 1), "again") == "20261101-again"
    with pytest.raises(ValueError):
        backfill_gid(date(2026, 11, 1), "no spaces")


def test_catch_up_fires_the_slots_after_the_last_one_fired_within_the_window() -> None:
    now = MONDAY_9 + timedelta(minutes=30)
    last = MONDAY_9 - timedelta(hours=3)
    assert missed(HOURLY, last, now, 86400) == [MONDAY_9 - timedelta(hours=h) for h in (2, 1, 0)]
    assert missed(HOURLY, last, now, 5400) == [MONDAY_9 - timedelta(hours=1), MONDAY_9]  # 1.5 h back
    assert missed(HOURLY, None, now, 86400) == []  # never fired here: nothing to catch up
    assert missed(HOURLY, MONDAY_9, now, 86400) == []


def test_catch_up_keeps_to_the_calendar() -> None:
    workdays = Entry("PAYROLL", HOURLY.cron, Calendar(parse_weekdays("workdays")))
    friday_23 = datetime(2026, 11, 20, 23, 0, tzinfo=UTC)
    slots = missed(workdays, friday_23, MONDAY_9 + timedelta(minutes=1), MAX_CATCH_UP)
    assert [s.date() for s in slots] == [date(2026, 11, 23)] * 10  # Monday 00:00 to 09:00 only


def test_the_catch_up_window_is_bounded() -> None:
    assert parse_catch_up("6h") == 21600
    for bad in ("0s", "8d", "soon"):
        with pytest.raises(ValueError):
            parse_catch_up(bad)


def test_the_state_keeps_the_last_slot_and_a_bad_file_is_empty(tmp_path: Path) -> None:
    path = tmp_path / "s" / "schedule.json"
    state = SlotState(path)
    assert (state.last, state.problem) == ({}, None)
    state.fired("PAYROLL", MONDAY_9)
    state.fired("PAYROLL", MONDAY_9 - timedelta(hours=1))  # an older slot caught up late
    assert SlotState(path).last == {"PAYROLL": MONDAY_9}
    path.write_text("{not json")
    broken = SlotState(path)
    assert broken.last == {} and broken.problem is not None and str(path) in broken.problem


def test_cron_with_seconds() -> None:
    every_2s = parse_cron("*/2 * * * * *", UTC)
    start = datetime(2026, 11, 23, 9, 0, 1, tzinfo=UTC)
    assert every_2s.get_next_fire_time(None, start) == start + timedelta(seconds=1)
    with pytest.raises(ValueError):
        parse_cron("* * * *", UTC)


class Publisher:
    def __init__(self) -> None:
        self.published: list[tuple[str, str, date, float | None]] = []

    def publish(
        self, workflow: str, gid: str, day: date, signed_at: float | None = None, params: object = None
    ) -> None:
        assert params == {}  # HOURLY's config gives none
        self.published.append((workflow, gid, day, signed_at))


def test_a_slot_s_trigger_is_signed_at_the_slot_s_time() -> None:
    publisher = Publisher()
    gid = fire(HOURLY, publisher, MONDAY_9)  # type: ignore[arg-type]
    assert publisher.published == [("PAYROLL", gid, MONDAY_9.date(), MONDAY_9.timestamp())]


def test_the_publisher_signs_as_of_signed_at(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from wfm.signing import local_deployer
    from wfm.triggers import TriggerPublisher

    sent = []

    class Client:
        def advertise(self, _: object) -> None:
            pass

        def publish(self, publication: object, _: object) -> None:
            sent.append(publication)

        def stats(self) -> dict[str, int]:
            return {"outbox": 0}

        def close(self) -> None:
            pass

    publisher = TriggerPublisher("socket://127.0.0.1:1/B1", signer=local_deployer(tmp_path / "k"))
    monkeypatch.setattr(publisher, "_connect", Client)
    publisher.publish("PAYROLL", "g1", MONDAY_9.date(), signed_at=MONDAY_9.timestamp())
    assert check_publication(sent[0]).sequence == int(MONDAY_9.timestamp() * 1e6)


def test_a_slot_late_by_more_than_the_grace_is_skipped_for_the_next() -> None:
    late = MONDAY_9 + timedelta(seconds=30)
    assert next_slot(HOURLY, MONDAY_9 - timedelta(hours=1), late) == MONDAY_9  # 30 s late: fired
    assert next_slot(HOURLY, MONDAY_9 - timedelta(hours=3), late) == MONDAY_9  # 7:00 and 8:00 skipped
    now = MONDAY_9 + timedelta(minutes=30)
    assert next_slot(HOURLY, MONDAY_9 - timedelta(hours=3), now) == MONDAY_9 + timedelta(hours=1)
    assert next_slot(HOURLY, None, now) == MONDAY_9 + timedelta(hours=1)


def test_run_schedule_fires_each_slot_once_then_stops() -> None:
    entry = Entry("FAST", parse_cron("* * * * * *", UTC), Calendar())
    fired: list[datetime] = []
    stop = threading.Event()

    def job(_: Entry, slot: datetime) -> None:
        fired.append(slot)
        if len(fired) == 3:
            stop.set()

    last = datetime.now(UTC) - timedelta(seconds=2.5)
    run_schedule([entry], job, stop, catch_up=60, last={"FAST": last})
    assert len(fired) == 3 and len(set(fired)) == 3
    assert fired == sorted(fired) and all(s.microsecond == 0 for s in fired)
    assert fired[0] > last  # the caught-up slots come first


def test_agents_refuse_a_slot_older_than_they_remember_generations(tmp_path: Path) -> None:
    """A slot's Trigger fired again after its generation could have been forgotten (signed at the
    slot's time, more than --keep-days ago) is refused as stale, not started a second time."""
    from agents.forgetting import FORGET_AFTER
    from agents.trust import Refusal, Trust
    from wfm.signing import local_deployer
    from workflow_messages import trigger

    signer = local_deployer(tmp_path / "k")
    trust = Trust(trusted=signer.signer.key.public_key())
    slot = MONDAY_9

    def signed_at_slot() -> object:
        publication = trigger("PAYROLL", slot_gid("PAYROLL", slot), slot.date())
        return signer.signer.sign_publication(publication, int(slot.timestamp() * 1e6))

    in_memory = slot.timestamp() + FORGET_AFTER - 60
    assert trust.admit_trigger(signed_at_slot(), in_memory, FORGET_AFTER)  # type: ignore[arg-type]
    with pytest.raises(Refusal, match="stale"):
        trust.admit_trigger(signed_at_slot(), slot.timestamp() + FORGET_AFTER + 60, FORGET_AFTER)  # type: ignore[arg-type]
