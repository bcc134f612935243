"""Calendars declared in a workflow definition and referenced by its jobs (``<calendar>``,
``calendar="NAME"``): on a date its calendar does not allow, a job does not run in that generation
and publishes NORUN, saying which calendar excluded the date.

A named calendar is the model of :mod:`workflow_messages.calendars` (weekdays except holidays, the
same :meth:`Calendar.allows` that ``wfm schedule``'s timetable uses) with a name. It travels to the
job's agent inside the job's DEPLOY entry, whole (:func:`record`: name, day words, holidays), so an
agent needs nothing but the entry to decide; an entry without one (older deployers, jobs without a
calendar) has none. Pure: no I/O, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date
from typing import Any

from workflow_messages.calendars import DAYS, Calendar, parse_weekdays, weekday_words

__all__ = ["MAX_HOLIDAYS", "NamedCalendar", "excluded", "parse_holiday", "read_record"]

MAX_HOLIDAYS = 1000  # per calendar: a few years of public holidays, well within a DEPLOY entry


@dataclass(frozen=True, slots=True)
class NamedCalendar:
    """``<calendar name days>`` with its ``<holiday date>`` children; ``line`` (of the file) takes
    no part in equality."""

    name: str
    calendar: Calendar = field(default_factory=Calendar)
    line: int | None = field(default=None, compare=False)

    def record(self) -> dict[str, Any]:
        """As JSON-ready data: in the job's DEPLOY entry and the workflow's version."""
        return {
            "name": self.name,
            "days": weekday_words(self.calendar.weekdays),
            "holidays": sorted(day.isoformat() for day in self.calendar.holidays),
        }


def parse_holiday(text: str) -> date:
    """A holiday, ``YYYY-MM-DD`` exactly; ValueError (one line) otherwise."""
    try:
        if len(text) != 10:
            raise ValueError
        return date.fromisoformat(text)
    except ValueError:
        raise ValueError(f"holiday {text!r} is not a date YYYY-MM-DD") from None


def read_record(data: object) -> NamedCalendar:
    """The calendar of a DEPLOY entry, checked; ValueError (one line) if it is not one."""
    if not isinstance(data, dict) or set(data) != {"name", "days", "holidays"}:
        raise ValueError("JOBINFO calendar must be {name, days, holidays}")
    name, days, holidays = data["name"], data["days"], data["holidays"]
    if not isinstance(name, str) or not name:
        raise ValueError("JOBINFO calendar name must be a non-empty string")
    if not isinstance(days, list) or not days or not all(isinstance(d, str) and d in DAYS for d in days):
        raise ValueError("JOBINFO calendar days must be a non-empty list of day words")
    if not isinstance(holidays, list) or len(holidays) > MAX_HOLIDAYS:
        raise ValueError(f"JOBINFO calendar holidays must be a list of at most {MAX_HOLIDAYS} dates")
    if not all(isinstance(day, str) for day in holidays):
        raise ValueError("JOBINFO calendar holidays must be dates YYYY-MM-DD")
    calendar = Calendar(parse_weekdays(",".join(days)), frozenset(parse_holiday(d) for d in holidays))
    return NamedCalendar(name, calendar)


def excluded(named: NamedCalendar, day: date) -> str | None:
    """Why ``named`` does not allow ``day`` (the NORUN detail), or None if it does."""
    if day in named.calendar.holidays:
        return f"not in calendar {named.name}: {day} is a holiday"
    if day.weekday() not in named.calendar.weekdays:
        days = ",".join(weekday_words(named.calendar.weekdays))
        return f"not in calendar {named.name} ({days}): {day.strftime('%A')} {day}"
    return None
