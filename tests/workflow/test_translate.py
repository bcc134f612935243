"""The translator: message shapes of INTERFACE.md section 3, per agent, versioned."""

from __future__ import annotations

import json

import pytest

from broker.language import parse_composite, parse_filter, parse_publication
from broker.routing.relations import fits
from tests.signing import DEPLOYER
from wfm.workflow import After, Job, Plan, Workflow, encode, translate

W = "PAYROLL"
TRIGGER = "{[class,eq,Trigger],[applname,eq,PAYROLL],[GID,eq,$S$X]}"


def status(job: str, value: str) -> str:
    return (
        f"{{[class,eq,JOBSTATUS],[applname,eq,PAYROLL],[jobname,eq,{job}],[GID,eq,$S$X],[status,eq,{value}]}}"
    )


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


def content(plan: Plan, job: str, command: str) -> str:
    (found,) = [e.content for e in plan.envelopes if e.job == job and e.command == command]
    return found


def composite(plan: Plan, job: str) -> str:
    return json.loads(content(plan, job, "COMPOSITESUBSCRIBE"))["composite"]


def canonical(text: str) -> str:
    return str(parse_composite(text))


def test_composite_of_the_issue_example() -> None:
    expected = (
        "{{{[class,eq,JOBSTATUS],[applname,eq,PAYROLL],[jobname,eq,JobA],[GID,eq,$S$X],[status,eq,SUCCESS]}"
        "||{[class,eq,JOBSTATUS],[applname,eq,PAYROLL],[jobname,eq,JobA],[GID,eq,$S$X],[status,eq,NORUN]}}"
        "&{[class,eq,Trigger],[applname,eq,PAYROLL],[GID,eq,$S$X]}}"
    )
    assert composite(translate(payroll()), "JobB") == canonical(expected)


@pytest.mark.parametrize(
    ("job", "expected"),
    [
        ("JobA", f"{{{{{status('APPL_START', 'SUCCESS')}||{status('APPL_START', 'NORUN')}}}&{TRIGGER}}}"),
        ("Alert", f"{{{status('JobA', 'FAILURE')}&{TRIGGER}}}"),
        (
            "JobD",
            f"{{{{{status('JobB', 'SUCCESS')}||{status('JobB', 'NORUN')}}}"
            f"&{{{status('JobC', 'SUCCESS')}||{status('JobC', 'NORUN')}}}&{TRIGGER}}}",
        ),
        ("APPL_START", TRIGGER),
    ],
)
def test_composite_shapes(job: str, expected: str) -> None:
    assert composite(translate(payroll()), job) == canonical(expected)


def test_on_always_accepts_every_status() -> None:
    workflow = Workflow(W, (Job("JobA", "a", "x"), Job("R", "a", "y", after=(After("JobA", "always"),))))
    ok = "||".join(status("JobA", s) for s in ("SUCCESS", "NORUN", "FAILURE"))
    assert composite(translate(workflow), "R") == canonical(f"{{{{{ok}}}&{TRIGGER}}}")


def test_envelopes_per_agent_in_order() -> None:
    plan = translate(payroll())
    cleanup = ("SUBSCRIBE", "APPL_END")
    per_job = ["ADVERTISE", "JOBINFO", "COMPOSITESUBSCRIBE"]
    assert {agent: [(e.command, e.job) for e in group] for agent, group in plan.by_agent().items()} == {
        "agentA": [
            cleanup,
            *[(c, "APPL_START") for c in per_job],
            *[(c, "JobA") for c in per_job],
            ("ADVERTISE", "APPL_END"),
            ("JOBINFO", "APPL_END"),
            ("SUBSCRIBE", "APPL_END"),
        ],
        "agentB": [cleanup, *[(c, "JobB") for c in per_job], *[(c, "JobC") for c in per_job]],
        "agentC": [cleanup, *[(c, "JobD") for c in per_job], *[(c, "Alert") for c in per_job]],
    }


def test_contents() -> None:
    plan = translate(payroll())
    assert parse_filter(content(plan, "JobB", "ADVERTISE")) == parse_filter(
        "[class,eq,JOBSTATUS],[applname,eq,PAYROLL],[jobname,eq,JobB],[GID,isPresent,''],"
        "[status,isPresent,''],[detail,isPresent,''],[version,isPresent,''],[agentname,isPresent,''],"
        "[attempt,isPresent,0],[started,isPresent,0],[duration,isPresent,0]"
    )
    assert json.loads(content(plan, "JobC", "JOBINFO")) == {
        "workflow": W,
        "version": plan.version,
        "job": "JobC",
        "command": "bonus",
        "schedule": ["fri"],
        "timeout": None,
        "retries": 0,
        "after": [["JobA", "success"]],
    }
    assert json.loads(content(plan, "JobB", "JOBINFO"))["timeout"] == 600
    subscription = json.loads(content(plan, "JobB", "COMPOSITESUBSCRIBE"))
    assert subscription["job"] == "JobB"
    assert parse_filter(subscription["clear"], allow_variables=True) == parse_filter(
        "[class,eq,JOBSTATUS],[applname,eq,PAYROLL],[jobname,eq,APPL_END],[GID,eq,$S$X]", allow_variables=True
    )
    cleanups = [e for e in plan.envelopes if e.command == "SUBSCRIBE" and e.job == "APPL_END"]
    assert {e.content for e in cleanups} == {
        str(
            parse_filter(
                "[class,eq,JOBSTATUS],[applname,eq,PAYROLL],[jobname,eq,APPL_END],[GID,isPresent,'']"
            )
        ),
        str(parse_filter("[class,eq,JOBSTATUS],[applname,eq,PAYROLL],[GID,isPresent,'']")),
    }
    assert json.loads(content(plan, "APPL_START", "JOBINFO")) == {
        "workflow": W,
        "version": plan.version,
        "job": "APPL_START",
        "virtual": True,
    }
    end = json.loads(content(plan, "APPL_END", "JOBINFO"))
    assert end["virtual"] is True
    assert end["graph"] == {
        "JobA": [["APPL_START", "success"]],
        "JobB": [["JobA", "success"]],
        "JobC": [["JobA", "success"]],
        "JobD": [["JobB", "success"], ["JobC", "success"]],
        "Alert": [["JobA", "failure"]],
    }


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
    info = json.loads(content(plan, "JobA", "JOBINFO"))
    assert info["command"] == 'echo "it\'s" done\nnext line'


def test_every_composite_text_is_canonical() -> None:
    for envelope in translate(payroll()).envelopes:
        if envelope.command == "COMPOSITESUBSCRIBE":
            text = json.loads(envelope.content)["composite"]
            assert str(parse_composite(text)) == text


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
    assert json.loads(content(plan, "JobA", "JOBINFO"))["cwd"] == "/srv/flows"
    assert "cwd" not in json.loads(content(translate(payroll()), "JobA", "JOBINFO"))


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
    assert len(plan.envelopes) == 3 * 1000 + 10 + 6  # jobs, one cleanup per agent, the virtual jobs
    assert len(plan.by_agent()) == 10
