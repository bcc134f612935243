"""A job's conditions on other workflows and on events in the definition: ``<wait workflow job
on date>`` and ``<event filter>`` after its ``<after>`` elements (docs/workflows.md, "Conditions
on other workflows and on events"). The model is :mod:`workflow_messages.conditions`.

:func:`read` converts a ``<job>``'s elements (every value a plain string, as the schema leaves
it); :func:`problems` are the rules every Job is checked with, however it was made: names, ``on``,
the date rule, and an event's filter parsed with the language's own grammar (its error, with the
column, at the element's line).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from lxml import etree

from wfm.workflow.errors import Problem, first_on
from workflow_messages import ACCEPTS, check_name
from workflow_messages.conditions import MAX_CONDITIONS, Condition, Event, Wait, parse_date_rule, subscription

if TYPE_CHECKING:
    from wfm.workflow.model import Job

__all__ = ["problems", "read"]


def read(job: etree._Element) -> tuple[Condition, ...]:
    """The ``<wait>`` and ``<event>`` children of ``job``, in document order."""
    found: list[Condition] = []
    for element in job.iterchildren("wait", "event"):
        if element.tag == "event":
            found.append(Event(element.get("filter"), element.sourceline))
        else:
            wait = Wait(element.get("workflow"), element.get("job"), line=element.sourceline)
            found.append(
                Wait(
                    wait.workflow,
                    wait.job,
                    element.get("on", wait.on),
                    element.get("date", wait.date),
                    wait.line,
                )
            )
    return tuple(found)


def problems(job: Job) -> Iterator[Problem]:
    label = f"job {job.name!r}"
    if len(job.conditions) > MAX_CONDITIONS:
        yield Problem(job.line, f"{label} has more than {MAX_CONDITIONS} <wait> and <event> conditions")
    seen: dict[Condition, int | None] = {}
    for condition in job.conditions:
        line = condition.line or job.line
        if condition in seen:
            yield Problem(line, f"{label} waits for {condition} twice{first_on(seen[condition])}")
        seen.setdefault(condition, condition.line)
        if isinstance(condition, Event):
            try:
                subscription(condition)
            except ValueError as error:
                yield Problem(line, f"{label}: <event> filter {condition.filter!r}: {error}")
            continue
        for name, what in ((condition.workflow, "workflow"), (condition.job, "job")):
            try:
                check_name(name, f"{label}: <wait> {what}")
            except ValueError as error:
                yield Problem(line, str(error))
        if condition.on not in ACCEPTS:
            yield Problem(line, f"{label}: <wait> on={condition.on!r} is not one of {', '.join(ACCEPTS)}")
        try:
            parse_date_rule(condition.date)
        except ValueError as error:
            yield Problem(line, f"{label}: <wait> {error}")
