"""A workflow's limit on generations at once (``max-active``, ``overlap``), in the agents' state
machines: the coordinator holds, skips or replaces a generation when its APPL_START fires with
the limit reached, starts waiting ones as others end, and decides the same after a restart."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path

import pytest

from agents.events import Delivered, Effect, Event, Finished, Incoming, Result, Stop, TimePassed
from agents.journal import Journal
from agents.queries import answer_query
from agents.registering import Registering
from agents.registering import _name as registering_name
from agents.state import Agent
from broker.language import Publication
from tests.agents.test_state import install, journaled, published, runs
from tests.signing import DEPLOYER, signed
from wfm.workflow import After, Job, Plan, Workflow, translate
from workflow_messages import job_status, trigger
from workflow_messages.operations import CANCEL, operation, query
from workflow_messages.overlap import Overlap


def plan(limit: int = 1, policy: str = "queue") -> Plan:
    """LIM: JobA on agentA (the coordinator), then JobB on agentB."""
    jobs = (Job("JobA", "agentA", "a"), Job("JobB", "agentB", "b", after=(After("JobA"),)))
    return translate(Workflow("LIM", jobs, overlap=Overlap(limit, policy)))


def coordinator(limit: int = 1, policy: str = "queue") -> Agent:
    agent = Agent("agentA")
    install(agent, plan(limit, policy))
    return agent


def key(agent: Agent, job: str, command: str = "COMPOSITESUBSCRIBE") -> str:
    """The registration of ``job`` of the version deployed last."""
    current = version(agent)
    return next(
        k
        for k, (_, v, j) in agent.owners.items()
        if j == job and v in (current, "") and agent.wanted[k].command == command
    )


def version(agent: Agent) -> str:
    """The version of LIM deployed on ``agent`` (the limit is part of a version)."""
    current = agent.current("LIM")
    assert current is not None
    return current


def triggered(gid: str, at: float, expires: float | None = None) -> Publication:
    return DEPLOYER.signer.sign_publication(trigger("LIM", gid, date(2026, 11, 23), expires), int(at * 1e6))


def arrive(agent: Agent, gid: str, now: float, expires: float | None = None) -> list[Effect]:
    """The Trigger of ``gid`` reaches the coordinator: APPL_START's firing."""
    return agent.handle(Delivered(key(agent, "APPL_START"), (triggered(gid, now, expires),)), now)


def end(agent: Agent, gid: str, now: float, value: str = "SUCCESS") -> list[Effect]:
    """JobB's status came: APPL_END's firing (the coordinator's JobA is done in every test)."""
    jobb = job_status("LIM", "JobB", gid, value, "", version=version(agent), agent="agentB")
    return agent.handle(Delivered(key(agent, "APPL_END"), (jobb,)), now)


def finish_joba(agent: Agent, gid: str, now: float) -> list[Effect]:
    """JobA fires on APPL_START and ends: the coordinator's part of ``gid`` is done."""
    start = job_status("LIM", "APPL_START", gid, "SUCCESS", "", version=version(agent), agent="agentA")
    fired = agent.handle(Delivered(key(agent, "JobA"), (triggered(gid, now), start)), now)
    [run] = runs(fired)
    return agent.handle(Finished(run, Result(True, "exit 0", now, 0.1)), now)


def said(effects: list[Effect]) -> list[tuple[str, str, str]]:
    """(gid, job, status) of each JOBSTATUS published."""
    return [
        (str(p["GID"]), str(p["jobname"]), str(p["status"]))
        for p in published(effects)
        if p.cls == "JOBSTATUS"
    ]


def run_through(agent: Agent, gid: str, now: float) -> list[Effect]:
    """``gid`` runs to its end: JobA here, then JobB's status."""
    return finish_joba(agent, gid, now) + end(agent, gid, now + 1)


def test_with_limit_1_and_queue_triggers_wait_and_start_one_after_the_other_in_order() -> None:
    agent = coordinator(1, "queue")
    assert said(arrive(agent, "g1", 10.0)) == [("g1", "APPL_START", "SUCCESS")]
    assert said(arrive(agent, "g2", 11.0)) == []  # held: no APPL_START, so no job of it fires
    assert said(arrive(agent, "g3", 12.0)) == []
    assert arrive(agent, "g2", 13.0) == []  # its Trigger delivered again: a duplicate
    effects = run_through(agent, "g1", 20.0)
    assert said(effects)[-2:] == [("g1", "APPL_END", "SUCCESS"), ("g2", "APPL_START", "SUCCESS")]
    assert agent.generations["LIM", "g2"].since == 21.0  # started then: its deadline counts from it
    assert said(run_through(agent, "g2", 30.0))[-2:] == [
        ("g2", "APPL_END", "SUCCESS"),
        ("g3", "APPL_START", "SUCCESS"),
    ]
    assert said(run_through(agent, "g3", 40.0))[-1:] == [("g3", "APPL_END", "SUCCESS")]
    assert arrive(agent, "g2", 50.0) == []  # over: a late repeat starts nothing


