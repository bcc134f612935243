"""The coordinator's standbys (``agents.standby``): APPL_START and APPL_END go with the first start
job's standbys as passive copies under that job's key; a standby that takes the job over starts
the generations whose Triggers it held, ends those whose end it held, and counts the workflow's
limit on generations at once; the primary handed over publishes neither any more. And deadlines:
whoever runs a job watches it, and a deadline the primary alerted is not alerted again."""

from __future__ import annotations

import time

from agents import standby
from agents.events import (
    Delivered,
    Effect,
    Emit,
    Finished,
    HandedOver,
    Incoming,
    Result,
    Start,
    TakenOver,
    TimePassed,
)
from agents.state import Agent
from broker.language import Publication, parse_filter
from tests.signing import signed, signed_trigger
from wfm.security.acl import load_policy
from wfm.workflow import loads, translate
from workflow_messages import APPL_END, APPL_START, job_status
from workflow_messages.deadlines import deadline_alert

COORDINATED = """<workflow name="V" max-active="1" overlap="queue" deadline="1h">
  <job name="S" agent="a" standby="b" takeover="30s" deadline="10m"><command>s</command></job>
  <job name="N" agent="c"><after job="S"/><command>n</command></job>
  <job name="K" agent="a"><after job="S"/><command>k</command></job>
</workflow>"""
KEY = "V S"
T0 = time.time()


def deployed(name: str, definition: str = COORDINATED) -> tuple[Agent, str]:
    plan = translate(loads(definition))
    agent = Agent(name)
    for envelope in signed(p for p in plan.publications() if p["agentname"] == name):
        agent.handle(Incoming(envelope), T0)
    return agent, plan.version


def composite(agent: Agent, job: str) -> str:
    """The key of ``job``'s condition (not the workflow's APPL_START subscription)."""
    return next(
        k
        for k, owner in agent.owners.items()
        if owner.job == job and owner.version and agent.wanted[k].command == "COMPOSITESUBSCRIBE"
    )


def starts_key(agent: Agent) -> str:
    return next(k for k, owner in agent.owners.items() if not owner.version)


def trigger(agent: Agent, gid: str, now: float = T0) -> list[Effect]:
    return agent.handle(
        Delivered(composite(agent, APPL_START), (signed_trigger("V", gid, "2026.11.23", at=now),)), now
    )


def status(version: str, gid: str, job: str, by: str = "a", state: str = "SUCCESS") -> Publication:
    return job_status("V", job, gid, state, "", version=version, agent=by)


def heard(agent: Agent, version: str, gid: str, job: str, now: float, by: str = "a") -> list[Effect]:
    """``job``'s status of ``gid`` as this agent hears it: APPL_START through the workflow's
    start subscription, the others through what a standby follows."""
    key = starts_key(agent) if job == APPL_START else f"{standby.KEY}V {job}"
    return agent.handle(Delivered(key, (status(version, gid, job, by),)), now)


def ended(agent: Agent, version: str, gid: str, now: float) -> list[Effect]:
    """N's and K's statuses came: APPL_END's condition (the end jobs' statuses) fires."""
    ends = (status(version, gid, "N", "c"), status(version, gid, "K", "a"))
    return agent.handle(Delivered(composite(agent, APPL_END), ends), now)


def published(effects: list[Effect], job: str) -> list[tuple[str, str, str]]:
    return [
        (str(e.publication["GID"]), str(e.publication["status"]), str(e.publication["agentname"]))
        for e in effects
        if isinstance(e, Emit) and e.publication.cls == "JOBSTATUS" and e.publication["jobname"] == job
    ]


def test_the_plan_deploys_the_coordinators_jobs_to_the_first_start_jobs_standbys() -> None:
    b, _ = deployed("b")
    (deployment,) = b.deployments.values()
    start, end = deployment.jobs[APPL_START], deployment.jobs[APPL_END]
    for info in (start, end):
        assert (info.primary, info.goes_with, info.standby, info.takeover) == ("a", "S", ("b",), 30.0)
    assert standby.passive(b, start) and standby.keyed(start) == "S"
    assert deployment.signers[APPL_START] == deployment.signers[APPL_END] == "a b"
    a, _ = deployed("a")
    assert a.deployments[next(iter(a.deployments))].jobs[APPL_START].primary is None
    assert standby.declarations(a) == {KEY: (("b",), 30.0)}  # one key: S, and the coordinator with it
    assert a.deployments[next(iter(a.deployments))].jobs["S"].agents == {APPL_START: "a b"}
    c, _ = deployed("c")  # N's agent takes APPL_START and APPL_END from a or b
    assert next(iter(c.deployments.values())).signers[APPL_START] == "a b"
    clears = {str(r.clear) for r in c.wanted.values() if r.clear is not None}
    assert clears == {
        "[class,eq,JOBSTATUS],[GID,eq,$S$X],[agentname,str-regex,'^(?:a|b)$'],[applname,eq,V],[jobname,eq,APPL_END]"
    }
    assert str(parse_filter(clears.pop(), allow_variables=True)).startswith("[class,eq,JOBSTATUS]")


