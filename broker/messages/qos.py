"""A publication's quality of service, carried beside its content: filters never see it.

The alert server's per-message settings (seed 001): a priority, a time to live, persistence,
retention, the acknowledgement asked for, and a message id the client chose. The client states
a time to live in seconds (``ttl``); the first broker turns it into an absolute expiry
(``expires``, its clock's epoch seconds) and carries that on, so a client whose clock is off
neither lengthens nor shortens its messages' lives. Brokers compare ``expires`` with their own
clocks: a broker whose clock is ahead of the first broker's by s seconds drops a message s
seconds early (NTP keeps hosts within milliseconds; a skew of seconds costs seconds of life).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

__all__ = ["ACKS", "CANCELS", "DEFAULT_QOS", "MAX_TTL", "Qos", "parse_bounded", "parse_duration"]

ACKS = ("none", "client", "receipt")
CANCELS = ("originator", "any")  # who may cancel a retained publication: its publisher, or anyone
MAX_TTL = 10 * 365 * 86400.0  # seconds: ten years is "for ever" for a message


@dataclass(frozen=True, slots=True)
class Qos:
    """``priority`` 0 (lowest) to 9, 4 by default; ``ttl`` seconds from the client, which the
    first broker turns into ``expires``; ``persistent`` (in custody on disk where the broker
    keeps a log) or not; ``retain``; ``ack``: ``none``, ``client`` (the subscriber acknowledges)
    or ``receipt`` (its client library does, on receipt); ``mid``: the client's own id for it;
    ``cancel``: who may cancel it if retained, ``originator`` (its publisher's identity) or
    ``any``."""

    priority: int = 4
    ttl: float | None = None
    expires: float | None = None
    persistent: bool = True
    retain: bool = False
    ack: str = "none"
    mid: str = ""
    cancel: str = "originator"

    def __post_init__(self) -> None:
        if type(self.priority) is not int or not 0 <= self.priority <= 9:
            raise ValueError(f"priority must be an integer from 0 to 9, not {self.priority!r}")
        ttl = self.ttl
        if ttl is not None and (
            isinstance(ttl, bool) or not isinstance(ttl, int | float) or not 0 < ttl <= MAX_TTL
        ):
            raise ValueError(f"ttl must be a number of seconds above 0 and at most {MAX_TTL:g}, not {ttl!r}")
        expires = self.expires
        if expires is not None and (
            isinstance(expires, bool) or not isinstance(expires, int | float) or not 0 <= expires < 1e11
        ):
            raise ValueError("expires must be epoch seconds")
        if type(self.persistent) is not bool or type(self.retain) is not bool:
            raise ValueError("persistent and retain must be true or false")
        if self.ack not in ACKS:
            raise ValueError(f"ack must be one of {', '.join(ACKS)}, not {self.ack!r}")
        if type(self.mid) is not str or len(self.mid) > 128 or any(c.isspace() for c in self.mid):
            raise ValueError("a message id is at most 128 characters without spaces")
        if self.cancel not in CANCELS:
            raise ValueError(f"cancel must be one of {', '.join(CANCELS)}, not {self.cancel!r}")

    def fixed(self, now: float) -> Qos:
        """As the first broker carries it: its ``ttl`` made an expiry at ``now``."""
        if self.ttl is None:
            return self
        return replace(self, ttl=None, expires=now + self.ttl)

    def expired(self, now: float) -> bool:
        return self.expires is not None and now >= self.expires


DEFAULT_QOS = Qos()

_DURATION = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(ms|s|m|h|d)?")
_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}


def parse_duration(text: str) -> float:
    """Seconds in ``30s``, ``250ms``, ``5m``, ``2h``, ``1d`` or a plain number of seconds;
    ValueError saying what is accepted for anything else."""
    match = _DURATION.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"{text!r} is not a duration: give a number with ms, s, m, h or d (30s, 5m)")
    return float(match[1]) * _SECONDS[match[2]]


def parse_bounded(text: str, limit: float, what: str) -> float:
    """:func:`parse_duration`, above 0 and at most ``limit`` seconds; ValueError naming ``what``
    (``a time to live``) and the limit in days otherwise."""
    seconds = parse_duration(text)
    if not 0 < seconds <= limit:
        raise ValueError(f"{text!r} is not {what} above 0 and at most {limit / 86400:g}d")
    return seconds
