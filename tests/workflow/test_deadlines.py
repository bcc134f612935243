"""The ``deadline`` attribute of ``<job>`` and ``<workflow>``: checked at its line, in the
definition (and the version) only when set, carried to the agents in the DEPLOY content."""

from __future__ import annotations

import json

import pytest

from agents.envelope import Control, DeployPart, parse_deploy
from wfm.workflow import DefinitionError, Job, Workflow, loads, translate

GOOD = (
    '<workflow name="W" deadline="06:00">\n'
    '<job name="A" agent="a" deadline="30m"><command>x</command></job>\n'
    '<job name="B" agent="b"><after job="A"/><command>y</command></job>\n'
    "</workflow>"
)


def test_deadlines_are_read_and_carried_to_the_agents() -> None:
    workflow = loads(GOOD)
    assert workflow.deadline == "06:00" and [j.deadline for j in workflow.jobs] == ["30m", None]
    contents = [json.loads(e.content) for e in translate(workflow).envelopes]
    entries = {entry["job"]: entry for content in contents for entry in content["jobs"]}
    assert entries["A"]["deadline"] == "30m" and "deadline" not in entries["B"]
    assert entries["APPL_END"]["deadline"] == "06:00"  # the generation's: its coordinator watches it


def test_a_definition_without_deadlines_keeps_its_version() -> None:
    plain = loads(GOOD.replace(' deadline="06:00"', "").replace(' deadline="30m"', ""))
    assert plain.version() == Workflow("W", plain.jobs).version()
    assert loads(GOOD).version() != plain.version()
    assert "deadline" not in plain.jobs[0].definition()


def test_bad_deadlines_are_reported_at_their_lines() -> None:
    bad = GOOD.replace('"06:00"', '"6am"').replace('"30m"', '"soon"')
    with pytest.raises(DefinitionError) as error:
        loads(bad)
    rule = "deadline must be a duration (30m, 2h, 90s) or a time of day HH:MM"
    assert [(p.line, p.message) for p in error.value.problems] == [
        (1, f"workflow 'W': {rule}, not '6am'"),
        (2, f"job 'A': {rule}, not 'soon'"),
    ]
    with pytest.raises(DefinitionError, match="job 'A': deadline must be"):
        Workflow("W", (Job("A", "a", "x", deadline="25:00"),))


def test_an_agent_refuses_a_deadline_it_cannot_read_and_reads_old_contents() -> None:
    plan = translate(loads(GOOD))
    content = json.loads(plan.envelopes[0].content)

    def deploy() -> DeployPart:
        return parse_deploy(Control(plan.workflow, plan.version, "DEPLOY", "*", json.dumps(content)))

    deadlines = {info.job: info.deadline for info in deploy().jobs}
    assert deadlines == {"APPL_START": None, "A": "30m", "APPL_END": "06:00"}
    content["jobs"][1]["deadline"] = "later"
    with pytest.raises(ValueError, match="DEPLOY job 'A': deadline must be"):
        deploy()
    del content["jobs"][1]["deadline"]  # a deployer older than deadlines
    assert deploy().jobs[1].deadline is None