def test_a_standby_holds_triggers_and_forgets_those_the_coordinator_started_or_ended() -> None:
    b, version = deployed("b")
    assert trigger(b, "g1") == [] and trigger(b, "g2") == [] and trigger(b, "g3") == []
    assert {k[1] for k in b.standing_by} == {"g1", "g2", "g3"}
    heard(b, version, "g1", APPL_START, T0 + 1)  # started
    heard(b, version, "g2", APPL_END, T0 + 1)  # skipped or expired: its APPL_END, no APPL_START
    assert set(b.standing_by) == {("V", "g3", APPL_START)}
    assert ("V", "g2") in b.ended
    assert standby.wanted(b, T0 + 31) == {KEY: ("a", 30.0)}  # a Trigger held too long: S's key
    assert trigger(b, "g1", T0 + 2) == []  # a late Trigger of a started generation: a duplicate
    assert set(b.standing_by) == {("V", "g3", APPL_START)}


def test_taken_over_the_standby_starts_the_held_generations_once_and_ends_them() -> None:
    b, version = deployed("b")
    trigger(b, "g1")
    heard(b, version, "g1", APPL_START, T0 + 1)  # the primary started g1 and froze
    assert ended(b, version, "g1", T0 + 2) == []  # N ended g1: its end is held
    trigger(b, "g2", T0 + 3)  # the primary queued g2 (max-active 1) or never got it
    effects = b.handle(TakenOver(KEY, "a", T0 + 40), T0 + 40)
    # g1 ends (its APPL_END, b's), then g2 starts: it waited for g1 as it would have on a
    assert published(effects, APPL_END) == [("g1", "SUCCESS", "b")]
    assert published(effects, APPL_START) == [("g2", "SUCCESS", "b")]
    assert b.handle(TakenOver(KEY, "a", T0 + 41), T0 + 41) == []  # said again: nothing more
    # from now on the coordinator's jobs are b's: a new Trigger waits for g2 (max-active 1)
    assert published(trigger(b, "g3", T0 + 42), APPL_START) == []
    assert b.generations["V", "g3"].queued
    runs = [e.run for e in heard(b, version, "g2", APPL_START, T0 + 42, by="b") if isinstance(e, Start)]
    assert runs == []  # its own APPL_START back: nothing (S fires on its condition)
    effects = ended(b, version, "g2", T0 + 43)
    assert published(effects, APPL_END) == [("g2", "SUCCESS", "b")]
    assert published(effects, APPL_START) == [("g3", "SUCCESS", "b")]  # its turn came
    answer = {d["workflow"]: d["coordinator"] for d in _deployments(b)}
    assert answer == {"V": True}


def _deployments(agent: Agent) -> list[dict[str, object]]:
    from agents.queries import _deployments as answered

    return answered(agent)


def test_a_standby_not_taken_over_is_no_coordinator_in_its_answers() -> None:
    b, _ = deployed("b")
    assert [d["coordinator"] for d in _deployments(b)] == [False]


def test_the_primary_handed_over_publishes_no_start_or_end_and_drops_what_waits_its_turn() -> None:
    a, _ = deployed("a")
    starting = composite(a, APPL_START)
    assert published(trigger(a, "g1"), APPL_START) == [("g1", "SUCCESS", "a")]
    assert published(trigger(a, "g2", T0 + 1), APPL_START) == []  # queued: max-active 1
    s_runs = [k for k in a.running if k[2] == "S"]
    assert s_runs == []  # (S fires on its condition, which the broker joins: not here)
    effects = a.handle(HandedOver(((KEY, "b-1", T0 + 40),)), T0 + 50)
    assert not [e for e in effects if isinstance(e, Emit) and e.publication.cls == "JOBSTATUS"]
    assert not a.generations["V", "g2"].queued  # b holds its Trigger: b starts it
    assert standby.handed_jobs(a) == {("V", "S"), ("V", APPL_START), ("V", APPL_END)}
    left = {owner.job for owner in a.owners.values() if owner.version}
    assert left == {"K"}  # the registrations of S, APPL_START and APPL_END withdrawn
    assert starts_key(a) in a.wanted  # it still hears which generations run
    late = Delivered(starting, (signed_trigger("V", "g3", "2026.11.23", at=T0 + 51),))
    assert a.handle(late, T0 + 51) == []  # a Trigger delivered late: nothing
    assert standby.declarations(a) == {} and standby.noted(a) == KEY
    assert [d["coordinator"] for d in _deployments(a)] == [False]  # b is, for wfm workflows


