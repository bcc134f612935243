"""Holds and approval steps in the agent's state machine (:mod:`agents.holds`,
:mod:`agents.approvals`): no sockets, no processes, time passed in."""

from __future__ import annotations

import json
import time
from pathlib import Path

from agents.events import Delivered, Effect, Event, Finished, Incoming, Result, TimePassed
from agents.journal import Journal
from agents.queries import answer_query
from agents.service import AgentService
from agents.state import Agent
from agents.trust import Trust
from broker.language import Publication
from broker.transport.uri import BrokerURI
from tests.agents.test_operations import ack_of, operate
from tests.agents.test_state import (
    FRIDAY,
    MONDAY,
    end_here,
    fire,
    install,
    key,
    published,
    runs,
    status,
    trigger,
)
from tests.agents.test_trust import CA
from tests.signing import DEPLOYER, signed_trigger
from tests.wfm.test_metrics import at, scrape
from wfm.metrics.families import agent_metrics
from wfm.signing import Deployer
from wfm.workflow import loads, translate
from workflow_messages import job_status
from workflow_messages.operations import APPROVE, CANCEL, HOLD, RELEASE, decode_content, operation, query

SHIP = translate(
    loads(
        """<workflow name="SHIP">
             <job name="Build" agent="agentA"><command>make</command></job>
             <job name="SignOff" agent="agentA" timeout="600">
               <after job="Build"/><approval roles="operator"/>
             </job>
             <job name="Ship" agent="agentA"><after job="SignOff"/><command>ship</command></job>
           </workflow>"""
    )
)


def runs_answer(agent: Agent, workflow: str = "PAYROLL") -> dict[str, dict[str, str]]:
    """gid -> the busy jobs (queued, running, held, awaiting) of a RUNS answer."""
    answered = answer_query(agent, query(agent.name, "RUNS", "r1", {"workflow": workflow}))
    assert isinstance(answered, Publication) and answered["result"] == "OK"
    return {g["gid"]: g["busy"] for g in decode_content(answered["content"])["generations"]}


def restarted(agent: Agent) -> Agent:
    again = Agent(agent.name, trust=agent.trust)
    again.restore(json.loads(json.dumps(agent.snapshot())))
    assert again.snapshot() == agent.snapshot()
    return again


# holds -------------------------------------------------------------------------------------------


def test_a_held_job_whose_condition_fires_waits_and_runs_once_when_released() -> None:
    agent = Agent("agentB")
    install(agent)
    assert ack_of(operate(agent, HOLD, job="JobB")) == (
        "OK",
        "job JobB of PAYROLL held: 0 queued here wait, 0 running go on",
    )
    assert ack_of(operate(agent, HOLD, job="JobB"))[0] == "UNCHANGED"
    assert runs(fire(agent, "JobB", "g1", "JobA")) == []
    assert runs_answer(agent) == {"g1": {"JobB": "held"}}
    assert agent.next_wakeup() is None
    assert runs(agent.handle(TimePassed(), 100.0)) == []
    assert fire(agent, "JobB", "g1", "JobA") == []  # delivered again: a duplicate
    again = restarted(agent)  # the hold and the held run are in the snapshot
    for each in (agent, again):
        effects = operate(each, RELEASE, job="JobB")
        [run] = runs(effects)
        assert (run.job, run.gid) == ("JobB", "g1")
        assert ack_of(effects) == ("OK", "job JobB of PAYROLL released: 1 started")
        assert ack_of(operate(each, RELEASE, job="JobB")) == ("UNCHANGED", "job JobB of PAYROLL was not held")
        assert runs_answer(each) == {"g1": {"JobB": "running"}}
        assert runs(fire(each, "JobB", "g1", "JobA")) == []


def test_released_before_its_condition_fires_a_job_runs_at_once() -> None:
    agent = Agent("agentB")
    install(agent)
    operate(agent, HOLD, job="JobB")
    operate(agent, RELEASE, job="JobB")
    assert len(runs(fire(agent, "JobB", "g1", "JobA"))) == 1


def test_a_held_workflow_holds_every_job_of_every_generation_and_a_gid_hold_only_its_own() -> None:
    agent = Agent("agentB")
    install(agent)
    assert ack_of(operate(agent, HOLD, gid="g1"))[1].startswith("every job of PAYROLL in generation g1 held")
    assert runs(fire(agent, "JobB", "g1", "JobA")) == []
    assert len(runs(fire(agent, "JobB", "g2", "JobA"))) == 1  # another generation runs
    operate(agent, HOLD)  # the whole workflow, new generations too
    for gid in ("g3", "g4"):
        assert (
            runs(
                agent.handle(Delivered(key(agent, "JobC"), (trigger(gid, FRIDAY), status("JobA", gid))), 1.0)
            )
            == []
        )
    assert runs_answer(agent)["g3"] == {"JobC": "held"}
    # releasing one job leaves the workflow held, and says so
    result, detail = ack_of(operate(agent, RELEASE, job="JobC"))
    assert result == "UNCHANGED" and "still held: every job of PAYROLL" in detail
    result, detail = ack_of(operate(agent, RELEASE))
    assert result == "OK" and detail.startswith("every job of PAYROLL released: 2 started")
    assert "still held: every job of PAYROLL in generation g1; 1 queued here still wait)" in detail
    [g1] = runs(operate(agent, RELEASE, gid="g1"))
    assert g1.gid == "g1"


