"""``<pool name slots keeper lease>`` and a job's ``pool``: checked at their lines, in the definition
(and the version) only when declared, carried to every agent in its DEPLOY content."""

from __future__ import annotations

import json

import pytest

from agents.envelope import Control, DeployPart, parse_deploy
from wfm.workflow import DefinitionError, Job, Workflow, loads, translate
from wfm.workflow.model import Pool
from workflow_messages.names import NAME_RULE

GOOD = (
    '<workflow name="W">\n'
    '<pool name="db" slots="2"/>\n'
    '<pool name="gpu" slots="1" keeper="b" lease="5"/>\n'
    '<job name="A" agent="a" pool="db"><command>x</command></job>\n'
    '<job name="B" agent="b" pool="db"><after job="A"/><command>y</command></job>\n'
    '<job name="C" agent="a" pool="gpu"><after job="A"/><command>z</command></job>\n'
    "</workflow>"
)


def test_pools_are_read_and_carried_to_every_agent() -> None:
    workflow = loads(GOOD)
    assert workflow.pools == (Pool("db", 2), Pool("gpu", 1, "b", 5.0))
    assert [job.pool for job in workflow.jobs] == ["db", "db", "gpu"]
    contents = [json.loads(e.content) for e in translate(workflow).envelopes]
    assert {e.agent for e in translate(workflow).envelopes} == {"a", "b"}
    for content in contents:
        assert content["pools"] == [
            {"pool": "db", "slots": 2, "keeper": "a", "lease": 60.0, "jobs": {"A": "a", "B": "b"}},
            {"pool": "gpu", "slots": 1, "keeper": "b", "lease": 5.0, "jobs": {"C": "a"}},
        ]
    entries = {entry["job"]: entry for content in contents for entry in content["jobs"]}
    assert (entries["A"]["pool"], entries["C"]["pool"]) == ("db", "gpu")


def test_a_definition_without_pools_keeps_its_version() -> None:
    plain = loads(GOOD.replace(' pool="db"', "").replace(' pool="gpu"', ""))
    assert plain.pools and plain.version() != Workflow("W", plain.jobs).version()  # declared: part of it
    bare = Workflow("W", plain.jobs)
    assert "pool" not in bare.jobs[0].definition()
    assert "pools" not in json.loads(translate(bare).envelopes[0].content)
    assert loads(GOOD).version() != plain.version()
    assert loads(GOOD.replace('slots="2"', 'slots="3"')).version() != loads(GOOD).version()


def test_bad_pools_are_reported_at_their_lines() -> None:
    bad = (
        GOOD.replace('slots="2"', 'slots="0"')
        .replace('keeper="b" lease="5"', 'keeper="z" lease="soon"')
        .replace('name="C" agent="a" pool="gpu"', 'name="C" agent="a" pool="tpu"')
        .replace('<pool name="db"', '<pool name="1db" slots="x"/>\n<pool name="db"')
    )
    with pytest.raises(DefinitionError) as error:
        loads(bad)
    assert [(p.line, p.message) for p in error.value.problems] == [
        (2, "pool '1db': slots must be an integer from 1 to 1000000, not 'x'"),
        (
            2,
            f"pool name '1db' is not a valid name ({NAME_RULE})",
        ),
        (3, "pool 'db': slots must be an integer from 1 to 1000000, not 0"),
        (4, "pool 'gpu': lease must be a number of seconds from 1 to 86400, not 'soon'"),
        (4, "pool 'gpu': keeper 'z' runs no job of the workflow (one of a, b)"),
        (7, "job 'C': unknown pool 'tpu' (declared: 1db, db, gpu)"),
    ]
    with pytest.raises(DefinitionError, match="duplicate pool 'db'"):
        Workflow("W", (Job("A", "a", "x", pool="db"),), pools=(Pool("db", 1), Pool("db", 2)))
    with pytest.raises(DefinitionError, match="unexpected <pool>"):
        loads(
            GOOD.replace('<pool name="gpu" slots="1" keeper="b" lease="5"/>\n', "").replace(
                "</workflow>", '<pool name="gpu" slots="1"/></workflow>'
            )
        )


def test_an_agent_reads_the_pools_refuses_bad_ones_and_reads_old_contents() -> None:
    plan = translate(loads(GOOD))
    content = json.loads(plan.envelopes[0].content)

    def deploy() -> DeployPart:
        return parse_deploy(Control(plan.workflow, plan.version, "DEPLOY", "*", json.dumps(content)))

    part = deploy()
    assert [(d.name, d.slots, d.keeper, d.lease) for d in part.pools] == [
        ("db", 2, "a", 60.0),
        ("gpu", 1, "b", 5.0),
    ]
    assert {info.job: info.pool for info in part.jobs} == {
        "APPL_START": None,
        "A": "db",
        "C": "gpu",
        "APPL_END": None,
    }
    content["pools"][0]["slots"] = 0
    with pytest.raises(ValueError, match="DEPLOY pool 'db': slots must be an integer"):
        deploy()
    content["pools"][0]["slots"] = 2
    content["jobs"][1]["pool"] = "tpu"
    with pytest.raises(ValueError, match="DEPLOY job 'A': pool 'tpu' is not declared"):
        deploy()
    del content["pools"]  # a deployer older than pools, with no pool on its jobs
    del content["jobs"][1]["pool"], content["jobs"][2]["pool"]
    assert deploy().pools == () and deploy().jobs[1].pool is None
