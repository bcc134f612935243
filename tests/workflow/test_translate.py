"""The translator: message shapes of docs/workflows.md (Messages), per agent, versioned."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agents.envelope import Control, parse_deploy, registrations
from broker.language import parse_composite, parse_publication
from broker.routing.relations import fits
from tests.signing import DEPLOYER
from wfm.workflow import After, Job, Plan, Workflow, encode, translate
from wfm.workflow.translate import PART_LIMIT

W = "PAYROLL"
TRIGGER = "{[class,eq,Trigger],[applname,eq,PAYROLL],[GID,eq,$S$X]}"


def payroll() -> Workflow:
    return Workflow(
        W,
        (
            Job("JobA", "agentA", "extract"),
            Job("JobB", "agentB", "compute", timeout=600, retries=2, after=(After("JobA"),)),
            Job("JobC", "agentB", "bonus", frozenset({4}), after=(After("JobA"),)),
            Job("JobD", "agentC", "pay", after=(After("JobB"), After("JobC"))),
            Job("Alert", "agentC", "alert", after=(After("JobA", "failure"),)),
        ),
    )


def entries(plan: Plan, agent: str) -> list[dict[str, Any]]:
    """The job entries of ``agent``'s DEPLOY envelopes, in order."""
    return [e for env in plan.by_agent()[agent] for e in json.loads(env.content)["jobs"]]


def entry(plan: Plan, job: str) -> dict[str, Any]:
    (found,) = [e for agent in plan.by_agent() for e in entries(plan, agent) if e["job"] == job]
    return found


def condition(plan: Plan, job: str) -> str:
    """The composite the agent of ``job`` subscribes for it, derived as the agent derives it."""
    (found,) = [
        str(r.composite)
        for env in plan.envelopes
        for info in parse_deploy(Control(W, plan.version, env.command, env.job, env.content)).jobs
        if info.job == job
        for r in registrations(info)
        if r.composite is not None
    ]
    return found


def canonical(text: str) -> str:
    return str(parse_composite(text))


def ended(job: str) -> str:
    return (
        f"{{[class,eq,JOBSTATUS],[applname,eq,PAYROLL],[jobname,eq,{job}],[GID,eq,$S$X],"
        "[status,isPresent,'']}"
    )


@pytest.mark.parametrize(
    ("job", "expected"),
    [
        ("JobA", f"{{{ended('APPL_START')}&{TRIGGER}}}"),
        ("JobB", f"{{{ended('JobA')}&{TRIGGER}}}"),
        ("Alert", f"{{{ended('JobA')}&{TRIGGER}}}"),  # fires on any status: the agent decides on `on`
        ("JobD", f"{{{ended('JobB')}&{ended('JobC')}&{TRIGGER}}}"),
        ("APPL_START", TRIGGER),
        ("APPL_END", f"{{{ended('JobD')}&{ended('Alert')}}}"),  # the end jobs, as in the PADRES paper
    ],
)
def test_conditions(job: str, expected: str) -> None:
    assert condition(translate(payroll()), job) == canonical(expected)


def test_one_envelope_per_agent_coordinator_first() -> None:
    plan = translate(payroll())
    assert [(e.agent, e.command, e.job) for e in plan.envelopes] == [
        ("agentA", "DEPLOY", "*"),
        ("agentB", "DEPLOY", "*"),
        ("agentC", "DEPLOY", "*"),
    ]
    assert [e["job"] for e in entries(plan, "agentA")] == ["APPL_START", "JobA", "APPL_END"]
    assert [e["job"] for e in entries(plan, "agentC")] == ["JobD", "Alert"]


def test_contents() -> None:
    plan = translate(payroll())
    head = json.loads(plan.envelopes[1].content)
    assert (head["workflow"], head["version"]) == (W, plan.version)
    assert entry(plan, "JobC") == {
        "job": "JobC",
        "command": "bonus",
        "schedule": ["fri"],
        "timeout": None,
        "retries": 0,
        "after": [["JobA", "success"]],
        "agents": {"JobA": "agentA"},  # whose signature JobA's statuses must carry
    }
    assert entry(plan, "JobB")["timeout"] == 600
    assert entry(plan, "JobA")["agents"] == {"APPL_START": "agentA"}  # the coordinator's
    assert entry(plan, "JobD")["agents"] == {"JobB": "agentB", "JobC": "agentB"}
    assert entry(plan, "APPL_START") == {"job": "APPL_START", "virtual": True}
    end = entry(plan, "APPL_END")
    assert end["virtual"] is True
    assert end["graph"] == {
        "JobA": [["APPL_START", "success"]],
        "JobB": [["JobA", "success"]],
        "JobC": [["JobA", "success"]],
        "JobD": [["JobB", "success"], ["JobC", "success"]],
        "Alert": [["JobA", "failure"]],
    }
    assert end["agents"] == {"JobD": "agentC", "Alert": "agentC"}  # the end jobs'


