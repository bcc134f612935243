"""Trigger: the publication that starts a generation of a workflow for a date.

Its ``schedule`` attribute (the name is fixed: docs/workflows.md, Messages) holds the date, ``YYYY.MM.DD``,
that the jobs' calendars are checked against. ``expires`` (``wfm trigger --ttl``; absent: never) is the
instant, epoch seconds of the issuer's clock, after which the workflow's coordinator does not start
the generation but ends it EXPIRED (:func:`expired`, decided in ``agents.firing``).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from datetime import date, datetime

from broker.language import Atom, Filter, Publication
from workflow_messages._build import filter_of
from workflow_messages.names import GID, TRIGGER
from workflow_messages.params import PARAMS, encode_params

__all__ = [
    "EXPIRES",
    "check_gid",
    "expired",
    "trigger",
    "trigger_advertisement",
    "trigger_atom",
    "trigger_date",
    "trigger_expiry",
]

EXPIRES = "expires"  # the attribute: epoch seconds after which the generation does not start
MAX_EXPIRES = 1e11  # epoch seconds (about the year 5100): the bound a Qos puts on an expiry too

_GID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}\Z")


def check_gid(gid: str) -> str:
    """A generation id: 1 to 64 letters, digits and ``_ . : -``, starting with a letter or digit,
    so it is one plain token in logs, in the message language and in file names (an agent keeps a
    generation's run logs in a folder named by it). Checked where one is made (``wfm trigger``) and
    where an agent takes one from a message: without TLS anyone may publish a Trigger."""
    if not _GID_RE.match(gid):
        raise ValueError(
            f"invalid gid {gid!r} (1 to 64 letters, digits and _ . : -, not starting with one of _ . : -)"
        )
    return gid


def trigger_advertisement() -> Filter:
    """What ``wfm trigger`` and ``wfm schedule`` advertise before publishing Triggers of any workflow,
    signed (:mod:`workflow_messages.signature`)."""
    return filter_of(
        TRIGGER,
        {},
        present=("applname", "GID", "schedule", "signer", "signature", PARAMS),
        numbers=("sequence", EXPIRES),
    )


def trigger(
    workflow: str,
    gid: str,
    day: date,
    expires: float | None = None,
    params: Mapping[str, str] | None = None,
) -> Publication:
    """``[class,Trigger],[applname,W],[GID,G],[schedule,'YYYY.MM.DD']``: start generation ``gid``;
    with ``expires`` (epoch seconds, kept to the millisecond), ``[expires,E]`` too: not after E;
    with ``params`` (run parameters, :mod:`workflow_messages.params`), ``[params,'{...}']``."""
    fields: dict[str, str | float] = {"applname": workflow, "GID": gid, "schedule": day.strftime("%Y.%m.%d")}
    if expires is not None:
        fields[EXPIRES] = _checked_expiry(round(expires, 3))
    if params:
        fields[PARAMS] = encode_params(params)
    return Publication(TRIGGER, fields)


def trigger_expiry(publication: Publication) -> float | None:
    """When the generation a Trigger starts expires (epoch seconds), None if it does not say (a
    Trigger without ``--ttl``, or from an issuer older than the attribute); ValueError (one line) if
    its ``expires`` is not epoch seconds: anyone may publish a Trigger without TLS, and a broker
    carries whatever value it was given."""
    value = publication.get(EXPIRES)
    return None if value is None else _checked_expiry(value)


def expired(expires: float | None, now: float) -> bool:
    """Whether a Trigger with that expiry (:func:`trigger_expiry`) is late when it reaches its
    coordinator at ``now`` (the coordinator's clock): at the expiry itself it is."""
    return expires is not None and now >= expires


def _checked_expiry(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < MAX_EXPIRES:
        raise ValueError(f"the trigger's expires {value!r:.40} is not epoch seconds (a number, 0 to 1e11)")
    return float(value)


@functools.lru_cache(maxsize=1024)  # every firing of a generation names its Trigger's date
def trigger_date(text: str) -> date:
    """The date a Trigger's ``schedule`` attribute holds; ValueError if it is not ``YYYY.MM.DD``."""
    try:
        return datetime.strptime(text, "%Y.%m.%d").date()
    except ValueError:
        raise ValueError(f"the trigger's schedule {text!r} is not a date YYYY.MM.DD") from None


def trigger_atom(workflow: str) -> Atom:
    """``{[class,eq,Trigger],[applname,eq,W],[GID,eq,$S$X]}``: a generation of ``workflow`` starts."""
    return Atom(filter_of(TRIGGER, {"applname": workflow, "GID": GID}))