def test_a_generation_whose_end_came_while_held_is_not_started_again() -> None:
    b, version = deployed("b")
    trigger(b, "g1")
    heard(b, version, "g1", APPL_START, T0 + 1)
    heard(b, version, "g1", APPL_END, T0 + 2)  # the primary ended g1 before it went
    effects = b.handle(TakenOver(KEY, "a", T0 + 40), T0 + 40)
    assert published(effects, APPL_START) == [] and published(effects, APPL_END) == []
    assert trigger(b, "g1", T0 + 41) == []  # and a Trigger of it delivered again: a duplicate


# deadlines --------------------------------------------------------------------------------------


def alerts(effects: list[Effect]) -> list[tuple[str, str, str]]:
    return [
        (str(e.publication["jobname"]), str(e.publication["GID"]), str(e.publication["agentname"]))
        for e in effects
        if isinstance(e, Emit) and e.publication.cls == "ALERT"
    ]


def fire_s(agent: Agent, version: str, gid: str, now: float) -> list[Effect]:
    start = status(version, gid, APPL_START)
    return agent.handle(
        Delivered(composite(agent, "S"), (signed_trigger("V", gid, "2026.11.23", at=now), start)), now
    )


def test_the_standby_watches_the_deadlines_of_what_it_took_over_and_alerts_each_once() -> None:
    b, version = deployed("b")
    for gid in ("g1", "g2"):
        trigger(b, gid)
        heard(b, version, gid, APPL_START, T0)
        fire_s(b, version, gid, T0 + 1)  # held: a runs S
    # held, b alerts nothing: a watches S's deadline (10 minutes) and the generation's (1 hour)
    assert alerts(b.handle(TimePassed(), T0 + 601)) == []
    # a alerted g1's deadline before it froze: b heard it
    a_alert = deadline_alert("V", "S", "g1", "10m", T0, T0 + 600, "a")
    b.handle(Delivered(f"{standby.KEY}V S deadline", (a_alert,)), T0 + 602)
    assert b.generations["V", "g1"].missed == ["S"]
    effects = b.handle(TakenOver(KEY, "a", T0 + 640), T0 + 640)
    assert alerts(effects) == [("S", "g2", "b")]  # g1's was alerted: not again
    assert alerts(b.handle(TimePassed(), T0 + 641)) == []
    # the generation's own deadline is the coordinator's, b's now
    assert alerts(b.handle(TimePassed(), T0 + 3601)) == [
        (APPL_END, "g1", "b"),
        (APPL_END, "g2", "b"),
    ]


def test_an_alert_from_no_agent_of_the_job_is_not_taken_for_the_primarys() -> None:
    b, version = deployed("b")
    trigger(b, "g1")
    heard(b, version, "g1", APPL_START, T0)
    forged = deadline_alert("V", "S", "g1", "10m", T0, T0 + 600, "c")
    b.handle(Delivered(f"{standby.KEY}V S deadline", (forged,)), T0 + 601)
    assert b.generations["V", "g1"].missed == []


def test_the_primary_handed_over_alerts_no_deadline_of_the_job_nor_of_the_generation() -> None:
    a, version = deployed("a")
    trigger(a, "g1")
    effects = fire_s(a, version, "g1", T0 + 1)
    (run,) = [e.run for e in effects if isinstance(e, Start)]
    a.handle(HandedOver(((KEY, "b-1", T0 + 40),)), T0 + 50)
    assert a.handle(Finished(run, Result(False, "killed", T0, 1.0)), T0 + 51) == []
    heard(a, version, "g2", APPL_START, T0 + 60, by="b")  # b started g2: a's K runs in it
    assert ("V", "g1") in a.generations and ("V", "g2") in a.generations  # K not done in either
    assert alerts(a.handle(TimePassed(), T0 + 60 + 3601)) == []


def test_an_agent_may_follow_the_deadlines_alerts_by_the_default_access_rules() -> None:
    b, _ = deployed("b")
    followed = b.wanted[f"{standby.KEY}V S deadline"].filter
    assert followed is not None and load_policy().may_subscribe("b", "agent", followed) is None
    assert f"{standby.KEY}V {APPL_END} deadline" in b.wanted  # the generation's, with APPL_END
