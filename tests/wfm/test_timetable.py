"""Which dates produce triggers: calendars, holiday files, config errors, cron fires."""

from __future__ import annotations

from datetime import date, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from wfm.timetable import fires, load_config, parse_holidays

UTC = ZoneInfo("UTC")
MONDAY = date(2026, 11, 23)


def at(day: int, hour: int = 0) -> datetime:
    return datetime(2026, 11, day, hour, tzinfo=UTC)


def config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "schedule.toml"
    path.write_text(text)
    return path


def test_holiday_file_comments_and_errors() -> None:
    text = "# 2026\n2026-12-25  # Christmas\n\n2026-12-26\n"
    assert parse_holidays(text, "h.txt") == {date(2026, 12, 25), date(2026, 12, 26)}
    with pytest.raises(ValueError, match=r"h.txt:2: invalid date '2026-12-32'"):
        parse_holidays("2026-12-25\n2026-12-32\n", "h.txt")


def test_fires_follow_cron_and_calendar(tmp_path: Path) -> None:
    (tmp_path / "holidays.txt").write_text("2026-11-26\n")
    path = config(
        tmp_path,
        """
[workflows.PAYROLL]
cron = "0 6 * * *"
calendar = "workdays"
holidays = "holidays.txt"

[workflows.LEDGER]
cron = "30 18 * * fri"
""",
    )
    entries = load_config(path, UTC)
    found = [(t.isoformat(), w, d.isoformat()) for t, w, d in fires(entries, at(23, 7), at(30, 7))]
    assert found == [
        ("2026-11-24T06:00:00+00:00", "PAYROLL", "2026-11-24"),
        ("2026-11-25T06:00:00+00:00", "PAYROLL", "2026-11-25"),
        # Thursday 26th is a holiday; the weekend is not a workday
        ("2026-11-27T06:00:00+00:00", "PAYROLL", "2026-11-27"),
        ("2026-11-27T18:30:00+00:00", "LEDGER", "2026-11-27"),
        ("2026-11-30T06:00:00+00:00", "PAYROLL", "2026-11-30"),
    ]


def test_fires_in_an_empty_window() -> None:
    assert fires([], at(23), at(30)) == []


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[workflows.P]\ncron = '0 6 * *'\n", "workflows.P: cron '0 6 * *': Wrong number of fields"),
        ("[workflows.P]\ncron = '0 6 * * *'\ncalendar = 'someday'\n", "unknown schedule word 'someday'"),
        ("[workflows.P]\ncron = '0 6 * * *'\nwhen = 1\n", "unknown key 'when'"),
        ("[workflows.P]\ncalendar = 'daily'\n", "cron must be a crontab expression"),
        ("[workflows.P]\ncron = '0 6 * * *'\nholidays = 'missing.txt'\n", "cannot read holiday file"),
        ("[workflows.'2P']\ncron = '0 6 * * *'\n", "invalid workflow name '2P'"),
        ("[other]\n", "expected [workflows.NAME] tables"),
        ("[workflows.P]\ncron = '0 6 * * *'\nparams = 'x'\n", "workflows.P: params must be a table"),
        ("[workflows.P]\ncron = '0 6 * * *'\nparams = { 1A = 'x' }\n", "invalid parameter name '1A'"),
        ("[workflows.P]\ncron = '0 6 * * *'\nparams = { A = [1] }\n", "params.A: list is not a value"),
        ("[workflows.P]\ncron = '0 6 * * *'\nparams = { A = 07:30:00 }\n", "params.A: a time is not"),
        ("[workflows.P\n", "schedule.toml: "),
    ],
)
def test_config_errors_are_one_line(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ValueError, match=r"schedule\.toml") as caught:
        load_config(config(tmp_path, text), UTC)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_run_parameters_go_out_as_text(tmp_path: Path) -> None:
    """A TOML value of any scalar type becomes the text a Trigger carries; the agents check it
    against the workflow's declarations (types, defaults), as they do ``wfm trigger --param``'s."""
    text = """
[workflows.P]
cron = "0 6 * * *"
params = { REGION = "eu", BATCH = 500, RATE = 0.5, DRY = false, DAY = 2026-12-01 }
[workflows.Q]
cron = "0 7 * * *"
"""
    p, q = load_config(config(tmp_path, text), UTC)
    assert p.params == {"REGION": "eu", "BATCH": "500", "RATE": "0.5", "DRY": "false", "DAY": "2026-12-01"}
    assert q.params == {}
