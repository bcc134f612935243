"""Standby agents in the definition: ``standby`` and ``takeover`` read, checked at their lines,
part of the version only when given, and carried to the job's agent and to each standby."""

from __future__ import annotations

import json

import pytest

from agents.envelope import Control, parse_deploy
from wfm.workflow import DefinitionError, Job, Workflow, loads, translate
from workflow_messages.names import NAME_RULE
from workflow_messages.standby import DEFAULT_TAKEOVER, parse_takeover

GOOD = """<workflow name="W">
  <job name="A" agent="a"><command>a</command></job>
  <job name="B" agent="b" standby="c d" takeover="90s"><after job="A"/><command>b</command></job>
  <job name="C" agent="b" standby="c"><after job="B"/><command>c</command></job>
</workflow>"""


def test_standbys_are_read_and_sent_to_the_job_s_agent_and_each_standby() -> None:
    workflow = loads(GOOD)
    b, c = workflow.jobs[1], workflow.jobs[2]
    assert (b.standby, b.takeover_seconds(), c.takeover_seconds()) == (("c", "d"), 90.0, DEFAULT_TAKEOVER)
    plan = translate(workflow)
    contents = {e.agent: json.loads(e.content) for e in plan.envelopes}
    assert list(contents) == ["a", "b", "c", "d"]  # the standbys after the job's agents
    mine = {job["job"]: job for job in contents["b"]["jobs"]}
    assert mine["B"]["standby"] == ["c", "d"] and mine["B"]["takeover"] == 90.0 and "primary" not in mine["B"]
    copies = {job["job"]: job for job in contents["c"]["jobs"]}
    assert set(copies) == {"B", "C"} and copies["B"]["primary"] == "b"
    assert [job["job"] for job in contents["d"]["jobs"]] == ["B"]
    assert mine["C"]["agents"] == {"B": "b c d"}  # B's statuses: signed by b, or a standby of it
    for envelope in plan.envelopes:  # every agent reads its part
        control = Control(plan.workflow, plan.version, "DEPLOY", "*", envelope.content)
        part = parse_deploy(control)
        if envelope.agent == "d":
            assert [(i.job, i.primary, i.standby, i.takeover) for i in part.jobs] == [
                ("B", "b", ("c", "d"), 90.0)
            ]


def test_a_definition_without_standbys_keeps_its_version() -> None:
    plain = Workflow("W", (Job("A", "a", "x"),))
    assert "standby" not in plain.jobs[0].definition()
    assert plain.version() == Workflow("W", (Job("A", "a", "x", standby=()),)).version()
    assert loads(GOOD).version() != loads(GOOD.replace(' takeover="90s"', "")).version()


def test_bad_standbys_are_reported_at_their_lines() -> None:
    bad = GOOD.replace('standby="c d" takeover="90s"', 'standby="b c c 9x" takeover="1s"').replace(
        '<job name="A" agent="a">', '<job name="A" agent="a" takeover="5m">'
    )
    with pytest.raises(DefinitionError) as error:
        loads(bad)
    assert [(p.line, p.message) for p in error.value.problems] == [
        (2, "job 'A': takeover='5m' needs standby=\"AGENT ...\""),
        (3, "job 'B': standby 'b' is the job's own agent"),
        (3, "job 'B': standby 'c' is named twice"),
        (
            3,
            f"job 'B': standby '9x' is not a valid name ({NAME_RULE})",
        ),
        (3, "job 'B': takeover must be a duration from 2 s to 7 days with its unit (30s, 10m, 2h), not '1s'"),
    ]
    with pytest.raises(DefinitionError, match="a job in a pool"):
        loads(
            GOOD.replace('<workflow name="W">', '<workflow name="W"><pool name="p" slots="1"/>').replace(
                'standby="c d"', 'standby="c d" pool="p"'
            )
        )


@pytest.mark.parametrize("text", ["0s", "1s", "2", "8d", " 5m", "soon", ""])
def test_a_takeover_is_a_duration_of_a_few_seconds_to_a_week(text: str) -> None:
    with pytest.raises(ValueError, match="takeover must be a duration"):
        parse_takeover(text)
    assert parse_takeover("2s") == 2.0 and parse_takeover("10m") == 600.0