def test_the_holds_of_a_generation_go_with_it() -> None:
    agent = Agent("agentB")
    install(agent)
    operate(agent, HOLD, gid="g1")
    operate(agent, HOLD, job="JobB")
    end_here(agent, "g1", 2.0)  # every job of agentB published in g1: over here
    assert agent.holds == {("PAYROLL", "JobB", "*")}
    assert ack_of(operate(agent, HOLD, gid="g1", now=3.0)) == (
        "UNCHANGED",
        "generation g1 is over here: nothing to hold",
    )
    assert agent.holds == {("PAYROLL", "JobB", "*")}


def test_a_hold_leaves_a_running_job_alone_and_keeps_its_retry_from_starting() -> None:
    agent = Agent("agentB", backoff=1.0)
    install(agent)
    [run] = runs(fire(agent, "JobB", "g1", "JobA"))  # JobB has retries="2"
    assert ack_of(operate(agent, HOLD, job="JobB"))[1].endswith("0 queued here wait, 1 running go on")
    assert runs(agent.handle(Finished(run, Result(False, "exit 1", 1.0, 1.0)), 6.0)) == []
    assert agent.next_wakeup() is None  # a held retry is not due: no timer spins on it
    assert runs(agent.handle(TimePassed(), 60.0)) == []
    assert runs_answer(agent) == {"g1": {"JobB": "held"}}
    [retry] = runs(operate(agent, RELEASE, job="JobB", now=61.0))
    assert retry.attempt == 2


def test_a_cancelled_generation_drops_its_held_runs() -> None:
    agent = Agent("agentB")
    install(agent)
    operate(agent, HOLD)
    fire(agent, "JobB", "g1", "JobA")
    [norun] = [p for p in published(operate(agent, CANCEL, gid="g1")) if p.cls == "JOBSTATUS"]
    assert (norun["jobname"], norun["status"]) == ("JobB", "NORUN")
    assert runs(operate(agent, RELEASE)) == []


def test_a_bad_hold_is_acknowledged_error() -> None:
    agent = Agent("agentB")
    install(agent)
    assert ack_of(operate(agent, HOLD, job="no such"))[0] == "ERROR"
    assert ack_of(operate(agent, HOLD, gid="../etc"))[0] == "ERROR"
    assert ack_of(operate(agent, HOLD, job=3))[0] == "ERROR"
    assert agent.holds == set()


def journaled(agent: Agent, journal: Journal, event: Event, now: float) -> list[Effect]:
    journal.write(event, now)
    journal.sync()
    return agent.handle(event, now)


