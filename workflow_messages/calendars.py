"""Calendars: on which dates a job runs (its ``schedule`` attribute) or a workflow is triggered.

A job's calendar is a set of weekdays, written in XML and JOBINFO as day words (``workdays``,
``mon,fri``); ``wfm schedule``'s timetable adds holidays to it. Both are the same pure function of a
date, :meth:`Calendar.allows`, so an agent and the trigger timetable decide a day the same way. The
weekdays are a frozenset of weekday numbers (0 = Monday, as ``date.weekday()``): one membership
check per date, and two spellings of the same days compare equal.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date

__all__ = ["DAILY", "DAYS", "WORDS", "Calendar", "parse_weekdays", "weekday_words"]

DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
DAILY = frozenset(range(7))
WORDS: dict[str, frozenset[int]] = {
    "daily": DAILY,
    "workdays": frozenset(range(5)),
    "weekends": frozenset({5, 6}),
    **{day: frozenset({number}) for number, day in enumerate(DAYS)},
}


@dataclass(frozen=True)
class Calendar:
    """The days something happens on: its weekdays, except its holidays."""

    weekdays: frozenset[int] = DAILY
    holidays: frozenset[date] = frozenset()

    def allows(self, day: date) -> bool:
        return day.weekday() in self.weekdays and day not in self.holidays


def parse_weekdays(text: str) -> frozenset[int]:
    """``"daily"``, ``"workdays"``, ``"weekends"`` or a comma list such as ``"mon,fri"``.

    Items may be mixed (``"weekends,fri"``); ValueError names the first unknown word and lists the
    valid ones."""
    days: set[int] = set()
    for word in text.split(","):
        word = word.strip()
        if word not in WORDS:
            raise ValueError(
                f"unknown schedule word {word!r} (use daily, workdays, weekends or a comma list of "
                f"{' '.join(DAYS)})"
            )
        days |= WORDS[word]
    return frozenset(days)


def weekday_words(days: Iterable[int]) -> list[str]:
    """The day words of a set of weekdays, Monday first: the spelling JOBINFO carries."""
    return [DAYS[day] for day in sorted(days)]
