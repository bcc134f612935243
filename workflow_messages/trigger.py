"""Trigger: the publication that starts a generation of a workflow for a date.

Its ``schedule`` attribute (the name is fixed: docs/workflows.md, Messages) holds the date, ``YYYY.MM.DD``,
that the jobs' calendars are checked against.
"""

from __future__ import annotations

import functools
import re
from datetime import date, datetime

from broker.language import Atom, Filter, Publication
from workflow_messages._build import filter_of
from workflow_messages.names import GID, TRIGGER

__all__ = ["check_gid", "trigger", "trigger_advertisement", "trigger_atom", "trigger_date"]

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
        TRIGGER, {}, present=("applname", "GID", "schedule", "signer", "signature"), numbers=("sequence",)
    )


def trigger(workflow: str, gid: str, day: date) -> Publication:
    """``[class,Trigger],[applname,W],[GID,G],[schedule,'YYYY.MM.DD']``: start generation ``gid``."""
    return Publication(TRIGGER, {"applname": workflow, "GID": gid, "schedule": day.strftime("%Y.%m.%d")})


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