def test_replaying_the_journal_gives_the_same_holds_and_approvals(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    agent = Agent("agentA")
    for envelope in (DEPLOYER.sign(p) for p in SHIP.publications()):
        journaled(agent, journal, Incoming(envelope), 0.0)
    hold = DEPLOYER.sign(operation("agentA", "SHIP", HOLD, {"job": "Ship"}))
    journaled(agent, journal, Incoming(hold), 1.0)
    journaled(agent, journal, fired(agent, "SignOff", "g1", "Build"), 2.0)
    journaled(agent, journal, fired(agent, "SignOff", "g2", "Build"), 2.0)
    journaled(agent, journal, Incoming(approval("g1")), 3.0)
    journaled(agent, journal, fired(agent, "Ship", "g1", "SignOff"), 4.0)
    journal.close()
    again = Agent("agentA")
    reopened = Journal(tmp_path)
    reopened.recover(again)
    reopened.close()
    assert again.snapshot() == agent.snapshot()
    assert runs_answer(again, "SHIP") == {"g1": {"Ship": "held"}, "g2": {"SignOff": "awaiting"}}
    assert ack_of(again.handle(Incoming(approval("g1")), 5.0))[0] == "UNCHANGED"  # sent again
    assert ack_of(again.handle(Incoming(approval("g2")), 5.0))[0] == "OK"


# approval steps ----------------------------------------------------------------------------------


def fired(agent: Agent, job: str, gid: str, after: str, now: float = 1.0) -> Delivered:
    """SHIP's ``job`` fires in ``gid`` on ``agent``, ``after`` done."""
    done = job_status("SHIP", after, gid, "SUCCESS", "", version=SHIP.version, agent="agentA")
    return Delivered(
        key(agent, job, version=SHIP.version), (signed_trigger("SHIP", gid, MONDAY, at=now), done)
    )


def approval(
    gid: str, verdict: str = "approve", comment: str = "looks good", by: Deployer = DEPLOYER
) -> Publication:
    content = {"gid": gid, "job": "SignOff", "verdict": verdict, "comment": comment}
    return by.sign(operation("agentA", "SHIP", APPROVE, content))


def shipped(agent: Agent) -> Agent:
    for envelope in (DEPLOYER.sign(p) for p in SHIP.publications()):
        if envelope["agentname"] == agent.name:
            agent.handle(Incoming(envelope), 0.0)
    return agent


def test_an_approval_step_waits_and_an_approval_ends_it_success_naming_who() -> None:
    agent = shipped(Agent("agentA"))
    assert ack_of(agent.handle(Incoming(approval("g1")), 1.0))[0] == "ERROR"  # not fired yet
    effects = agent.handle(fired(agent, "SignOff", "g1", "Build"), 1.0)
    assert runs(effects) == [] and published(effects) == []
    assert runs_answer(agent, "SHIP") == {"g1": {"SignOff": "awaiting"}}
    effects = agent.handle(Incoming(approval("g1")), 30.0)
    result, detail = ack_of(effects)
    assert result == "OK" and detail.startswith("approved by ") and detail.endswith(": looks good")
    [done] = [p for p in published(effects) if p.cls == "JOBSTATUS"]
    assert (done["jobname"], done["status"], done["detail"]) == ("SignOff", "SUCCESS", detail)
    assert done["duration"] == 29.0
    assert ack_of(agent.handle(Incoming(approval("g1")), 31.0)) == (
        "UNCHANGED",
        f"SignOff of g1 was {detail} already",
    )
    assert ack_of(agent.handle(Incoming(approval("g1", "reject")), 31.0))[0] == "ERROR"
    # a comment on several lines is kept on one, in the status as in the acknowledgement
    agent.handle(fired(agent, "SignOff", "g2", "Build"), 32.0)
    first = ack_of(agent.handle(Incoming(approval("g2", comment="checked\nby 'me' and \"you\"")), 33.0))
    assert first[0] == "OK" and first[1].endswith(": checked by 'me' and 'you'")
    again = ack_of(agent.handle(Incoming(approval("g2", comment="checked\nby 'me' and \"you\"")), 34.0))
    assert again[0] == "UNCHANGED"
    assert runs(agent.handle(fired(agent, "SignOff", "g1", "Build"), 32.0)) == []  # a duplicate firing


def test_a_rejection_ends_it_failure_and_a_timeout_too() -> None:
    agent = shipped(Agent("agentA"))
    agent.handle(fired(agent, "SignOff", "g1", "Build"), 1.0)
    agent.handle(fired(agent, "SignOff", "g2", "Build"), 1.0)
    [rejected] = [
        p
        for p in published(agent.handle(Incoming(approval("g1", "reject", "")), 2.0))
        if p.cls == "JOBSTATUS"
    ]
    assert rejected["status"] == "FAILURE" and str(rejected["detail"]).startswith("rejected by ")
    assert published(agent.handle(TimePassed(), 600.0)) == []
    [timed_out] = published(agent.handle(TimePassed(), 601.0))
    assert (timed_out["GID"], timed_out["status"], timed_out["detail"]) == (
        "g2",
        "FAILURE",
        "approval timed out: nobody approved within 600 s",
    )
    assert ack_of(agent.handle(Incoming(approval("g2")), 602.0))[0] == "ERROR"


def test_a_cancelled_generation_ends_its_approval_step_norun() -> None:
    agent = shipped(Agent("agentA"))
    agent.handle(fired(agent, "SignOff", "g1", "Build"), 1.0)
    cancel = DEPLOYER.sign(operation("agentA", "SHIP", CANCEL, {"gid": "g1"}))
    norun = [p for p in published(agent.handle(Incoming(cancel), 2.0)) if p.cls == "JOBSTATUS"]
    assert [(p["jobname"], p["status"]) for p in norun] == [("SignOff", "NORUN")]
    assert agent.approvals == {}


def test_an_awaiting_approval_survives_a_restart() -> None:
    agent = shipped(Agent("agentA"))
    agent.handle(fired(agent, "SignOff", "g1", "Build"), 1.0)
    again = restarted(agent)
    [done] = [p for p in published(again.handle(Incoming(approval("g1")), 2.0)) if p.cls == "JOBSTATUS"]
    assert done["status"] == "SUCCESS"


def test_the_workflows_answer_says_which_jobs_are_approval_steps_and_what_is_on_hold() -> None:
    agent = shipped(Agent("agentA"))
    answered = answer_query(agent, query("agentA", "WORKFLOWS", "r1", {}))
    assert isinstance(answered, Publication)
    [deployment] = decode_content(answered["content"])["deployments"]
    assert deployment["jobs"]["SignOff"]["approval"] == ["operator"]
    assert "approval" not in deployment["jobs"]["Ship"] and "holds" not in deployment
    agent.handle(Incoming(DEPLOYER.sign(operation("agentA", "SHIP", HOLD, {"job": "Ship"}))), 1.0)
    agent.handle(Incoming(DEPLOYER.sign(operation("agentA", "SHIP", HOLD, {"gid": "g7"}))), 1.0)
    answered = answer_query(agent, query("agentA", "WORKFLOWS", "r2", {}))
    assert isinstance(answered, Publication)
    [deployment] = decode_content(answered["content"])["deployments"]
    assert deployment["holds"] == [["*", "g7"], ["Ship", "*"]]


# who may approve, with a CA -----------------------------------------------------------------------


def _trigger(gid: str) -> Publication:
    return Publication("Trigger", {"applname": "SHIP", "GID": gid, "schedule": MONDAY})


def test_with_a_ca_only_an_operator_approves_and_forged_or_unauthorised_approvals_are_refused() -> None:
    ca = CA()
    deployer, operator, agent_a = (
        ca.issue("dep", "deployer"),
        ca.issue("alice", "operator"),
        ca.issue("agentA", "agent"),
    )
    agent = Agent("agentA", trust=Trust(ca=ca.certificate))
    now = time.time()
    for envelope in (deployer.sign(p) for p in SHIP.publications()):
        assert ack_of(agent.handle(Incoming(envelope), now))[0] == "OK"
    done = agent_a.sign_publication(
        job_status("SHIP", "Build", "g1", "SUCCESS", "", version=SHIP.version, agent="agentA")
    )
    firing = Delivered(
        key(agent, "SignOff", version=SHIP.version), (deployer.sign_publication(_trigger("g1")), done)
    )
    assert published(agent.handle(firing, now)) == [] and agent.approvals
    # the job takes operators: a deployer, who may cancel, may not approve it
    result, detail = ack_of(agent.handle(Incoming(approval("g1", by=deployer)), now))
    assert (result, detail) == ("REFUSED", "deployer dep may not approve SignOff: it takes operator")
    assert agent.refused["approval"] == 1
    # a monitor may sign no operation at all
    result, detail = ack_of(agent.handle(Incoming(approval("g1", by=ca.issue("mon", "monitor"))), now))
    assert result == "REFUSED" and "not deployer or operator" in detail
    # a forged approval: the operator's envelope with its verdict changed
    genuine = approval("g1", "reject", "no", by=operator)
    forged = Publication(
        genuine.cls, {**genuine.fields, "content": genuine["content"].replace("reject", "approve")}
    )
    assert ack_of(agent.handle(Incoming(forged), now))[0] == "REFUSED"
    # a key of no certificate (the tests' local deployer)
    assert ack_of(agent.handle(Incoming(approval("g1")), now))[0] == "REFUSED"
    assert agent.refused["signature"] == 1 and agent.refused["signer"] == 2
    assert agent.approvals and runs_answer(agent, "SHIP") == {"g1": {"SignOff": "awaiting"}}
    effects = agent.handle(Incoming(approval("g1", comment="ship it", by=operator)), now + 1)
    assert ack_of(effects) == ("OK", "approved by operator alice: ship it")
    [success] = [p for p in published(effects) if p.cls == "JOBSTATUS"]
    assert (success["status"], success["detail"]) == ("SUCCESS", "approved by operator alice: ship it")


def test_the_metrics_count_held_runs_and_steps_awaiting_approval(tmp_path: Path) -> None:
    agent = shipped(Agent("agentA"))
    agent.handle(Incoming(DEPLOYER.sign(operation("agentA", "SHIP", HOLD, {"job": "Build"}))), 1.0)
    for gid in ("g1", "g2"):
        started = job_status("SHIP", "APPL_START", gid, "SUCCESS", "", version=SHIP.version, agent="agentA")
        agent.handle(
            Delivered(
                key(agent, "Build", version=SHIP.version),
                (signed_trigger("SHIP", gid, MONDAY, at=1.0), started),
            ),
            1.0,
        )
    agent.handle(fired(agent, "SignOff", "g3", "Build"), 1.0)
    service = AgentService(agent, BrokerURI("127.0.0.1", 1, "B1"), tmp_path / "state", tmp_path)
    service.journal.close()
    found = scrape(agent_metrics(service))
    waiting = {
        reason: at(found, "wfm_agent_runs_waiting", reason=reason, agent="agentA")
        for reason in ("slot", "retry", "held", "approval")
    }
    assert waiting == {"slot": 0, "retry": 0, "held": 2, "approval": 1}