def test_a_limit_of_2_lets_two_run_and_the_third_waits_for_either() -> None:
    agent = coordinator(2, "queue")
    arrive(agent, "g1", 10.0)
    assert said(arrive(agent, "g2", 11.0)) == [("g2", "APPL_START", "SUCCESS")]
    assert said(arrive(agent, "g3", 12.0)) == []
    finish_joba(agent, "g2", 13.0)
    assert said(end(agent, "g2", 14.0)) == [("g2", "APPL_END", "SUCCESS"), ("g3", "APPL_START", "SUCCESS")]


def test_wfm_runs_lists_a_waiting_generation_as_queued() -> None:
    agent = coordinator(1, "queue")
    arrive(agent, "g1", 10.0)
    arrive(agent, "g2", 11.0)
    reply = answer_query(agent, query("*", "RUNS", "r", {"workflow": "LIM"}))
    assert isinstance(reply, Publication)
    found = {g["gid"]: g for g in json.loads(str(reply["content"]))["generations"]}
    assert found["g2"]["busy"] == {"APPL_START": "queued"} and found["g2"]["date"] == "2026-11-23"
    assert found["g1"]["jobs"]["APPL_START"]["status"] == "SUCCESS"


def test_with_skip_a_trigger_beyond_the_limit_ends_skipped_at_once() -> None:
    agent = coordinator(1, "skip")
    arrive(agent, "g1", 10.0)
    [skipped] = published(arrive(agent, "g2", 11.0))
    assert (skipped["jobname"], skipped["status"]) == ("APPL_END", "SKIPPED")
    assert skipped["detail"] == "skipped: 1 generation running (limit 1): g1; nothing ran"
    assert ("LIM", "g2") in agent.ended and arrive(agent, "g2", 12.0) == []
    run_through(agent, "g1", 20.0)
    assert said(arrive(agent, "g3", 30.0)) == [("g3", "APPL_START", "SUCCESS")]  # room again


def test_with_cancel_the_oldest_is_cancelled_and_the_new_one_starts_once_it_ended() -> None:
    agent = coordinator(1, "cancel")
    arrive(agent, "g1", 10.0)
    start = job_status("LIM", "APPL_START", "g1", "SUCCESS", "", version=version(agent), agent="agentA")
    [joba] = runs(agent.handle(Delivered(key(agent, "JobA"), (triggered("g1", 11.0), start)), 11.0))
    effects = arrive(agent, "g2", 12.0)
    [notice] = published(effects)  # the other agents hear it: a second APPL_START of g1
    assert (notice["GID"], notice["jobname"], notice["status"]) == ("g1", "APPL_START", "CANCELLED")
    assert notice["detail"] == "cancelled: replaced by g2 (overlap=cancel, limit 1)"
    assert [e.run for e in effects if isinstance(e, Stop)] == [joba]
    stopped = agent.handle(Finished(joba, Result(False, "exit -15 after 1 s", 11.0, 1.0)), 13.0)
    assert said(stopped) == [("g1", "JobA", "FAILURE")]  # g2 waits: g1 has not ended yet
    [(_, _, ended), started] = said(end(agent, "g1", 14.0, "NORUN"))
    assert ended == "CANCELLED" and started == ("g2", "APPL_START", "SUCCESS")


def test_with_cancel_a_trigger_while_the_oldest_is_being_cancelled_replaces_the_waiting_one() -> None:
    agent = coordinator(1, "cancel")
    arrive(agent, "g1", 10.0)
    arrive(agent, "g2", 11.0)  # g1 being cancelled, g2 waits
    [dropped] = published(arrive(agent, "g3", 12.0))
    assert (dropped["GID"], dropped["jobname"], dropped["status"]) == ("g2", "APPL_END", "CANCELLED")
    assert (
        dropped["detail"] == "cancelled while queued: replaced by g3 (overlap=cancel, limit 1); nothing ran"
    )
    assert said(end(agent, "g1", 13.0, "NORUN"))[-1] == ("g3", "APPL_START", "SUCCESS")


def test_the_other_agents_stop_the_replaced_generation_on_the_coordinators_notice() -> None:
    agentb = Agent("agentB")
    install(agentb, plan(1, "cancel"))
    v = version(agentb)
    start = job_status("LIM", "APPL_START", "g1", "SUCCESS", "", version=v, agent="agentA")
    joba = job_status("LIM", "JobA", "g1", "SUCCESS", "", version=v, agent="agentA")
    [jobb] = runs(agentb.handle(Delivered(key(agentb, "JobB"), (triggered("g1", 10.0), joba)), 10.0))
    agentb.handle(Delivered(key(agentb, "APPL_START", "SUBSCRIBE"), (start,)), 10.0)
    notice = job_status("LIM", "APPL_START", "g1", "CANCELLED", "replaced by g2", version=v, agent="agentA")
    effects = agentb.handle(Delivered(key(agentb, "APPL_START", "SUBSCRIBE"), (notice,)), 11.0)
    assert [e.run for e in effects if isinstance(e, Stop)] == [jobb]
    assert agentb.generations["LIM", "g1"].cancelled


