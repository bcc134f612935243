"""Schedules: the weekdays on which a job runs, and the words that name them in XML and JOBINFO.

A schedule is a frozenset of weekday numbers (0 = Monday, as ``date.weekday()``), so agents can test
a trigger's date with one membership check and two spellings of the same days compare equal.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["DAILY", "DAYS", "WORDS", "parse_schedule", "schedule_words"]

DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
DAILY = frozenset(range(7))
WORDS: dict[str, frozenset[int]] = {
    "daily": DAILY,
    "workdays": frozenset(range(5)),
    "weekends": frozenset({5, 6}),
    **{day: frozenset({number}) for number, day in enumerate(DAYS)},
}


def parse_schedule(text: str) -> frozenset[int]:
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


def schedule_words(days: Iterable[int]) -> list[str]:
    """The day words of a schedule, Monday first: the spelling JOBINFO carries."""
    return [DAYS[day] for day in sorted(days)]
