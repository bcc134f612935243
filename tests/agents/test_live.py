"""The states of jobs not ended that an agent publishes (:mod:`agents.live`, JOBSTATE): one
publication per change, none per tick, none twice after a restart, and none a composite takes."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from agents.events import Delivered, Effect, Emit, Event, Finished, Incoming, Result, TimePassed
from agents.journal import Journal
from agents.state import Agent
from broker.language import Publication
from broker.matching import Matcher
from broker.routing.relations import fits
from tests.agents.test_conditions import arrived, closed, condition_key
from tests.agents.test_conditions import fire as fire_billing
from tests.agents.test_conditions import installed as billing
from tests.agents.test_holds import approval, fired, shipped
from tests.agents.test_operations import operate
from tests.agents.test_overlap import arrive, coordinator, run_through
from tests.agents.test_pools import T0, Net
from tests.agents.test_state import (
    PLAN,
    fire,
    install,
    journaled,
    key,
    published,
    runs,
    states,
    status,
    trigger,
)
from tests.signing import DEPLOYER, signed
from workflow_messages import job_status
from workflow_messages.jobstate import JOBSTATE, job_state, state_advertisement
from workflow_messages.operations import CANCEL, HOLD, RELEASE, operation


def test_a_held_job_says_so_once_and_where_it_went_when_released() -> None:
    agent = Agent("agentB")
    install(agent)
    operate(agent, HOLD, job="JobB")
    effects = fire(agent, "JobB", "g1", "JobA")
    assert states(effects) == [("JobB", "g1", "HELD", "on hold: job JobB of PAYROLL")]
    assert states(agent.handle(TimePassed(), 50.0)) == []  # nothing per tick
    assert states(fire(agent, "JobB", "g1", "JobA")) == []  # a duplicate firing
    effects = operate(agent, RELEASE, job="JobB", now=60.0)
    [run] = runs(effects)
    assert states(effects) == [("JobB", "g1", "RUNNING", "")]
    [moved] = [p for p in (e.publication for e in effects if isinstance(e, Emit)) if p.cls == JOBSTATE]
    assert (moved["agentname"], moved["since"]) == ("agentB", 60)
    done = agent.handle(Finished(run, Result(True, "exit 0", 61.0, 1.0)), 61.0)
    assert states(done) == [] and [p["status"] for p in published(done)] == ["SUCCESS"]  # its status says it
    assert agent.live == {}


def test_a_job_queued_behind_the_agents_own_jobs_when_released_says_queued() -> None:
    agent = Agent("agentB", max_jobs=1)
    install(agent)
    operate(agent, HOLD, job="JobC")
    assert len(runs(fire(agent, "JobB", "g1", "JobA", date="2026.11.27"))) == 1
    assert states(fire(agent, "JobC", "g1", "JobA", date="2026.11.27")) == [
        ("JobC", "g1", "HELD", "on hold: job JobC of PAYROLL")
    ]
    assert states(operate(agent, RELEASE, job="JobC")) == [("JobC", "g1", "QUEUED", "")]


def test_a_held_workflow_names_its_rule_and_a_cancel_ends_the_state_by_the_status() -> None:
    agent = Agent("agentB")
    install(agent)
    operate(agent, HOLD)
    assert states(fire(agent, "JobB", "g1", "JobA")) == [
        ("JobB", "g1", "HELD", "on hold: every job of PAYROLL")
    ]
    effects = operate(agent, CANCEL, gid="g1")
    assert states(effects) == [] and [p["status"] for p in published(effects) if p.cls == "JOBSTATUS"] == [
        "NORUN"
    ]
    assert agent.live == {}


def test_a_job_waiting_for_its_conditions_says_what_for_and_starts_when_they_hold() -> None:
    agent = billing()
    assert states(fire_billing(agent, "g1")) == [
        (
            "Invoice",
            "g1",
            "HELD",
            "waiting for LEDGER.Close, event [class,eq,FILE_ARRIVED],[path,eq,'/in/x.csv']",
        )
    ]
    # one condition of two: still held, nothing published (the reason is not a state)
    assert states(agent.handle(Delivered(condition_key(agent, 0), (closed("2026-11-23"),)), 2.0)) == []
    effects = agent.handle(Delivered(condition_key(agent, 1), (arrived(),)), 3.0)
    assert len(runs(effects)) == 1 and states(effects) == [("Invoice", "g1", "RUNNING", "")]


def test_an_approval_step_awaits_and_its_status_ends_it() -> None:
    agent = shipped(Agent("agentA"))
    effects = agent.handle(fired(agent, "SignOff", "g1", "Build"), 1.0)
    assert states(effects) == [("SignOff", "g1", "AWAITING", "awaiting approval by operator (wfm approve)")]
    effects = agent.handle(Incoming(approval("g1")), 2.0)
    assert states(effects) == [] and agent.live == {}


@dataclass
class Watched(Net):
    """The pool tests' two agents, keeping the JOBSTATEs the holder ``h`` publishes."""

    said: list[tuple[str, str, str, str]] = field(default_factory=list)

    def handle(self, name: str, event: Event, now: float) -> list[Effect]:
        effects = super().handle(name, event, now)
        if name == "h":
            self.said += states(effects)
        return effects