def test_wfm_cancel_of_a_waiting_generation_ends_it_cancelled_at_once() -> None:
    agent = coordinator(1, "queue")
    arrive(agent, "g1", 10.0)
    arrive(agent, "g2", 11.0)
    cancel = DEPLOYER.sign(operation("agentA", "LIM", CANCEL, {"gid": "g2"}))
    effects = agent.handle(Incoming(cancel), 12.0)
    [gone] = [p for p in published(effects) if p.cls == "JOBSTATUS"]
    assert (gone["GID"], gone["jobname"], gone["status"]) == ("g2", "APPL_END", "CANCELLED")
    assert gone["detail"] == "cancelled while queued; nothing ran"
    assert [s for s in said(run_through(agent, "g1", 20.0)) if s[1] == "APPL_START"] == []  # nothing waits


def test_a_waiting_trigger_that_expires_ends_expired_at_the_next_tick() -> None:
    agent = coordinator(1, "queue")
    arrive(agent, "g1", 10.0)
    arrive(agent, "g2", 11.0, expires=15.0)
    assert agent.handle(TimePassed(), 14.9) == []
    [gone] = published(agent.handle(TimePassed(), 15.0))
    assert (gone["GID"], gone["jobname"], gone["status"]) == ("g2", "APPL_END", "EXPIRED")
    assert str(gone["detail"]).startswith("expired while queued: its turn had not come by its expiry")
    assert [s for s in said(run_through(agent, "g1", 20.0)) if s[1] == "APPL_START"] == []


def test_without_a_limit_every_trigger_starts_its_generation() -> None:
    agent = Agent("agentA")
    jobs = (Job("JobA", "agentA", "a"), Job("JobB", "agentB", "b", after=(After("JobA"),)))
    install(agent, translate(Workflow("LIM", jobs)))
    for n in range(5):
        assert said(arrive(agent, f"g{n}", 10.0 + n)) == [(f"g{n}", "APPL_START", "SUCCESS")]


@pytest.mark.parametrize(
    "record", [{"max_active": 0, "policy": "queue"}, {"max_active": 2, "policy": "later"}, 3]
)
def test_a_deploy_with_a_misshapen_limit_is_refused(record: object) -> None:
    agent = Agent("agentA")
    [envelope] = [p for p in plan().publications() if p["agentname"] == "agentA"]
    content = json.loads(str(envelope["content"]))
    content["jobs"][0]["overlap"] = record
    bad = Publication(envelope.cls, {**envelope.fields, "content": json.dumps(content)})
    [ack] = published(agent.handle(Incoming(signed([bad])[0]), 0.0))
    assert ack["result"] == "ERROR" and "overlap" in str(ack["detail"])


