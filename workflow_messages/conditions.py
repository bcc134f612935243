"""Conditions on other workflows and on events (``<wait>``, ``<event>`` in a job): what a job
waits for besides its own workflow's predecessors and Trigger (docs/workflows.md, "Conditions on
other workflows and on events").

A :class:`Wait` is satisfied by a JOBSTATUS of another workflow's job whose status its ``on``
accepts (a skip, NORUN with ``skipped`` 1, none) and whose generation ran for the date its
``date`` names from the waiting generation's (``same``, ``prev``, ``-N`` days, or a fixed
``YYYY-MM-DD``): statuses carry their generation's
``date`` for that (:func:`workflow_messages.job_status`), since two workflows' generations share
no gid. An :class:`Event` is satisfied by a publication that matches its filter, and each such
publication lets one generation of the job through (it is used up, as a chronicle composite's
match is). Both are plain values, written into the job's DEPLOY entry (:func:`records`) and read
back by the agent (:func:`read_records`), which subscribes each one's :func:`subscription` and
decides with :func:`satisfies`. Pure: no I/O, no clock.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import Any

from broker.language import Filter, Publication, parse_filter, parse_publication
from broker.language.operators import TIME_ATTRIBUTE, holds
from workflow_messages._build import filter_of
from workflow_messages.names import ACCEPTS, JOBSTATUS, check_name
from workflow_messages.operations import decode_content

__all__ = [
    "DATE_ATTRIBUTE",
    "MAX_CONDITIONS",
    "Condition",
    "Event",
    "Wait",
    "facts_content",
    "held",
    "label",
    "parse_date_rule",
    "read_facts",
    "read_records",
    "records",
    "satisfies",
    "subscription",
    "wanted_date",
]

DATE_ATTRIBUTE = "date"  # of a JOBSTATUS: its generation's date, YYYY-MM-DD (the Trigger's)
MAX_CONDITIONS = 32  # per job: each is a subscription of its agent
MAX_DAYS_BACK = 366
_DAYS_BACK = re.compile(r"-([0-9]{1,3})\Z")


@dataclass(frozen=True, slots=True)
class Wait:
    """``<wait workflow job on date>``: ``job`` of ``workflow`` ended in a way ``on`` accepts
    (success: SUCCESS or NORUN; failure; always) in a generation for the date ``date`` names."""

    workflow: str
    job: str
    on: str = "success"
    date: str = "same"
    line: int | None = field(default=None, compare=False)

    def record(self) -> dict[str, Any]:
        return {"wait": [self.workflow, self.job], "on": self.on, "date": self.date}

    def __str__(self) -> str:
        return f"{self.workflow}.{self.job}"


@dataclass(frozen=True, slots=True)
class Event:
    """``<event filter>``: a publication matching ``filter`` (its text, in the language of
    docs/language.md, checked by :func:`subscription`)."""

    filter: str
    line: int | None = field(default=None, compare=False)

    def record(self) -> dict[str, Any]:
        return {"event": self.filter}

    def __str__(self) -> str:
        return f"event {self.filter}"


Condition = Wait | Event


def parse_date_rule(text: str) -> int | date:
    """A :class:`Wait`'s ``date``: days before the waiting generation's date (``same`` 0,
    ``prev`` 1, ``-N``), or a fixed date ``YYYY-MM-DD``; ValueError (one line) otherwise."""
    if text == "same":
        return 0
    if text == "prev":
        return 1
    if (back := _DAYS_BACK.match(text)) is not None and int(back[1]) <= MAX_DAYS_BACK:
        return int(back[1])
    try:
        if len(text) == 10:
            return date.fromisoformat(text)
    except ValueError:
        pass
    raise ValueError(
        f"date must be same, prev, -N (days before, at most {MAX_DAYS_BACK}) or a date YYYY-MM-DD,"
        f" not {text!r}"
    )


def wanted_date(wait: Wait, day: date) -> date:
    """The date of the other workflow's generation that satisfies ``wait`` for a generation of
    date ``day``."""
    rule = parse_date_rule(wait.date)
    return rule if isinstance(rule, date) else day - timedelta(days=rule)


def subscription(condition: Condition) -> Filter:
    """What the waiting job's agent subscribes to: the other job's statuses (any status: whether
    it is one ``on`` accepts is decided with the date), or the event's filter. ValueError (a
    :class:`broker.language.ParseError`, one line) for an event filter that does not parse."""
    if isinstance(condition, Event):
        event = parse_filter(condition.filter)
        if any(predicate.attribute == TIME_ATTRIBUTE for predicate in event.predicates):
            raise ValueError(
                f"an event filter cannot use {TIME_ATTRIBUTE!r}: the job waits from its deployment on"
            )
        return event
    equal: dict[str, Any] = {"applname": condition.workflow, "jobname": condition.job}
    return filter_of(JOBSTATUS, equal, present=("status", DATE_ATTRIBUTE))


@functools.lru_cache(maxsize=1024)  # an agent tests its held runs against every fact that comes
def _event_filter(text: str) -> Filter:
    event = parse_filter(text)
    if any(predicate.attribute == TIME_ATTRIBUTE for predicate in event.predicates):
        raise ValueError(f"an event filter cannot use {TIME_ATTRIBUTE!r} (the broker's time of each)")
    return event


def satisfies(condition: Condition, publication: Publication, day: date) -> bool:
    """Whether ``publication`` (delivered for :func:`subscription`) satisfies ``condition`` for
    the waiting generation of date ``day``."""
    if isinstance(condition, Event):
        event = subscription(condition)  # no time predicate: the matcher's rule needs no clock
        return event.cls == publication.cls and all(
            p.attribute in publication and holds(p.op, p.value, publication[p.attribute])
            for p in event.predicates
        )
    return (
        publication.cls == JOBSTATUS
        and publication.get("applname") == condition.workflow
        and publication.get("jobname") == condition.job
        and publication.get("status") in ACCEPTS[condition.on]
        and publication.get("skipped") != 1  # a branch not taken: the job did not end, it was passed by
        and publication.get(DATE_ATTRIBUTE) == wanted_date(condition, day).isoformat()
    )


def records(conditions: tuple[Condition, ...]) -> list[dict[str, Any]]:
    """As JSON-ready data: in the job's DEPLOY entry and its version."""
    return [condition.record() for condition in conditions]


