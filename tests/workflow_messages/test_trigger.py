"""The Trigger's shape: the date travels in its ``schedule`` attribute, ``YYYY.MM.DD``; an expiry, when
it has one, in ``expires`` (epoch seconds)."""

from __future__ import annotations

from datetime import date

import pytest

from broker.language import Publication, Value, parse_publication
from broker.routing.relations import Fit
from workflow_messages import expired, trigger, trigger_advertisement, trigger_date, trigger_expiry


def test_trigger_shape_round_trips_its_date() -> None:
    publication = trigger("PAYROLL", "g001", date(2026, 11, 27))
    assert str(publication) == "[class,Trigger],[GID,g001],[applname,PAYROLL],[schedule,'2026.11.27']"
    assert trigger_date(str(publication["schedule"])) == date(2026, 11, 27)


def test_a_trigger_with_an_expiry_carries_it_to_the_millisecond() -> None:
    publication = trigger("PAYROLL", "g001", date(2026, 11, 27), expires=1795000000.12345)
    assert publication["expires"] == 1795000000.123
    assert trigger_expiry(publication) == 1795000000.123
    assert trigger_expiry(parse_publication(str(publication))) == 1795000000.123  # through the text
    assert trigger_expiry(trigger("PAYROLL", "g001", date(2026, 11, 27))) is None  # no --ttl: never


def test_the_trigger_advertisement_covers_triggers_with_and_without_an_expiry() -> None:
    fits = Fit.of(trigger_advertisement())
    day = date(2026, 11, 27)
    plain = {"sequence": 1, "signer": "key:x", "signature": "s"}
    assert fits(Publication("Trigger", {**trigger("W", "g", day).fields, **plain}))
    assert fits(Publication("Trigger", {**trigger("W", "g", day, expires=5.5).fields, **plain}))


@pytest.mark.parametrize("value", ["soon", "1795000000", -1, 1e11, 2**53])
def test_a_garbled_expiry_is_a_one_line_error(value: Value) -> None:
    publication = Publication(
        "Trigger", {"applname": "W", "GID": "g", "schedule": "2026.11.27", "expires": value}
    )
    with pytest.raises(ValueError, match=r"^the trigger's expires .* is not epoch seconds") as raised:
        trigger_expiry(publication)
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize(
    ("expires", "now", "late"),
    [
        (None, 1e10, False),
        (100.0, 99.999, False),
        (100.0, 100.0, True),
        (100.0, 250.0, True),
        (0.0, 0.0, True),
    ],
)
def test_a_trigger_is_late_from_its_expiry_on(expires: float | None, now: float, late: bool) -> None:
    assert expired(expires, now) is late
