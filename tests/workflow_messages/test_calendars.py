"""Calendars: the day words of a job's ``schedule`` attribute, and the days a calendar allows."""

from __future__ import annotations

from datetime import date

import pytest

from workflow_messages import WORDS, Calendar, parse_weekdays


def test_calendars_allow_days() -> None:
    week = [date(2026, 11, 23 + i) for i in range(7)]  # Monday .. Sunday
    assert all(Calendar().allows(day) for day in week)
    workdays = Calendar(WORDS["workdays"], frozenset({date(2026, 11, 26)}))
    assert [workdays.allows(day) for day in week] == [True, True, True, False, True, False, False]


@pytest.mark.parametrize(
    ("text", "days"),
    [
        ("daily", set(range(7))),
        ("workdays", {0, 1, 2, 3, 4}),
        ("weekends", {5, 6}),
        ("fri", {4}),
        ("mon, wed,fri", {0, 2, 4}),
        ("weekends,fri", {4, 5, 6}),
    ],
)
def test_day_words(text: str, days: set[int]) -> None:
    assert parse_weekdays(text) == days


@pytest.mark.parametrize("text", ["", "Fri", "mon,", "friday", "daily fri"])
def test_bad_day_words(text: str) -> None:
    with pytest.raises(ValueError, match="unknown schedule word"):
        parse_weekdays(text)
