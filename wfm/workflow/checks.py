"""The semantic rules of a workflow definition, each producing a plain one-line Problem.

These run on every Workflow, however it was made; the XML loader adds only the problems of text
that cannot even be converted (``timeout="soon"``), worded with the same rules.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import TYPE_CHECKING

from broker.language.values import is_number
from broker.messages.qos import DEFAULT_QOS
from broker.transport import MAX_FRAME
from wfm.workflow import calendars, conditions, pools, standby
from wfm.workflow.errors import Problem, first_on
from workflow_messages import APPL_END, APPL_START, DAILY, check_name, find_cycles
from workflow_messages.approvals import parse_approval
from workflow_messages.deadlines import parse_deadline
from workflow_messages.overlap import overlap_problems
from workflow_messages.params import MAX_PARAMS, PARAM_TYPES, check_param_name, parse_value

if TYPE_CHECKING:
    from wfm.workflow.model import Job, Workflow

__all__ = [
    "DEFAULT_PRIORITY",
    "MAX_COMMAND",
    "ON_VALUES",
    "PRIORITY_RULE",
    "RETRIES_RULE",
    "TIMEOUT_RULE",
    "find_problems",
]

ON_VALUES = ("success", "failure", "always")
TIMEOUT_RULE = "timeout must be a positive number of seconds"
RETRIES_RULE = "retries must be a non-negative integer"
PRIORITY_RULE = "priority must be an integer from 0 to 9"
DEFAULT_PRIORITY = DEFAULT_QOS.priority
# A command travels to its agent JSON-encoded (up to 6 bytes per byte: \u00XX) inside one AGENT_CTL
# message, which must fit in one frame along with the rest of the job's definition.
MAX_COMMAND = MAX_FRAME // 8


def find_problems(workflow: Workflow) -> list[Problem]:
    """Every problem of the workflow, its jobs and its graph (empty: the workflow is valid)."""
    problems = list(_name_problems(workflow.name, "workflow name", workflow.line))
    if not workflow.jobs:
        problems.append(Problem(workflow.line, f"workflow {workflow.name!r} has no jobs"))
    problems.extend(_param_problems(workflow))
    problems.extend(calendars.problems(workflow))
    problems.extend(_deadline_problems(workflow.deadline, f"workflow {workflow.name!r}", workflow.line))
    if workflow.overlap is not None:
        label = f"workflow {workflow.name!r}"
        problems.extend(Problem(workflow.line, f"{label}: {m}") for m in overlap_problems(workflow.overlap))
    problems.extend(pools.problems(workflow))
    problems.extend(standby.problems(workflow))
    first: dict[str, Job] = {}
    for job in workflow.jobs:
        if job.name in first:
            problems.append(Problem(job.line, f"duplicate job {job.name!r}{first_on(first[job.name].line)}"))
        else:
            first[job.name] = job
    for job in workflow.jobs:
        problems.extend(_job_problems(job, first))
    graph = {
        name: [a.job for a in job.after if a.job in first and a.job != name] for name, job in first.items()
    }
    for cycle in find_cycles(graph):
        problems.append(Problem(first[cycle[0]].line, "cycle " + " -> ".join(cycle)))
    return problems


def _param_problems(workflow: Workflow) -> Iterator[Problem]:
    """``<param>``: a name a job's environment can hold (``WFM_PARAM_NAME``), declared once, one of
    the types, a default of its type."""
    if len(workflow.params) > MAX_PARAMS:
        yield Problem(workflow.line, f"more than {MAX_PARAMS} parameters declared")
    first: dict[str, int | None] = {}
    for param in workflow.params:
        label = f"param {param.name!r}"
        try:
            check_param_name(param.name)
        except ValueError as error:
            yield Problem(param.line, str(error))
        if param.name in first:
            yield Problem(param.line, f"duplicate param {param.name!r}{first_on(first[param.name])}")
        first.setdefault(param.name, param.line)
        if param.type not in PARAM_TYPES:
            yield Problem(param.line, f"{label}: type {param.type!r} is not one of {', '.join(PARAM_TYPES)}")
        elif param.default is not None:
            try:
                canonical = parse_value(param.type, param.default)
            except ValueError as error:
                yield Problem(param.line, f"{label}: default {error}")
            else:
                if canonical != param.default:  # the loader writes it so; one built in code must too
                    message = f"default {param.default!r} is not written canonically ({canonical!r})"
                    yield Problem(param.line, f"{label}: {message}")


def _deadline_problems(deadline: str | None, label: str, line: int | None) -> Iterator[Problem]:
    if deadline is not None:
        try:
            parse_deadline(deadline)
        except ValueError as error:
            yield Problem(line, f"{label}: {error}")


def _approval_problems(job: Job, label: str) -> Iterator[Problem]:
    """An approval step (``<approval roles="ROLES"/>``) runs nothing, once: no command, no retries;
    and waits for its predecessors only (an agent holds a job on its conditions before it runs,
    and an approval step does not run)."""
    try:
        parse_approval(list(job.approval))
    except ValueError as error:
        yield Problem(job.line, f"{label}: {error}")
    if job.command:
        yield Problem(job.line, f"{label} is an approval step: it has no command")
    if job.retries:
        yield Problem(job.line, f"{label} is an approval step: it has no retries")
    if job.conditions:
        yield Problem(
            job.line,
            f"{label} is an approval step: it waits on no <wait> or <event> (put them on a job before it)",
        )


def _name_problems(name: str, what: str, line: int | None) -> Iterator[Problem]:
    try:
        check_name(name, what)
    except ValueError as error:
        yield Problem(line, str(error))


def _job_problems(job: Job, known: dict[str, Job]) -> Iterator[Problem]:
    label = f"job {job.name!r}"
    yield from _name_problems(job.name, "job name", job.line)
    if job.name in (APPL_START, APPL_END):
        yield Problem(job.line, f"job name {job.name!r} is reserved for the virtual job of that name")
    if not job.agent:
        yield Problem(job.line, f"{label} has no agent")
    else:
        yield from _name_problems(job.agent, f"{label}: agent", job.line)
    if job.approval:
        yield from _approval_problems(job, label)
    elif not isinstance(job.command, str) or not job.command.strip():
        yield Problem(job.line, f"{label} has an empty command")
    elif (size := len(job.command.encode("utf-8", "surrogatepass"))) > MAX_COMMAND:
        yield Problem(
            job.line,
            f"{label}: the command is {size} bytes, more than the limit of {MAX_COMMAND}"
            f" (an eighth of the {MAX_FRAME}-byte message limit); run a script instead",
        )
    if not job.weekdays or not job.weekdays <= DAILY:
        yield Problem(job.line, f"{label}: a schedule is a non-empty set of weekdays 0 (Monday) to 6")
    timeout = job.timeout
    if timeout is not None and not (is_number(timeout) and math.isfinite(timeout) and timeout > 0):
        yield Problem(job.line, f"{label}: {TIMEOUT_RULE}, not {timeout!r}")
    if not isinstance(job.retries, int) or isinstance(job.retries, bool) or job.retries < 0:
        yield Problem(job.line, f"{label}: {RETRIES_RULE}, not {job.retries!r}")
    if not isinstance(job.priority, int) or isinstance(job.priority, bool) or not 0 <= job.priority <= 9:
        yield Problem(job.line, f"{label}: {PRIORITY_RULE}, not {job.priority!r}")
    yield from _deadline_problems(job.deadline, label, job.line)
    yield from conditions.problems(job)
    seen: dict[str, int | None] = {}
    for after in job.after:
        line = after.line or job.line
        if after.on not in ON_VALUES:
            yield Problem(line, f"{label}: on={after.on!r} is not one of {', '.join(ON_VALUES)}")
        if after.job == job.name:
            yield Problem(line, f"{label} is after itself")
        elif after.job in seen:
            yield Problem(line, f"{label} is after {after.job!r} twice{first_on(seen[after.job])}")
        elif after.job not in known:
            yield Problem(line, f"{label} is after unknown job {after.job!r}")
        seen.setdefault(after.job, after.line)
