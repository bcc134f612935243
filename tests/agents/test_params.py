"""Run parameters in the agent's state machine: every job checks its firing's Trigger against the
declarations its DEPLOY carried, fills in the defaults, and runs with them (``Run.params``, which
the runner gives the command as ``WFM_PARAM_*``); what does not fit is refused in one log line."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from agents.events import Delivered, Effect, Incoming, Run
from agents.journal import Journal
from agents.queries import answer_query
from agents.runner import SupervisorClient
from agents.state import Agent
from broker.language import Publication
from tests.agents.test_state import MONDAY, install, journaled, key, published, runs
from tests.signing import DEPLOYER, signed
from wfm.workflow import After, Job, Workflow, translate
from wfm.workflow.model import Param
from workflow_messages import PARAMS, decode_params, encode_params, job_status
from workflow_messages.operations import query

DECLARED = (Param("REGION", "string", "eu"), Param("LIMIT", "int", "10"), Param("DRY", "bool", "false"))
JOBS = (Job("A", "agentA", "echo $WFM_PARAM_REGION"), Job("B", "agentB", "true", after=(After("A"),)))
PLAN = translate(Workflow("PW", JOBS, params=DECLARED))
V = PLAN.version


def trigger(gid: str, params: object = None, at: float = 1.0) -> Publication:
    fields: dict[str, object] = {"applname": "PW", "GID": gid, "schedule": MONDAY}
    if params is not None:
        fields[PARAMS] = params if isinstance(params, str) else encode_params(params)  # type: ignore[arg-type]
    return DEPLOYER.signer.sign_publication(Publication("Trigger", fields), int(at * 1e6))  # type: ignore[arg-type]


def fire(agent: Agent, job: str, gid: str, params: object = None, now: float = 1.0) -> list[Effect]:
    return agent.handle(Delivered(key(agent, job, version=V), firing(job, gid, params, now)), now)


def firing(
    job: str, gid: str, params: object = None, now: float = 1.0, version: str = V
) -> tuple[Publication, ...]:
    """The Trigger, and the status of the job's predecessor (none for APPL_START)."""
    after = {"A": "APPL_START", "B": "A"}.get(job)
    pubs: tuple[Publication, ...] = (trigger(gid, params, now),)
    if after is not None:
        pubs += (job_status("PW", after, gid, "SUCCESS", "", version=version, agent="agentA"),)
    return pubs


def test_a_job_runs_with_the_triggers_parameters_checked_and_the_defaults_filled_in() -> None:
    agent = Agent("agentA")
    install(agent, PLAN)
    [begun] = published(fire(agent, "APPL_START", "g1", {"REGION": "us", "LIMIT": "3"}))
    assert begun["status"] == "SUCCESS"
    [run] = runs(fire(agent, "A", "g1", {"REGION": "us", "LIMIT": "3"}))
    assert decode_params(run.params) == {"REGION": "us", "LIMIT": "3", "DRY": "false"}
    assert agent.outcomes["PW", "g1"]["params"] == {"REGION": "us", "LIMIT": "3", "DRY": "false"}


def test_a_trigger_from_an_issuer_older_than_parameters_gets_the_defaults() -> None:
    agent = Agent("agentB")
    install(agent, PLAN)
    [run] = runs(fire(agent, "B", "g1"))
    assert decode_params(run.params) == {"REGION": "eu", "LIMIT": "10", "DRY": "false"}


def test_a_workflow_without_parameters_runs_as_before() -> None:
    plan = translate(Workflow("PW", JOBS))
    agent = Agent("agentA")
    install(agent, plan)
    go = firing("A", "g1", version=plan.version)
    [run] = runs(agent.handle(Delivered(key(agent, "A", version=plan.version), go), 1.0))
    assert run.params == "" and "params" not in agent.outcomes["PW", "g1"]


