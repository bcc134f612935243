"""``Session.hold`` and ``Session.approve`` (what ``wfm hold``, ``release``, ``approve`` and the
dashboard send, to whom, and what they refuse before sending), and the commands' own checks: no
broker, the agents' answers made up."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from click.testing import CliRunner

from broker.errors import RemoteError
from wfm.cli import cli
from wfm.operations import Deployed, NoReply, Session, UnknownWorkflow

GRAPH = {
    "Build": [["APPL_START", "success"]],
    "SignOff": [["Build", "success"]],
    "Ship": [["SignOff", "success"]],
}
JOBS = {
    "Build": {"agent": "agentA", "command": "make"},
    "SignOff": {"agent": "agentB", "command": "", "approval": ["operator"]},
    "Ship": {"agent": "agentB", "command": "ship"},
}


def session(
    monkeypatch: pytest.MonkeyPatch, answered: tuple[str, ...] = tuple(JOBS)
) -> tuple[Session, list[tuple[str, dict[str, Any], list[str]]]]:
    """A session whose agents deployed SHIP (agentA: Build; agentB: SignOff, an approval step, and
    Ship; agentC still holds an older version), the jobs ``answered`` of those whose agent
    answered; and the operations it sends: (command, content, agents)."""
    deployed = Deployed(
        "SHIP",
        "v2",
        {"v1", "v2"},
        {"agentA": ["Build"], "agentB": ["Ship", "SignOff"]},
        {job: info for job, info in JOBS.items() if job in answered},
        GRAPH,
        "agentA",
        {"agentA": {"v2"}, "agentB": {"v2"}, "agentC": {"v1"}},
    )
    sent: list[tuple[str, dict[str, Any], list[str]]] = []

    async def operate(workflow: str, command: str, content: dict[str, Any], agents: Any, sign: Any) -> Any:
        sent.append((command, content, sorted(agents)))
        return {agent: ("OK", "done") for agent in agents}

    the = Session(None, None, 1.0)  # type: ignore[arg-type]
    monkeypatch.setattr(the, "deployed", lambda workflow: asyncio.sleep(0, deployed))
    monkeypatch.setattr(the, "operate", operate)
    monkeypatch.setattr(the, "advertise_operations", lambda workflow: asyncio.sleep(0))
    return the, sent


def test_a_hold_goes_to_every_agent_of_the_workflow_and_names_a_job_it_has(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    the, sent = session(monkeypatch)
    acks = asyncio.run(the.hold("SHIP", lambda p: p))
    assert sorted(acks) == ["agentA", "agentB", "agentC"]  # agentC: generations on v1 still run there
    asyncio.run(the.hold("SHIP", lambda p: p, "Ship", "g1", release=True))
    with pytest.raises(UnknownWorkflow, match=r"^SHIP has no job Shp \(jobs: Build, Ship, SignOff\)$"):
        asyncio.run(the.hold("SHIP", lambda p: p, "Shp"))
    everyone = ["agentA", "agentB", "agentC"]
    assert sent == [
        ("HOLD", {"job": "*", "gid": "*"}, everyone),
        ("RELEASE", {"job": "Ship", "gid": "g1"}, everyone),
    ]


def test_an_approval_goes_to_the_step_s_agent_and_only_for_an_approval_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    the, sent = session(monkeypatch)
    assert asyncio.run(the.approve("SHIP", "SignOff", "g1", lambda p: p, False, "no")) == (
        "agentB",
        "OK",
        "done",
    )
    assert sent == [
        ("APPROVE", {"gid": "g1", "job": "SignOff", "verdict": "reject", "comment": "no"}, ["agentB"])
    ]
    with pytest.raises(UnknownWorkflow, match=r"^Ship of SHIP is not an approval step: it runs its command$"):
        asyncio.run(the.approve("SHIP", "Ship", "g1", lambda p: p))
    with pytest.raises(UnknownWorkflow, match=r"^SHIP has no job Nope \(jobs: Build, Ship, SignOff\)$"):
        asyncio.run(the.approve("SHIP", "Nope", "g1", lambda p: p))
    silent, nothing = session(monkeypatch, answered=("Build",))  # agentB did not answer
    with pytest.raises(NoReply, match=r"^no answer within 1 s from the agent of SHIP's SignOff$"):
        asyncio.run(silent.approve("SHIP", "SignOff", "g1", lambda p: p))
    assert len(sent) == 1 and nothing == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["approve", "SHIP", "SignOff", "g1", "--comment", "x" * 501], "at most 500 characters, not 501"),
        (["approve", "SHIP", "a b", "g1"], "job name 'a b' is not a valid name"),
        (["approve", "SHIP", "SignOff", "../g1"], "invalid gid '../g1'"),
        (["hold", "SHIP", "--gid", "../g1"], "invalid gid '../g1'"),
        (["release", "SHIP", "--job", "a b"], "job name 'a b' is not a valid name"),
    ],
)
def test_bad_arguments_are_usage_errors_and_send_nothing(args: list[str], message: str) -> None:
    done = CliRunner().invoke(cli, [*args, "--broker", "socket://127.0.0.1:1/B1"])
    assert done.exit_code == 2 and message in done.output


def test_wfm_workflows_says_what_is_on_hold(monkeypatch: pytest.MonkeyPatch) -> None:
    deployment = {"workflow": "SHIP", "version": "v2", "current": True, "coordinator": False, "jobs": {}}
    answers = {
        "agentA": {
            "deployments": [{**deployment, "coordinator": True, "graph": GRAPH, "holds": [["Ship", "*"]]}]
        },
        "agentB": {"deployments": [{**deployment, "holds": [["*", "g1"], ["Ship", "*"]]}]},
        "agentC": {"deployments": [deployment]},  # an agent older than holds
    }
    the = Session(None, None, 1.0)  # type: ignore[arg-type]
    monkeypatch.setattr(the, "ask", lambda *_, **__: asyncio.sleep(0, answers))
    [ship], _ = asyncio.run(the.workflows())
    assert ship.record()["holds"] == [{"job": "*", "gid": "g1"}, {"job": "Ship", "gid": "*"}]
    assert ship.on_hold() == ["every job in g1", "Ship"]


def test_an_approval_step_has_no_log_and_wfm_logs_says_how_it_ended(monkeypatch: pytest.MonkeyPatch) -> None:
    the, _ = session(monkeypatch)
    ended = {"status": "SUCCESS", "detail": "approved by operator alice: ok", "attempt": 1}
    runs = {"generations": [{"gid": "g1", "jobs": {"SignOff": ended}}]}

    async def ask(kind: str, content: dict[str, Any], *_: object) -> dict[str, Any]:
        if kind == "LOGS":
            raise RemoteError(f"agentB: no log of {content['job']} in g1")
        return {"agentB": runs}

    monkeypatch.setattr(the, "ask", ask)
    found = asyncio.run(the.logs("SHIP", "SignOff", "g1"))
    assert (found["status"], found["detail"], found["text"]) == (
        "SUCCESS",
        "approved by operator alice: ok",
        "",
    )
    with pytest.raises(RemoteError, match="no log of Ship"):  # a job that runs a command: no log is an error
        runs["generations"][0]["jobs"] = {"Ship": ended}
        asyncio.run(the.logs("SHIP", "Ship", "g1"))
