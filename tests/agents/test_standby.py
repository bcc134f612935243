"""Standby agents in the state machine (``agents.standby``): the standby's held firings, the
primary's final status that answers them, the takeover that runs them, the primary's handover;
each through the journal's records and the snapshot."""

from __future__ import annotations

import time

from agents import standby
from agents.events import (
    Delivered,
    Effect,
    Emit,
    Event,
    Finished,
    HandedOver,
    Incoming,
    Result,
    Start,
    Stop,
    TakenOver,
    Withdraw,
)
from agents.journal_records import decode, encode
from agents.queries import answer_query
from agents.state import Agent
from broker.language import Publication
from tests.signing import signed, signed_trigger
from wfm.workflow import loads, translate
from workflow_messages import JOBSTATUS, job_status
from workflow_messages.operations import query

DEFINITION = """<workflow name="W">
  <job name="S" agent="c"><command>s</command></job>
  <job name="J" agent="a" standby="b" takeover="30s"><after job="S"/><command>j</command></job>
  <job name="K" agent="a"><after job="S"/><command>k</command></job>
</workflow>"""
KEY = "W J"
T0 = time.time()


def deployed(name: str) -> tuple[Agent, str]:
    plan = translate(loads(DEFINITION))
    agent = Agent(name)
    for envelope in signed(p for p in plan.publications() if p["agentname"] == name):
        agent.handle(Incoming(envelope), T0)
    return agent, plan.version


def key_of(agent: Agent, job: str) -> str:
    return next(k for k, owner in agent.owners.items() if owner.job == job and k in agent.wanted)


def fire(
    agent: Agent, version: str, gid: str, job: str = "J", now: float = T0, key: str = ""
) -> list[Effect]:
    key = key or key_of(agent, job)
    start = job_status("W", "S", gid, "SUCCESS", "", version=version, agent="c")
    return agent.handle(Delivered(key, (signed_trigger("W", gid, "2026.11.23", at=now), start)), now)


def status(version: str, gid: str, agent: str = "a") -> Publication:
    return job_status("W", "J", gid, "SUCCESS", "exit 0", version=version, agent=agent)


def followed(agent: Agent, version: str, gid: str, now: float) -> list[Effect]:
    return agent.handle(Delivered(f"{standby.KEY}W J", (status(version, gid),)), now)


def starts(effects: list[Effect]) -> list[tuple[str, str]]:
    return [(e.run.gid, e.run.job) for e in effects if isinstance(e, Start)]


def test_the_plan_gives_each_standby_a_passive_copy_and_the_statuses_signers_both_agents() -> None:
    b, _ = deployed("b")
    (info,) = [i for d in b.deployments.values() for i in d.jobs.values()]
    assert (info.job, info.primary, info.standby, info.takeover) == ("J", "a", ("b",), 30.0)
    assert f"{standby.KEY}W J" in b.wanted  # it follows J's statuses
    a, _ = deployed("a")
    assert standby.declarations(a) == {KEY: (("b",), 30.0)}
    assert standby.declarations(b) == {}
    c, _ = deployed("c")  # the successor's agent takes J's statuses from a or b
    assert next(d.signers for d in c.deployments.values()).get("J") in (None, "a b")


def test_a_standby_holds_firings_and_forgets_those_the_primary_ended() -> None:
    b, version = deployed("b")
    assert fire(b, version, "g1") == [] and fire(b, version, "g2") == []
    assert set(b.standing_by) == {("W", "g1", "J"), ("W", "g2", "J")}
    assert standby.wanted(b, T0 + 29) == {}
    followed(b, version, "g1", T0 + 10)
    assert set(b.standing_by) == {("W", "g2", "J")}
    assert standby.wanted(b, T0 + 30) == {KEY: ("a", 30.0)}
    assert fire(b, version, "g1", now=T0 + 31) == []  # a late firing of an answered generation
    assert set(b.standing_by) == {("W", "g2", "J")}


