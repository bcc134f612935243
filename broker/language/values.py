"""Attribute values: numbers, strings and time references, with their canonical spellings.

Numbers are kept as Python ``int`` or ``float`` and must lie within +/-2**53 so that every number
the language accepts is exactly representable as a 64-bit float: the matcher compares them in
NumPy arrays, and exactness is what lets it agree with the literal semantics on every boundary.
An integral decimal (``100.0``) becomes the int ``100``: the two texts mean the same number, so
they get the same canonical text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import TypeGuard

from broker.records import Frozen

__all__ = [
    "MAX_EXACT",
    "MAX_TIME_OFFSET",
    "NAME_RE",
    "Number",
    "TimeRef",
    "Value",
    "Var",
    "check_name",
    "check_string",
    "format_number",
    "format_string",
    "is_number",
    "normalize_number",
    "parse_decimal",
]

Number = int | float
Value = int | float | str

MAX_EXACT = 2**53
NAME_RE = re.compile(r"[A-Za-z_:/][A-Za-z0-9_\-:/]*\Z")
_UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
# A relative time reaches at most this far (about 1000 years) from now: whatever the clock of the
# broker that fixes it (0 to 1e11 epoch seconds, about year 5100), the instant it becomes stays
# within the years a datetime holds (1 to 9999).
MAX_TIME_OFFSET = 365_000 * 86400
_OFFSET_RULE = f"a relative time must be whole seconds within {MAX_TIME_OFFSET // 86400}d of now"


def is_number(value: object) -> TypeGuard[Number]:
    """True for int and float but not bool (a bool is no value of this language)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def normalize_number(value: object) -> Number:
    """Check range and finiteness; integral floats become ints."""
    if not is_number(value):
        raise ValueError(f"{value!r} is not a number")
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"{value!r} is not a finite number")
        if value.is_integer():
            value = int(value)
    # an int compared as an int: compiled, ``abs()`` of an ``int | float`` is a float
    if (isinstance(value, int) and not -MAX_EXACT <= value <= MAX_EXACT) or abs(value) > MAX_EXACT:
        raise ValueError(f"number {format_number(value)} is out of range (at most 2**53 in magnitude)")
    return value


def parse_decimal(text: str) -> Number:
    """A decimal literal to a number, refusing digits a 64-bit float would silently drop."""
    number = float(text)
    if Decimal(text) != Decimal(repr(number)):
        raise ValueError(f"decimal {text} has more digits than a 64-bit float holds")
    return normalize_number(number)


def format_number(value: Number) -> str:
    if isinstance(value, int):
        return str(value)
    return format(Decimal(repr(value)), "f")


def check_name(name: object, what: str = "name") -> str:
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise ValueError(f"{name!r} is not a valid {what}")
    return name


def check_string(value: str) -> str:
    """A string value must be writable in the language: no line break, not both kinds of quote."""
    if "\n" in value or "\r" in value:
        raise ValueError("a string value cannot contain a line break")
    if "'" in value and '"' in value:
        raise ValueError("a string value cannot contain both ' and \"")
    return value


def format_string(value: str) -> str:
    if NAME_RE.match(value):
        return value
    quote = '"' if "'" in value else "'"
    return f"{quote}{value}{quote}"


@dataclass(frozen=True, slots=True)
class Var(Frozen):
    """A composite-subscription variable: ``$S$X`` binds strings, ``$I$X`` ints, ``$F$X`` numbers."""

    kind: str
    name: str

    def __post_init__(self) -> None:
        if self.kind not in ("S", "I", "F"):
            raise ValueError(f"unknown variable kind {self.kind!r} (use $S$, $I$ or $F$)")
        check_name(self.name, "variable name")

    def accepts(self, value: Value) -> bool:
        if self.kind == "S":
            return isinstance(value, str)
        if self.kind == "I":
            return isinstance(value, int)
        return is_number(value)

    def __str__(self) -> str:
        return f"${self.kind}${self.name}"


@dataclass(frozen=True, slots=True)
class TimeRef(Frozen):
    """A point in time, either ``now`` plus an offset in seconds or an absolute UTC instant.

    Relative references stay relative in the model (their canonical text is ``now-2h``); whoever
    evaluates them supplies "now" as a value, so the model and the matcher never read a clock.
    """

    offset: int | None = None
    instant: datetime | None = None

    def __post_init__(self) -> None:
        if (self.offset is None) == (self.instant is None):
            raise ValueError("a time reference is either relative (offset) or absolute (instant)")
        if self.offset is not None and not (
            isinstance(self.offset, int)
            and not isinstance(self.offset, bool)
            and abs(self.offset) <= MAX_TIME_OFFSET
        ):
            raise ValueError(_OFFSET_RULE)
        if self.instant is not None and self.instant.utcoffset() != timedelta(0):
            raise ValueError("an absolute time reference must be in UTC")

    @classmethod
    def parse(cls, text: str) -> TimeRef:
        """``now``, ``now-2h``, ``now+30m`` or an ISO-8601 timestamp (naive means UTC)."""
        match = re.fullmatch(r"now(?:([+-])([0-9]+)([smhd]))?", text)
        if match:
            sign, amount, unit = match.groups()
            if len(amount or "") > 15:  # out of range anyway; int() refuses texts of 4300 digits
                raise ValueError(_OFFSET_RULE)
            seconds = int(amount or 0) * _UNITS.get(unit or "s", 1)
            return cls(offset=-seconds if sign == "-" else seconds)
        try:
            instant = datetime.fromisoformat(text)
        except ValueError:
            raise ValueError(
                f"{text!r} is not a time: use now, now-2h, now+30m (s m h d) or an ISO-8601 timestamp"
            ) from None
        if instant.tzinfo is None:
            instant = instant.replace(tzinfo=UTC)
        return cls(instant=instant.astimezone(UTC))

    def resolve(self, now: float) -> float:
        """Seconds since the epoch, taking ``now`` (epoch seconds) for relative references."""
        if self.instant is not None:
            return self.instant.timestamp()
        assert self.offset is not None
        return now + self.offset

    def absolute(self, now: float) -> TimeRef:
        """This reference fixed at ``now``: what a broker stores when it accepts a subscription."""
        return TimeRef(instant=datetime.fromtimestamp(self.resolve(now), UTC))

    def __str__(self) -> str:
        if self.instant is not None:
            # isoformat, unlike strftime("%Y"), pads years before 1000 to four digits
            return "'" + self.instant.replace(tzinfo=None).isoformat() + "Z'"
        assert self.offset is not None
        if self.offset == 0:
            return "now"
        sign = "-" if self.offset < 0 else "+"
        size = abs(self.offset)
        unit = next(u for u, s in _UNITS.items() if size % s == 0)
        return f"now{sign}{size // _UNITS[unit]}{unit}"
