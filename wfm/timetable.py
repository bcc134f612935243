"""The trigger timetable of ``wfm schedule``: when cron fires for each workflow, and which of those
days its calendar (:class:`workflow_messages.Calendar`, weekdays and holidays) allows. Pure apart
from reading the config and holiday files; no broker, no scheduler, no clock (times are passed in),
so the timetable is tested without waiting for cron.

A config (TOML) has one table per workflow::

    [workflows.PAYROLL]
    cron = "0 6 * * *"              # standard 5-field crontab: minute hour day month weekday
                                    # (or 6 fields, seconds first: "*/5 * * * * *", every 5 s)
    calendar = "workdays"           # schedule words, as in the XML: daily (default), workdays, mon,fri ...
    holidays = "holidays-2026.txt"  # optional: one YYYY-MM-DD a line, '#' comments; relative to the config
    params = { REGION = "eu", BATCH = 500 }  # optional: run parameters every slot's Trigger carries

A parameter's value may be a TOML string, integer, float, boolean or date; it goes out as text (a
boolean ``true``/``false``, a date ``YYYY-MM-DD``) and the workflow's agents check it against its
declarations, filling in the defaults of those not given. Schedulers that run side by side must
share the config: the first Trigger of a slot to reach the coordinator starts it.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime, time, tzinfo
from pathlib import Path

from apscheduler.triggers.cron import CronTrigger

from wfm.triggers import check_workflow, parse_date
from workflow_messages import Calendar, parse_weekdays
from workflow_messages.params import MAX_PARAMS, check_param_name, parse_value

__all__ = ["Entry", "fires", "load_config", "parse_config", "parse_cron", "parse_holidays"]

_KEYS = {"cron", "calendar", "holidays", "params"}


@dataclass(frozen=True)
class Entry:
    """One workflow of the config: when cron fires and the calendar allows that day, trigger it."""

    workflow: str
    cron: CronTrigger
    calendar: Calendar
    params: Mapping[str, str] = field(default_factory=dict)  # the run parameters its Triggers carry


def parse_holidays(text: str, source: str) -> frozenset[date]:
    """One ``YYYY-MM-DD`` a line; blank lines and ``#`` comments are ignored. ValueError names
    ``source:line``."""
    days: set[date] = set()
    for number, line in enumerate(text.splitlines(), 1):
        word = line.split("#", 1)[0].strip()
        if word:
            try:
                days.add(parse_date(word))
            except ValueError as error:
                raise ValueError(f"{source}:{number}: {error}") from None
    return frozenset(days)


def load_config(path: Path, timezone: tzinfo) -> list[Entry]:
    """The entries of a TOML config file; ValueError (one line naming the file) for any problem."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise ValueError(f"cannot read {path}: {error.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{path}: {error}") from None

    def holidays(name: str) -> frozenset[date]:
        file = path.parent / name
        try:
            return parse_holidays(file.read_text(encoding="utf-8"), str(file))
        except (OSError, UnicodeDecodeError) as error:
            raise ValueError(
                f"cannot read holiday file {file}: {getattr(error, 'strerror', error)}"
            ) from None

    try:
        return parse_config(data, timezone, holidays)
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None


def parse_config(
    data: Mapping[str, object], timezone: tzinfo, read_holidays: Callable[[str], frozenset[date]]
) -> list[Entry]:
    """Entries from parsed TOML; ``read_holidays`` turns a ``holidays`` value into dates."""
    if set(data) != {"workflows"} or not isinstance(data["workflows"], dict) or not data["workflows"]:
        raise ValueError("expected [workflows.NAME] tables and nothing else")
    entries = []
    for workflow, table in data["workflows"].items():
        try:
            entries.append(_entry(check_workflow(workflow), table, timezone, read_holidays))
        except ValueError as error:
            raise ValueError(f"workflows.{workflow}: {error}") from None
    return entries


def _entry(
    workflow: str, table: object, timezone: tzinfo, read_holidays: Callable[[str], frozenset[date]]
) -> Entry:
    if not isinstance(table, dict):
        raise ValueError("must be a table with cron, calendar and holidays")
    if unknown := sorted(set(table) - _KEYS):
        raise ValueError(f"unknown key {unknown[0]!r} (use {', '.join(sorted(_KEYS))})")
    values = {key: table.get(key, default) for key, default in (("cron", None), ("calendar", "daily"))}
    if not isinstance(values["cron"], str):
        raise ValueError("cron must be a crontab expression such as '0 6 * * mon-fri'")
    if not isinstance(values["calendar"], str):
        raise ValueError("calendar must be a string such as 'workdays'")
    try:
        cron = parse_cron(values["cron"], timezone)
    except ValueError as error:
        raise ValueError(f"cron {values['cron']!r}: {error}") from None
    holidays = table.get("holidays")
    if holidays is not None and not isinstance(holidays, str):
        raise ValueError("holidays must be the name of a file")
    days = read_holidays(holidays) if holidays else frozenset()
    params = _params(table.get("params", {}))
    return Entry(workflow, cron, Calendar(parse_weekdays(values["calendar"]), days), params)


def _params(table: object) -> dict[str, str]:
    """The ``params`` table as the text a Trigger carries; ValueError naming the parameter."""
    if not isinstance(table, dict):
        raise ValueError("params must be a table such as { REGION = 'eu', BATCH = 500 }")
    if len(table) > MAX_PARAMS:
        raise ValueError(f"params: {len(table)} parameters, more than {MAX_PARAMS}")
    values = {}
    for key, value in table.items():
        name = check_param_name(key)
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, int | float | str) or (
            isinstance(value, date) and not isinstance(value, datetime)
        ):
            text = value.isoformat() if isinstance(value, date) else str(value)
        else:
            kind = "a time" if isinstance(value, datetime | time) else type(value).__name__
            raise ValueError(f"params.{name}: {kind} is not a value (text, number, boolean or date)")
        try:
            values[name] = parse_value("string", text)  # its length, no NUL: as every value's
        except ValueError as error:
            raise ValueError(f"params.{name}: {error}") from None
    return values


def parse_cron(text: str, timezone: tzinfo) -> CronTrigger:
    """A 5-field crontab (minute hour day month weekday), or 6 fields with seconds first
    (``*/2 * * * * *``: every 2 seconds; tests and demos of leaderless schedulers use it).
    ValueError for anything else."""
    fields = text.split()
    if len(fields) == 6:
        names = ("second", "minute", "hour", "day", "month", "day_of_week")
        return CronTrigger(**dict(zip(names, fields, strict=True)), timezone=timezone)
    return CronTrigger.from_crontab(text, timezone=timezone)


def fires(entries: Iterable[Entry], start: datetime, end: datetime) -> list[tuple[datetime, str, date]]:
    """``(fire time, workflow, trigger date)`` for every cron fire in ``[start, end)`` whose day the
    workflow's calendar allows, in time order."""
    found = []
    for entry in entries:
        previous = None
        while (at := entry.cron.get_next_fire_time(previous, previous or start)) is not None and at < end:
            if entry.calendar.allows(at.date()):
                found.append((at, entry.workflow, at.date()))
            previous = at
    return sorted(found, key=lambda fire: (fire[0], fire[1]))