def test_a_run_waiting_for_a_slot_of_its_pool_says_so_then_running() -> None:
    net = Watched()
    net.fire("A", "g1", T0)  # the keeper's own job takes the one slot
    net.fire("B", "g1", T0 + 1)
    assert net.said == [("B", "g1", "WAITING", "waiting for pool db (kept by k)")]
    net.tick(T0 + 10)  # requests sent again every lease / 8 s: no state published
    assert len(net.said) == 1
    net.finish("g1", "A", T0 + 11)  # its status gives the slot back: B is granted it and starts
    assert net.said[1:] == [("B", "g1", "RUNNING", "")]


def test_a_generation_queued_behind_max_active_says_so_on_its_appl_start() -> None:
    agent = coordinator(1, "queue")
    arrive(agent, "g1", 10.0)
    effects = arrive(agent, "g2", 11.0)
    assert states(effects) == [
        ("APPL_START", "g2", "QUEUED", "waiting its turn: max-active 1 generations run")
    ]
    assert states(agent.handle(TimePassed(), 12.0)) == []
    effects = run_through(agent, "g1", 20.0)  # g2 starts: its APPL_START's status says so
    assert states(effects) == [] and agent.live == {}


def test_the_states_published_are_in_the_snapshot_and_replayed_from_the_journal(tmp_path: Path) -> None:
    agent = Agent("agentB")
    install(agent)
    operate(agent, HOLD, job="JobB")
    fire(agent, "JobB", "g1", "JobA")
    again = Agent("agentB", trust=agent.trust)
    again.restore(json.loads(json.dumps(agent.snapshot())))
    assert again.live == agent.live == {("PAYROLL", "g1", "JobB"): ("HELD", 1.0)}
    assert again.snapshot() == agent.snapshot()
    assert states(again.handle(TimePassed(), 10.0)) == []  # restarted: nothing published again
    journal = Journal(tmp_path)
    first = Agent("agentB")
    for envelope in signed(PLAN.publications()):
        if envelope["agentname"] == "agentB":
            journaled(first, journal, Incoming(envelope), 0.0)
    journaled(
        first, journal, Incoming(DEPLOYER.sign(operation("agentB", "PAYROLL", HOLD, {"job": "JobB"}))), 1.0
    )
    pubs = (trigger("g1", at=2.0), status("JobA", "g1"))
    assert states(journaled(first, journal, Delivered(key(first, "JobB"), pubs), 2.0))[0][2] == "HELD"
    journal.close()
    replayed = Agent("agentB")
    reopened = Journal(tmp_path)
    reopened.recover(replayed)
    reopened.close()
    assert replayed.live == first.live
    assert states(replayed.handle(TimePassed(), 3.0)) == []


def test_no_composite_filter_or_status_subscription_takes_a_job_state() -> None:
    """Every registration a deployment makes (conditions, composites' atoms, the statuses a
    coordinator follows) is matched against JOBSTATEs shaped like statuses: none matches."""
    matcher = Matcher()
    for name in ("agentA", "agentB", "agentC"):
        agent = Agent(name)
        install(agent, PLAN)
        for wanted, registration in agent.wanted.items():
            if registration.filter is not None and registration.command != "ADVERTISE":
                matcher.add((name, wanted), registration.filter)
            if registration.composite is not None:
                for n, atom in enumerate(registration.composite.atoms()):
                    matcher.add((name, wanted, n), atom.filter)
            if registration.clear is not None:
                matcher.add((name, wanted, "clear"), registration.clear)
    for job in ("APPL_START", "JobA", "JobB", "JobC", "JobD", "Alert", "APPL_END"):
        for state in ("HELD", "RUNNING", "QUEUED"):
            published_state = job_state("PAYROLL", job, "g1", state, "", agent="agentA", since=1.0)
            shaped = Publication(
                JOBSTATE, {**published_state.fields, "status": "SUCCESS", "version": PLAN.version}
            )
            assert matcher.match(published_state) == set() and matcher.match(shaped) == set()
            status = job_status("PAYROLL", job, "g1", "SUCCESS", "", version=PLAN.version, agent="agentA")
            assert matcher.match(status) or job == "APPL_END"  # the check checks something


def test_a_job_state_fits_its_agents_advertisement_signed_or_not_and_no_other_agents() -> None:
    state = job_state("PAYROLL", "JobB", "g1", "HELD", "on hold", agent="agentA", since=1.5)
    signed_state = DEPLOYER.signer.sign_publication(state, 7)
    assert fits(state, state_advertisement("agentA")) and fits(signed_state, state_advertisement("agentA"))
    assert not fits(state, state_advertisement("agentB"))