def test_a_large_agent_is_split_into_parts_that_fit() -> None:
    big = "x" * (PART_LIMIT // 3)
    jobs = [Job("J0", "a", big)] + [Job(f"J{i}", "a", big, after=(After(f"J{i - 1}"),)) for i in range(1, 7)]
    plan = translate(Workflow(W, tuple(jobs)))
    assert len(plan.envelopes) == 4 and all(len(e.content) <= PART_LIMIT for e in plan.envelopes)
    numbers = [(data["part"], data["parts"]) for data in (json.loads(e.content) for e in plan.envelopes)]
    assert numbers == [(1, 4), (2, 4), (3, 4), (4, 4)]  # the agent takes the version once all are in
    assert [e["job"] for e in entries(plan, "a")] == ["APPL_START", *(f"J{i}" for i in range(7)), "APPL_END"]


def test_publications_parse_back_and_fit_the_deployer_advertisement() -> None:
    workflow = Workflow(W, (Job("JobA", "agentA", 'echo "it\'s" done\nnext line'),))
    plan = translate(workflow)
    advertisement = plan.deployer_advertisement()
    for envelope, publication in zip(plan.envelopes, plan.publications(), strict=True):
        assert parse_publication(str(publication)) == publication
        assert dict(publication) == {
            "class": "AGENT_CTL",
            "agentname": envelope.agent,
            "command": envelope.command,
            "content": envelope.content,
            "applname": W,
            "jobname": envelope.job,
            "version": plan.version,
        }
        sent = DEPLOYER.sign(publication)  # what the deployer publishes
        assert fits(sent, advertisement) and parse_publication(str(sent)) == sent
        assert set(sent) == {"class", *(p.attribute for p in advertisement.predicates)}
    assert advertisement["version"].value == plan.version
    assert entry(plan, "JobA")["command"] == 'echo "it\'s" done\nnext line'


def test_versions() -> None:
    same = Workflow(W, payroll().jobs, source="/elsewhere/payroll.xml")
    assert translate(payroll()).version == translate(same).version
    assert translate(payroll()) == translate(payroll())
    changed = Workflow(
        W, (*payroll().jobs[:4], Job("Alert", "agentC", "alert --loud", after=(After("JobA", "failure"),)))
    )
    assert translate(changed).version != translate(payroll()).version
    assert len(translate(payroll()).version) == 12
    jobs = payroll().jobs
    as_float = Workflow(
        W,
        (
            jobs[0],
            Job("JobB", "agentB", "compute", timeout=600.0, retries=2, after=(After("JobA"),)),
            *jobs[2:],
        ),
    )
    assert translate(as_float) == translate(payroll())


def test_cwd_is_the_directory_of_the_source() -> None:
    plan = translate(Workflow(W, payroll().jobs, source="/srv/flows/payroll.xml"))
    assert json.loads(plan.envelopes[0].content)["cwd"] == "/srv/flows"
    assert "cwd" not in json.loads(translate(payroll()).envelopes[0].content)


def test_encode_never_writes_a_single_quote() -> None:
    text = encode({"b": "it's", "a": 1})
    assert text == '{"a":1,"b":"it\\u0027s"}'
    assert json.loads(text) == {"a": 1, "b": "it's"}


def test_a_thousand_jobs() -> None:
    jobs = [Job("J0", "a0", "x")] + [
        Job(
            f"J{i}",
            f"a{i % 10}",
            "x",
            after=(After(f"J{i - 1}"),) + ((After(f"J{i // 3}", "always"),) if i > 1 else ()),
        )
        for i in range(1, 1000)
    ]
    plan = translate(Workflow(W, tuple(jobs)))
    assert len(plan.envelopes) == len(plan.by_agent()) == 10  # one per agent