@pytest.mark.parametrize(
    ("params", "reason"),
    [
        ("{not json", "the trigger's params '{not json' is not JSON"),
        ('{"REGION": 7}', "the trigger's parameter REGION is 7, not text"),
        ({"COLOR": "red"}, "unknown parameter COLOR (declared: REGION, LIMIT, DRY)"),
        ({"LIMIT": "ten"}, "parameter LIMIT (int): 'ten' is not an integer"),
    ],
)
def test_parameters_that_do_not_fit_are_refused_in_one_line_and_the_agent_goes_on(
    params: object, reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    agent = Agent("agentA")
    install(agent, PLAN)
    with caplog.at_level(logging.WARNING, "agents.refusals"):
        assert fire(agent, "APPL_START", "g1", params) == []
        assert fire(agent, "A", "g1", params) == []
    assert agent.refused["firing"] == 2 and ("PW", "g1") not in agent.generations
    [line] = [r.getMessage() for r in caplog.records if r.name == "agents.refusals"]  # once a minute
    assert f"ignored a firing of PW APPL_START: the trigger's params do not fit version {V}: {reason}" in line
    assert "\n" not in line
    assert [p["status"] for p in published(fire(agent, "APPL_START", "g2", {"LIMIT": "1"}))] == ["SUCCESS"]


def test_a_required_parameter_a_trigger_lacks_is_refused() -> None:
    plan = translate(Workflow("PW", JOBS, params=(Param("DAY", "date"),)))
    agent = Agent("agentA")
    install(agent, plan)
    assert (
        agent.handle(Delivered(key(agent, "APPL_START", version=plan.version), (trigger("g1"),)), 1.0) == []
    )
    assert agent.refused["firing"] == 1


def test_the_parameters_survive_a_restart_and_are_answered_to_workflows_and_runs(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    agent = Agent("agentA")
    for publication in signed(PLAN.publications()):
        if publication["agentname"] == "agentA":
            journaled(agent, journal, Incoming(publication), 0.0)
    go = Delivered(key(agent, "A", version=V), firing("A", "g1", {"DRY": "yes"}))
    [run] = runs(journaled(agent, journal, go, 1.0))
    journal.close()
    restarted = Agent("agentA")
    reopened = Journal(tmp_path)
    reopened.recover(restarted)
    reopened.close()
    assert restarted.snapshot() == agent.snapshot()
    assert list(restarted.running.values()) == [run]  # the same parameters, as text
    restored = Agent("agentA")
    restored.restore(json.loads(json.dumps(agent.snapshot())))
    assert restored.deployments["PW", V].params == DECLARED

    reply = answer_query(restored, query("*", "WORKFLOWS", "r", {}))
    assert isinstance(reply, Publication)
    [deployment] = json.loads(str(reply["content"]))["deployments"]
    assert deployment["params"] == [
        {"name": "REGION", "type": "string", "default": "eu"},
        {"name": "LIMIT", "type": "int", "default": "10"},
        {"name": "DRY", "type": "bool", "default": "false"},
    ]
    reply = answer_query(restored, query("*", "RUNS", "r", {"workflow": "PW"}))
    assert isinstance(reply, Publication)
    [generation] = json.loads(str(reply["content"]))["generations"]
    assert generation["params"] == {"REGION": "eu", "LIMIT": "10", "DRY": "true"}


def test_a_run_without_parameters_from_an_older_journal_is_read() -> None:
    record = {"workflow": "W", "version": "v", "gid": "g", "job": "J", "attempt": 1, "command": "true"}
    run = Run(**record, cwd=None, date="2026-11-23", timeout=None)  # type: ignore[arg-type]
    assert run.params == ""


def test_the_runner_gives_the_command_its_parameters_as_wfm_param(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[dict[str, object]] = []

    class Link:
        async def ask(self, request: dict[str, object]) -> dict[str, object]:
            asked.append(request)
            return {"run": "lost"}

    async def connected() -> Link:
        return Link()

    client = SupervisorClient(tmp_path)
    monkeypatch.setattr(client, "_connected", connected)
    params = encode_params({"REGION": "it's", "DRY": "true"})
    run = Run("W", "v", "g1", "J", 1, "true", None, "2026-11-23", None, "", params)
    import asyncio

    assert asyncio.run(client.supervise(run, tmp_path)) is None
    env = asked[0]["env"]
    assert isinstance(env, dict)
    assert env["WFM_PARAM_REGION"] == "it's" and env["WFM_PARAM_DRY"] == "true"
    assert env["WFM_GID"] == "g1"