def test_a_restart_replays_the_same_decisions_none_lost_none_started_twice(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    agent = Agent("agentA")
    for publication in signed(plan().publications()):
        if publication["agentname"] == "agentA":
            journaled(agent, journal, Incoming(publication), 0.0)

    def event(gid: str, now: float) -> Event:
        return Delivered(key(agent, "APPL_START"), (triggered(gid, now),))

    journaled(agent, journal, event("g1", 10.0), 10.0)
    journaled(agent, journal, event("g2", 11.0), 11.0)
    journaled(agent, journal, event("g3", 12.0), 12.0)
    journal.close()
    for restarted in (recovered(tmp_path), snapshotted(agent)):
        assert restarted.snapshot() == agent.snapshot()
        assert restarted.handle(event("g2", 13.0), 13.0) == []  # delivered again after the restart
        assert said(run_through(restarted, "g1", 20.0))[-1] == ("g2", "APPL_START", "SUCCESS")
        assert said(run_through(restarted, "g2", 30.0))[-1] == ("g3", "APPL_START", "SUCCESS")
        assert restarted.handle(event("g3", 31.0), 31.0) == []


def test_a_restart_between_the_end_and_the_start_it_made_room_for_does_not_start_it_twice(
    tmp_path: Path,
) -> None:
    journal = Journal(tmp_path)
    agent = Agent("agentA")
    for publication in signed(plan().publications()):
        if publication["agentname"] == "agentA":
            journaled(agent, journal, Incoming(publication), 0.0)
    journaled(agent, journal, Delivered(key(agent, "APPL_START"), (triggered("g1", 10.0),)), 10.0)
    journaled(agent, journal, Delivered(key(agent, "APPL_START"), (triggered("g2", 11.0),)), 11.0)
    start = job_status("LIM", "APPL_START", "g1", "SUCCESS", "", version=version(agent), agent="agentA")
    [run] = runs(
        journaled(agent, journal, Delivered(key(agent, "JobA"), (triggered("g1", 12.0), start)), 12.0)
    )
    journaled(agent, journal, Finished(run, Result(True, "exit 0", 12.0, 0.1)), 12.5)
    jobb = job_status("LIM", "JobB", "g1", "SUCCESS", "", version=version(agent), agent="agentB")
    effects = journaled(agent, journal, Delivered(key(agent, "APPL_END"), (jobb,)), 13.0)
    assert said(effects)[-1] == ("g2", "APPL_START", "SUCCESS")
    journal.close()
    restarted = recovered(tmp_path)
    assert restarted.snapshot() == agent.snapshot()
    assert restarted.handle(TimePassed(), 14.0) == []  # g2 started before the restart: not again
    assert restarted.handle(Delivered(key(restarted, "APPL_END"), (jobb,)), 14.0) == []


def recovered(folder: Path) -> Agent:
    restarted = Agent("agentA")
    reopened = Journal(folder)
    reopened.recover(restarted)
    reopened.close()
    return restarted


def snapshotted(agent: Agent) -> Agent:
    restored = Agent(agent.name)
    restored.restore(json.loads(json.dumps(agent.snapshot())))
    return restored


def test_a_firing_a_kept_session_delivers_before_the_restarted_agent_asks_again_reaches_its_job() -> None:
    """A broker that kept the coordinator's session while it was away (kill -9) delivers the
    firings it held under the ids of the last run, maybe before the new run has asked for those
    registrations again: each id ends with the registration's name, the same in every run."""

    class Fresh:
        """A client of the new run, which holds no registration yet."""

        def name_of(self, known_id: str) -> str | None:
            return None

    agent = coordinator(1, "queue")
    registering = Registering(agent)
    end_key = key(agent, "APPL_END")
    held = f"B1/agentA-1/{registering_name(end_key)}"
    assert registering.key_of(Fresh(), held) == end_key  # type: ignore[arg-type]
    assert registering.key_of(Fresh(), "B1/agentA-1/k0000") is None  # not wanted: dropped
    assert registering.key_of(Fresh(), "not an id") is None


def test_a_new_version_with_a_higher_limit_starts_the_waiting_ones_it_has_room_for() -> None:
    agent = coordinator(1, "queue")
    arrive(agent, "g1", 10.0)
    arrive(agent, "g2", 11.0)
    arrive(agent, "g3", 12.0)
    wider = plan(2, "queue")
    effects = install(agent, wider)  # g1 runs on the old version, and counts
    assert said(effects) == [("g2", "APPL_START", "SUCCESS")]
    assert [p["version"] for p in published(effects) if p.cls == "JOBSTATUS"] == [wider.version]
    assert said(end(agent, "g2", 13.0)) == [("g2", "APPL_END", "SUCCESS"), ("g3", "APPL_START", "SUCCESS")]


def test_a_new_version_that_moves_the_coordinator_away_ends_the_waiting_ones() -> None:
    agent = coordinator(1, "queue")
    arrive(agent, "g1", 10.0)
    arrive(agent, "g2", 11.0)
    jobs = (Job("JobA", "agentX", "a"), Job("JobB", "agentA", "b", after=(After("JobA"),)))
    moved = translate(Workflow("LIM", jobs, overlap=Overlap(1)))
    [gone] = [p for p in published(install(agent, moved)) if p.cls == "JOBSTATUS"]
    assert (gone["GID"], gone["jobname"], gone["status"]) == ("g2", "APPL_END", "CANCELLED")
    where = f"version {moved.version} has another coordinator"
    assert gone["detail"] == f"cancelled while queued: {where}; nothing ran (trigger it again)"


def test_a_waiting_generations_deadline_counts_from_when_it_starts() -> None:
    agent = Agent("agentA")
    jobs = (Job("JobA", "agentA", "a"), Job("JobB", "agentB", "b", after=(After("JobA"),)))
    install(agent, translate(Workflow("LIM", jobs, deadline="1m", overlap=Overlap(1))))
    arrive(agent, "g1", 10.0)
    arrive(agent, "g2", 11.0)
    missed = published(agent.handle(TimePassed(), 200.0))
    assert [(p["GID"], p["status"]) for p in missed] == [("g1", "DEADLINE")]  # g2 has not started
    run_through(agent, "g1", 300.0)  # g2 starts at 301
    assert published(agent.handle(TimePassed(), 360.0)) == []
    assert [(p["GID"], p["status"]) for p in published(agent.handle(TimePassed(), 361.0))] == [
        ("g2", "DEADLINE")
    ]
