"""Calendars in the definition: ``<calendar name days>`` with ``<holiday date>`` children, declared
after the ``<param>`` elements and before the jobs, and a job's ``calendar="NAME"``
(docs/workflows.md, "Calendars in the definition"). The model is
:class:`workflow_messages.named_calendars.NamedCalendar`, i.e. the schedule file's
:class:`workflow_messages.Calendar` (weekdays except holidays) with a name.

:func:`read` converts one XML element (reporting text that cannot be converted, as the loader does
for a job's timeout); :func:`problems` are the rules every Workflow is checked with, however it was
made; :func:`of` is the calendar a job references, for the translator.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lxml import etree

from wfm.workflow.errors import Problem, declared, first_on
from workflow_messages import DAILY, Calendar, parse_weekdays
from workflow_messages.named_calendars import MAX_HOLIDAYS, NamedCalendar, parse_holiday

if TYPE_CHECKING:
    from wfm.workflow.model import Job, Workflow

__all__ = ["lines", "listing", "of", "problems", "read", "weekdays_of"]


def weekdays_of(
    element: etree._Element, attribute: str, label: str, found: list[Problem], word: str = "schedule word"
) -> frozenset[int]:
    """The weekdays ``attribute`` of ``element`` names (every day without it); one it cannot read
    is reported at the element's line, calling its words ``word``, and every day taken instead."""
    text = element.get(attribute)
    if text is None:
        return DAILY
    try:
        return parse_weekdays(text)
    except ValueError as error:
        found.append(Problem(element.sourceline, f"{label}: {str(error).replace('schedule word', word)}"))
        return DAILY


def read(element: etree._Element, found: list[Problem], folder: Path | None = None) -> NamedCalendar:
    """One ``<calendar>`` (every day by default); a bad ``days`` or holiday is reported at its line
    and left out, so that the rest is still checked. A holiday given twice is reported too.
    ``holidays="FILE"`` adds the dates of a holiday file in the format of ``wfm schedule``'s
    (:func:`wfm.timetable.parse_holidays`), relative to ``folder`` (the workflow file's; None:
    the current directory)."""
    name, line = element.get("name"), element.sourceline
    label = f"calendar {name!r}"
    weekdays = weekdays_of(element, "days", label, found, "day word")
    holidays: dict[date, int | None] = {}
    for holiday in element.iterchildren("holiday"):
        try:
            day = parse_holiday(holiday.get("date", ""))
        except ValueError as error:
            found.append(Problem(holiday.sourceline, f"{label}: {error}"))
            continue
        if day in holidays:
            found.append(
                Problem(holiday.sourceline, f"{label}: holiday {day} twice{first_on(holidays[day])}")
            )
        holidays.setdefault(day, holiday.sourceline)
    file = element.get("holidays")
    if file is not None:
        try:
            days = _holiday_file((folder or Path()) / file)
        except ValueError as error:
            found.append(Problem(line, f"{label}: {error}"))
        else:
            holidays.update({day: None for day in days if day not in holidays})
    return NamedCalendar(name, Calendar(weekdays, frozenset(holidays)), line)


def _holiday_file(path: Path) -> frozenset[date]:
    """The dates of a holiday file; ValueError (one line) naming the file, and the line of a bad date."""
    from wfm.timetable import parse_holidays  # only for a calendar that names a file: APScheduler

    try:
        return parse_holidays(path.read_text(encoding="utf-8"), str(path))
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"cannot read holiday file {path}: {getattr(error, 'strerror', error)}") from None


def problems(workflow: Workflow) -> Iterator[Problem]:
    """Names that are names, declared once, weekdays that are some, not too many holidays, and
    every job's ``calendar`` declared."""
    yield from declared(((named.name, named.line) for named in workflow.calendars), "calendar")
    names = {named.name for named in workflow.calendars}
    for named in workflow.calendars:
        label = f"calendar {named.name!r}"
        if not named.calendar.weekdays or not named.calendar.weekdays <= DAILY:
            yield Problem(named.line, f"{label}: its days are a non-empty set of weekdays 0 (Monday) to 6")
        if len(named.calendar.holidays) > MAX_HOLIDAYS:
            yield Problem(named.line, f"{label}: more than {MAX_HOLIDAYS} holidays")
    for job in workflow.jobs:
        if job.calendar is not None and job.calendar not in names:
            known = f"declared: {', '.join(sorted(names))}" if names else "none is declared"
            yield Problem(job.line, f"job {job.name!r}: unknown calendar {job.calendar!r} ({known})")


def of(workflow: Workflow, job: Job) -> NamedCalendar | None:
    """The calendar ``job`` references (None: it has none)."""
    if job.calendar is None:
        return None
    return next(named for named in workflow.calendars if named.name == job.calendar)


def listing(workflow: Workflow) -> dict[str, dict[str, Any]]:
    """Each declared calendar, in document order: its days, holidays and the jobs that reference
    it (``wfm validate -o json``)."""
    return {
        named.name: {
            **named.record(),
            "jobs": [job.name for job in workflow.jobs if job.calendar == named.name],
        }
        for named in workflow.calendars
    }


def lines(workflow: Workflow) -> list[str]:
    """``calendar FR (mon,tue,wed,thu,fri; 2 holidays): JobA, JobC``, one a calendar (``wfm validate``)."""
    found = []
    for name, entry in listing(workflow).items():
        count = len(entry["holidays"])
        holidays = f"; {count} holiday{'s' if count != 1 else ''}" if count else ""
        jobs = ", ".join(entry["jobs"]) or "no job"
        found.append(f"calendar {name} ({','.join(entry['days'])}{holidays}): {jobs}")
    return found
