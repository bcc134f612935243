"""Workflow XML -> Workflow, reporting every problem with its line.

Three stages, each reporting all it finds: XML syntax (libxml2 stops at the first fatal error, so
at most one), the shape given by ``workflow.xsd`` (elements, order, attribute names), then the
values and the graph (:mod:`wfm.workflow.checks`). A stage runs only if the one before passed:
reading the values of a document of the wrong shape would mostly produce echoes of its shape
errors. lxml keeps ``sourceline`` on every element, which is why it is used rather than ElementTree.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable
from functools import lru_cache
from importlib.resources import files
from pathlib import Path
from typing import TypeVar

from lxml import etree

from wfm.workflow import calendars, conditions, overlap
from wfm.workflow.checks import DEFAULT_PRIORITY, PRIORITY_RULE, RETRIES_RULE, TIMEOUT_RULE
from wfm.workflow.errors import DefinitionError, Problem
from wfm.workflow.model import After, Job, Param, Pool, Workflow
from workflow_messages.approvals import DEFAULT_ROLES, approval_roles
from workflow_messages.params import parse_value
from workflow_messages.pools import DEFAULT_LEASE, LEASE_RULE, SLOTS_RULE

__all__ = ["load", "loads"]

N = TypeVar("N", int, float)  # a number read from an attribute
D = TypeVar("D", int, float, None)  # its default

_TIMEOUT = re.compile(r"\s*(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*\Z")
_RETRIES = re.compile(r"\s*[0-9]+\s*\Z")
_PRIORITY = re.compile(r"\s*[0-9]\s*\Z")
_LIBXML_POSITION = re.compile(r", line \d+, column \d+\Z")

# libxml2's schema messages -> plain ones; the first pattern that matches wins.
_SCHEMA_MESSAGES: list[tuple[re.Pattern[str], str]] = [
    (
        re.compile(r"Element '(\S+)': Missing child element\(s\)\. Expected is .*\bcommand\b"),
        "<{0}> needs a <command>",
    ),
    (
        re.compile(r"Element '(\S+)': Missing child element\(s\)\. Expected is one of \( .*\b(job) \)"),
        "<{0}> needs at least one <{1}>",
    ),
    (
        re.compile(r"Element '(\S+)': Missing child element\(s\)\. Expected is \( (\S+) \)"),
        "<{0}> needs at least one <{1}>",
    ),
    (
        re.compile(r"Element 'param': This element is not expected"),
        "unexpected <param> (a workflow declares its <param> elements first, before its calendars and jobs)",
    ),
    (
        re.compile(r"Element 'calendar': This element is not expected"),
        "unexpected <calendar> (a workflow declares its <calendar> elements after its <param>"
        " elements and before its jobs)",
    ),
    (
        re.compile(r"Element 'pool': This element is not expected"),
        "unexpected <pool> (a workflow declares its <pool> elements after its <param> and"
        " <calendar> elements and before its jobs)",
    ),
    (
        re.compile(r"Element '(wait|event)': This element is not expected"),
        "unexpected <{0}> (a job holds its <after> elements, then its <wait> and <event> elements,"
        " then one <command> or one <approval>)",
    ),
    (
        re.compile(r"Element '(after|command)': This element is not expected"),
        "unexpected <{0}> (a job holds its <after> elements, then one <command> or one <approval>)",
    ),
    (
        re.compile(r"Element 'approval': This element is not expected"),
        "unexpected <approval> (a job holds its <after> elements, then one <command> or one <approval>)",
    ),
    (
        re.compile(r"Element '(\S+)': This element is not expected\. Expected is \( (\S+) \)"),
        "unexpected element <{0}> (expected <{1}>)",
    ),
    (
        re.compile(r"Element '(\S+)': This element is not expected\. Expected is one of \( (.+) \)"),
        "unexpected element <{0}> (expected one of {1})",
    ),
    (re.compile(r"Element '(\S+)': This element is not expected"), "unexpected element <{0}>"),
    (
        re.compile(r"Element '(\S+)', attribute '(\S+)': The attribute .* is not allowed"),
        "unknown attribute {1!r} on <{0}>",
    ),
    (
        re.compile(r"Element '(\S+)': The attribute '(\S+)' is required but missing"),
        "<{0}> needs a {1!r} attribute",
    ),
    (re.compile(r"Element '(\S+)': Character content .*not allowed"), "<{0}> cannot contain text"),
    (re.compile(r"Element '(\S+)': Element content is not allowed"), "<{0}> cannot contain elements"),
    (
        re.compile(r"Element '(\S+)': No matching global declaration"),
        "the root element must be <workflow>, not <{0}>",
    ),
]


def load(path: str | os.PathLike[str]) -> Workflow:
    """Read and check a workflow file; its absolute path becomes the workflow's ``source``."""
    file = Path(path)
    return loads(file.read_bytes(), str(file.resolve()))