def read_records(data: object) -> tuple[Condition, ...]:
    """The conditions of a DEPLOY entry, each checked as ``wfm validate`` checks it; ValueError
    (one line) for anything else."""
    if not isinstance(data, list) or len(data) > MAX_CONDITIONS:
        raise ValueError(f"JOBINFO conditions must be a list of at most {MAX_CONDITIONS}")
    conditions: list[Condition] = []
    for entry in data:
        if isinstance(entry, dict) and set(entry) == {"event"} and isinstance(entry["event"], str):
            event = Event(entry["event"])
            subscription(event)  # ParseError: the envelope is refused
            conditions.append(event)
        elif (
            isinstance(entry, dict)
            and set(entry) == {"wait", "on", "date"}
            and isinstance(entry["wait"], list)
            and len(entry["wait"]) == 2
            and all(isinstance(name, str) for name in entry["wait"])
            and entry["on"] in ACCEPTS
            and isinstance(entry["date"], str)
        ):
            workflow, job = entry["wait"]
            check_name(workflow, "JOBINFO wait: workflow")
            check_name(job, "JOBINFO wait: job")
            parse_date_rule(entry["date"])
            conditions.append(Wait(workflow, job, entry["on"], entry["date"]))
        else:
            raise ValueError(
                'JOBINFO conditions must be {"wait": [workflow, job], "on", "date"} or {"event": filter}'
            )
    return tuple(conditions)


def facts_content(facts: list[tuple[Filter, Publication]]) -> str:
    """The content of a FACTS envelope: what the history kept for conditions' subscriptions,
    which ``wfm deploy`` hands to the waiting jobs' agent once their subscriptions are made."""
    return json.dumps({"facts": [[str(f), str(p)] for f, p in facts]}, separators=(",", ":")).replace(
        "'", "\\u0027"
    )


def read_facts(content: str) -> list[tuple[str, Publication]]:
    """The (subscription text, publication) pairs of a FACTS envelope, each parsed; ValueError
    (one line) for anything else."""
    data = decode_content(content)
    facts = data.get("facts")
    if set(data) != {"facts"} or not isinstance(facts, list):
        raise ValueError('FACTS content must be {"facts": [[filter, publication], ...]}')
    read: list[tuple[str, Publication]] = []
    for entry in facts:
        if not (isinstance(entry, list) and len(entry) == 2 and all(isinstance(t, str) for t in entry)):
            raise ValueError('FACTS content must be {"facts": [[filter, publication], ...]}')
        read.append((str(parse_filter(entry[0])), parse_publication(entry[1])))
    return read


def held(waiting: object) -> str:
    """The detail of a held job from the conditions it waits for (an agent's answer):
    ``waiting for LEDGER.Close, event [class,eq,FILE_ARRIVED]``."""
    names = [str(name) for name in waiting] if isinstance(waiting, list) else []
    return "waiting for " + (", ".join(names) or "its conditions")


def label(record: object) -> tuple[str, str]:
    """A condition of a DEPLOY entry (:func:`records`) as a box of the dashboard's graph: its name
    (``LEDGER.Close``, ``event FILE_ARRIVED``; no job's name has a dot or a space) and the
    edge's ``on``. ``("?", "always")`` for one it cannot read."""
    try:
        [condition] = read_records([record])
    except ValueError:
        return "?", "always"
    if isinstance(condition, Event):
        return f"event {subscription(condition).cls}", "success"
    rule = "" if condition.date == "same" else f" ({condition.date})"
    return f"{condition}{rule}", condition.on
