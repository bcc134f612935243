"""Approval steps in a definition: ``<approval roles="..."/>`` instead of a ``<command>``, its
problems at their lines, and what the agents are sent (read by the same rule)."""

from __future__ import annotations

import json

import pytest

from agents.envelope import Control, DeployPart, parse_deploy
from wfm.workflow import DefinitionError, Job, Workflow, loads, translate

GOOD = (
    '<workflow name="W">\n'
    '<job name="A" agent="a"><command>x</command></job>\n'
    '<job name="B" agent="b" timeout="3600"><after job="A"/>\n'
    '  <approval roles="operator"/></job>\n'
    '<job name="C" agent="b"><after job="B"/><approval/></job>\n'
    "</workflow>"
)


def problems(document: str) -> list[tuple[int | None, str]]:
    with pytest.raises(DefinitionError) as error:
        loads(document)
    return [(p.line, p.message) for p in error.value.problems]


def test_an_approval_step_is_read_with_its_roles_and_has_no_command() -> None:
    workflow = loads(GOOD)
    b, c = workflow.jobs[1], workflow.jobs[2]
    assert (b.command, b.approval, b.timeout) == ("", ("operator",), 3600.0)
    assert c.approval == ("deployer", "operator")  # without roles: whoever may operate
    assert "approval" not in workflow.jobs[0].definition()  # a job without one keeps its version


def test_bad_approval_steps_are_reported_at_their_lines() -> None:
    rule = "approval roles are a comma list of the roles that may approve: operator, deployer"
    assert problems(
        '<workflow name="W">\n'
        '<job name="A" agent="a" retries="2">\n'
        '<approval roles="operator,boss"/></job>\n'
        "</workflow>"
    ) == [
        (2, "job 'A' is an approval step: it has no retries"),
        (3, f"job 'A': {rule}, not 'boss'"),
    ]
    assert problems(
        '<workflow name="W">\n<job name="A" agent="a">\n<command>x</command><approval/></job></workflow>'
    ) == [
        (3, "unexpected <approval> (a job holds its <after> elements, then one <command> or one <approval>)")
    ]
    with pytest.raises(DefinitionError, match="job 'A' is an approval step: it has no command"):
        Workflow("W", (Job("A", "a", "x", approval=("operator",)),))
    with pytest.raises(DefinitionError, match="job 'A': approval roles are"):
        Workflow("W", (Job("A", "a", "", approval=("root",)),))


def test_agents_are_sent_the_roles_and_an_empty_command_and_refuse_what_they_cannot_read() -> None:
    plan = translate(loads(GOOD))
    [content] = [json.loads(e.content) for e in plan.envelopes if e.agent == "b"]

    def deploy() -> DeployPart:
        return parse_deploy(Control(plan.workflow, plan.version, "DEPLOY", "*", json.dumps(content)))

    assert {info.job: (info.command, info.approval) for info in deploy().jobs} == {
        "B": ("", ("operator",)),
        "C": ("", ("deployer", "operator")),
    }
    content["jobs"][0]["approval"] = ["root"]
    with pytest.raises(ValueError, match=r"DEPLOY job 'B': approval roles are .* not 'root'"):
        deploy()
    content["jobs"][0]["approval"] = ["operator"]
    content["jobs"][0]["command"] = "rm -rf /"
    with pytest.raises(ValueError, match="an empty one for an approval step"):
        deploy()
    del content["jobs"][0]["approval"]  # a job of an older deployer: an ordinary command
    assert deploy().jobs[0].command == "rm -rf /" and deploy().jobs[0].approval == ()
    content["jobs"][0]["command"] = ""
    with pytest.raises(ValueError, match="JOBINFO needs a non-empty command"):
        deploy()
