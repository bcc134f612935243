"""Deadlines: what the attribute accepts, when a deadline is due, and the alert of a miss."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from workflow_messages.alerts import ALERT
from workflow_messages.deadlines import DEADLINE, alert_quality, deadline_alert, parse_deadline

PARIS = timezone(timedelta(hours=1))


def epoch(*args: int, tz: timezone = UTC) -> float:
    return datetime(*args, tzinfo=tz).timestamp()  # type: ignore[misc]


@pytest.mark.parametrize(
    ("text", "seconds"), [("90s", 90.0), ("30m", 1800.0), ("2h", 7200.0), ("1d", 86400.0), ("1.5h", 5400.0)]
)
def test_a_duration_is_due_that_long_after_the_start(text: str, seconds: float) -> None:
    assert parse_deadline(text).due(1000.0) == 1000.0 + seconds


def test_a_duration_runs_over_midnight() -> None:
    started = epoch(2026, 11, 23, 23, 30)
    assert parse_deadline("2h").due(started, UTC) == epoch(2026, 11, 24, 1, 30)


def test_a_time_of_day_is_the_first_one_at_or_after_the_start() -> None:
    morning = epoch(2026, 11, 23, 5, 0, tz=PARIS)
    assert parse_deadline("06:00").due(morning, PARIS) == epoch(2026, 11, 23, 6, 0, tz=PARIS)
    exactly = epoch(2026, 11, 23, 6, 0, tz=PARIS)
    assert parse_deadline("06:00").due(exactly, PARIS) == exactly


def test_a_time_of_day_already_past_rolls_over_to_the_next_day() -> None:
    """A nightly run started at 22:00 with deadline 06:00 is due the next morning, across a month."""
    night = epoch(2026, 11, 30, 22, 0, tz=PARIS)
    assert parse_deadline("06:00").due(night, PARIS) == epoch(2026, 12, 1, 6, 0, tz=PARIS)
    new_year = epoch(2026, 12, 31, 23, 59, tz=PARIS)
    assert parse_deadline("00:00").due(new_year, PARIS) == epoch(2027, 1, 1, 0, 0, tz=PARIS)


def test_a_time_of_day_without_a_timezone_is_the_local_one() -> None:
    started = datetime(2026, 11, 23, 5, 0).timestamp()  # naive: local time
    assert parse_deadline("06:30").due(started) == datetime(2026, 11, 23, 6, 30).timestamp()


@pytest.mark.parametrize(
    "text", ["", "soon", "30", "0s", "-5m", "24:00", "6:00", "12:60", " 30m", "400d", "5x"]
)
def test_anything_else_is_refused_saying_what_is_accepted(text: str) -> None:
    with pytest.raises(
        ValueError, match=r"deadline must be a duration \(30m, 2h, 90s\) or a time of day HH:MM"
    ):
        parse_deadline(text)


def test_a_miss_is_an_alert_of_its_own_id_beside_the_failure_s() -> None:
    alert = deadline_alert("PAYROLL", "JobB", "g1", "30m", 0.0, 1800.0, "agentB")
    assert alert.cls == ALERT and (alert["jobname"], alert["status"], alert["agentname"]) == (
        "JobB",
        DEADLINE,
        "agentB",
    )
    assert alert["detail"] == (
        "deadline 30m missed: JobB had not ended by 1970-01-01 00:30:00 UTC"
        " (the generation started 1970-01-01 00:00:00 UTC)"
    )
    qos = alert_quality(alert)
    assert qos is not None
    assert (qos.mid, qos.priority, qos.retain, qos.ack, qos.cancel) == (
        "PAYROLL.JobB.g1.deadline",
        8,
        True,
        "client",
        "any",
    )
    generation = deadline_alert("PAYROLL", "APPL_END", "g1", "06:00", 0.0, 1.0, "agentA")
    assert "the generation had not ended" in str(generation["detail"])
