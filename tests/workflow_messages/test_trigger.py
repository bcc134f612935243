"""The Trigger's shape: the date travels in its ``schedule`` attribute, ``YYYY.MM.DD``."""

from __future__ import annotations

from datetime import date

from workflow_messages import trigger, trigger_date


def test_trigger_shape_round_trips_its_date() -> None:
    publication = trigger("PAYROLL", "g001", date(2026, 11, 27))
    assert str(publication) == "[class,Trigger],[GID,g001],[applname,PAYROLL],[schedule,'2026.11.27']"
    assert trigger_date(str(publication["schedule"])) == date(2026, 11, 27)