def test_a_takeover_runs_the_held_firings_once_then_the_job_is_the_standbys() -> None:
    b, version = deployed("b")
    fire(b, version, "g1")
    fire(b, version, "g2")
    followed(b, version, "g1", T0 + 5)  # the primary ended g1 before it went
    effects = b.handle(TakenOver(KEY, "a", T0 + 40), T0 + 40)
    assert starts(effects) == [("g2", "J")]
    assert b.handle(TakenOver(KEY, "a", T0 + 41), T0 + 41) == []  # said again: nothing more
    assert starts(fire(b, version, "g3", now=T0 + 42)) == [("g3", "J")]  # its own job now
    run = b.running["W", "g2", "J"]
    [emitted] = [
        e.publication
        for e in b.handle(Finished(run, Result(True, "exit 0", T0, 1.0)), T0 + 43)
        if isinstance(e, Emit)
    ]
    assert emitted["agentname"] == "b"
    assert str(emitted["detail"]).startswith("taken over from a by b: exit 0")
    assert b.outcomes["W", "g2"]["jobs"]["J"]["taken_over"] == "a"
    # its own statuses of J come back through what it follows: they change nothing
    assert followed(b, version, "g2", T0 + 44) == []
    assert standby.wanted(b, T0 + 100) == {}


def test_the_primary_handed_over_drops_its_runs_and_ignores_the_job_and_serves_the_others() -> None:
    a, version = deployed("a")
    j = key_of(a, "J")
    assert starts(fire(a, version, "g1")) == [("g1", "J")]
    fire(a, version, "g2")
    effects = a.handle(HandedOver(((KEY, "b-1", T0 + 40),)), T0 + 50)
    stopped = sorted(e.run.gid for e in effects if isinstance(e, Stop) and e.kill)
    assert stopped == ["g1", "g2"] and not [e for e in effects if isinstance(e, Emit)]
    assert {e.key for e in effects if isinstance(e, Withdraw)}  # J's registrations withdrawn
    assert standby.declarations(a) == {} and standby.noted(a) == KEY
    assert fire(a, version, "g3", now=T0 + 51, key=j) == []  # a late firing of J: nothing
    assert starts(fire(a, version, "g3", "K", now=T0 + 51)) == [("g3", "K")]  # K does
    # a late end of a dropped run publishes nothing
    assert a.handle(Finished(effects_run(effects), Result(False, "killed", T0, 1.0)), T0 + 52) == []


def effects_run(effects: list[Effect]) -> object:
    return next(e.run for e in effects if isinstance(e, Stop))


def test_a_new_version_of_the_workflow_gives_the_job_back_to_its_agent() -> None:
    a, _ = deployed("a")
    a.handle(HandedOver(((KEY, "b-1", T0),)), T0)
    plan = translate(loads(DEFINITION.replace("<command>j</command>", "<command>j2</command>")))
    for envelope in signed(p for p in plan.publications() if p["agentname"] == "a"):
        a.handle(Incoming(envelope), T0 + 1)
    assert a.handed == {} and standby.declarations(a) == {KEY: (("b",), 30.0)}


def test_journal_records_and_snapshots_give_the_same_state() -> None:
    for event in (TakenOver(KEY, "a", 1800000000.5), HandedOver(((KEY, "b-1", 1800000000.0),))):
        again: Event = decode(__import__("json").loads(encode(event, 7.0)))[0]
        assert again == event
    b, version = deployed("b")
    fire(b, version, "g1")
    fire(b, version, "g2")
    b.handle(TakenOver(KEY, "a", T0 + 40), T0 + 40)
    fire(b, version, "g3", now=T0 + 41)
    restored = Agent("b")
    restored.restore(b.snapshot())
    assert restored.took_over == b.took_over and restored.standing_by == b.standing_by
    assert restored.snapshot() == b.snapshot()
    a, _ = deployed("a")
    a.handle(HandedOver(((KEY, "b-1", T0),)), T0)
    again_a = Agent("a")
    again_a.restore(a.snapshot())
    assert again_a.handed == a.handed and standby.noted(again_a) == KEY


def test_a_held_standby_copy_is_not_busy_in_runs_answers() -> None:
    b, version = deployed("b")
    fire(b, version, "g1")
    reply = answer_query(b, query("b", "RUNS", "r1", {"workflow": "W", "gid": "", "limit": 10}))
    assert reply is not None and '"standby"' not in str(reply["content"])
    assert JOBSTATUS  # (the class the copies follow)


def test_the_primary_ends_its_generations_without_the_job_handed_over() -> None:
    a, version = deployed("a")
    a.handle(HandedOver(((KEY, "b-1", T0),)), T0)
    run = starts(fire(a, version, "g5", "K", now=T0 + 1))
    assert run == [("g5", "K")]
    k = a.running["W", "g5", "K"]
    a.handle(Finished(k, Result(True, "exit 0", T0, 1.0)), T0 + 2)
    assert ("W", "g5") not in a.generations and ("W", "g5") in a.ended  # over here: K was its last