def loads(data: bytes | str, source: str | None = None) -> Workflow:
    """Parse and check a workflow definition; DefinitionError lists every problem found."""
    parser = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False)
    raw = data.encode() if isinstance(data, str) else data
    try:
        root = etree.fromstring(raw, parser)
    except etree.XMLSyntaxError as error:
        message = _LIBXML_POSITION.sub("", str(error.msg))
        raise DefinitionError([Problem(error.lineno, f"XML syntax error: {message}")]) from None
    if root.getroottree().docinfo.doctype:
        # Entities could read local files or grow a few lines into gigabytes; unresolved, they
        # crash the schema check. A workflow needs none, so a DTD is refused whatever it holds.
        at = raw.find(b"<!DOCTYPE")  # lxml keeps no line for it; not found in UTF-16: line 1
        line = raw.count(b"\n", 0, at) + 1 if at >= 0 else 1
        raise DefinitionError([Problem(line, "a DOCTYPE is not allowed in a workflow definition")])
    schema = _schema()
    if not schema.validate(root):
        raise DefinitionError(Problem(entry.line, _plain(entry.message)) for entry in schema.error_log)
    problems: list[Problem] = []
    jobs = tuple(_job(element, problems) for element in root.iterchildren("job"))
    params = tuple(_param(element) for element in root.iterchildren("param"))
    folder = None if source is None else Path(source).parent  # a holiday file is relative to it
    declared = tuple(calendars.read(e, problems, folder) for e in root.iterchildren("calendar"))
    limit = overlap.read(root, problems)
    pools = tuple(_pool(element, problems) for element in root.iterchildren("pool"))
    try:
        workflow = Workflow(
            root.get("name"),
            jobs,
            source,
            root.sourceline,
            params,
            declared,
            root.get("deadline"),
            limit,
            pools,
        )
    except DefinitionError as error:
        problems.extend(error.problems)
    if problems:
        raise DefinitionError(problems)
    return workflow


@lru_cache(maxsize=1)
def _schema() -> etree.XMLSchema:
    return etree.XMLSchema(etree.fromstring((files(__package__) / "workflow.xsd").read_bytes()))


def _plain(message: str) -> str:
    for pattern, plain in _SCHEMA_MESSAGES:
        match = pattern.match(message)
        if match:
            return plain.format(*match.groups())
    return message.rstrip(".")


def _param(element: etree._Element) -> Param:
    """One ``<param>`` (type string by default); a default of its type is written canonically
    (``007`` -> ``7``), any other is left for the checks to report."""
    kind, default = element.get("type", "string"), element.get("default")
    if default is not None:
        with contextlib.suppress(ValueError):
            default = parse_value(kind, default)
    return Param(element.get("name"), kind, default, element.sourceline)


def _pool(element: etree._Element, problems: list[Problem]) -> Pool:
    """One ``<pool>``; a ``slots`` or ``lease`` that is no number is reported and replaced by one
    that passes, so that the rest of the workflow is still checked."""
    name, line = element.get("name"), element.sourceline
    label = f"pool {name!r}"
    # slots 0 goes on to the checks, which report it
    slots = _number(element, "slots", _RETRIES.match, int, 1, SLOTS_RULE, label, problems)
    lease = _number(element, "lease", _TIMEOUT.match, float, DEFAULT_LEASE, LEASE_RULE, label, problems)
    return Pool(name, slots, element.get("keeper"), lease, line)


def _number(
    element: etree._Element,
    attribute: str,
    fits: Callable[[str], object],
    convert: Callable[[str], N],
    default: D,
    rule: str,
    label: str,
    problems: list[Problem],
) -> N | D:
    """The number ``attribute`` of ``element`` holds, or ``default`` when it has none; text that
    does not fit is reported (``label: rule, not 'text'``) and the default kept, so that the rest
    of the workflow is still checked."""
    text = element.get(attribute)
    if text is None:
        return default
    if fits(text):
        return convert(text)
    problems.append(Problem(element.sourceline, f"{label}: {rule}, not {text!r}"))
    return default


def _positive(text: str) -> bool:
    return bool(_TIMEOUT.match(text)) and float(text) > 0


def _job(element: etree._Element, problems: list[Problem]) -> Job:
    """One ``<job>``; text that cannot be converted is reported and replaced by the default, so
    that the rest of the workflow is still checked."""
    name, line = element.get("name"), element.sourceline
    label = f"job {name!r}"
    weekdays = calendars.weekdays_of(element, "schedule", label, problems)
    timeout: float | None = _number(element, "timeout", _positive, float, None, TIMEOUT_RULE, label, problems)
    retries = _number(element, "retries", _RETRIES.match, int, 0, RETRIES_RULE, label, problems)
    priority = _number(
        element, "priority", _PRIORITY.match, int, DEFAULT_PRIORITY, PRIORITY_RULE, label, problems
    )
    after = tuple(
        After(a.get("job"), a.get("on", "success"), a.sourceline) for a in element.iterchildren("after")
    )
    command = (element.findtext("command") or "").strip()
    agent, calendar, deadline = element.get("agent", ""), element.get("calendar"), element.get("deadline")
    waits, pool = conditions.read(element), element.get("pool")
    approval: tuple[str, ...] = ()
    asked = element.find("approval")
    if asked is not None:  # an approval step: roles not understood are reported, and the default kept
        approval = approval_roles(DEFAULT_ROLES)
        try:
            approval = approval_roles(asked.get("roles", DEFAULT_ROLES))
        except ValueError as error:
            problems.append(Problem(asked.sourceline, f"{label}: {error}"))
    return Job(
        name,
        agent,
        command,
        weekdays,
        timeout,
        retries,
        after,
        line,
        priority,
        calendar,
        deadline,
        waits,
        approval,
        pool,
        tuple((element.get("standby") or "").split()),
        element.get("takeover"),
    )
