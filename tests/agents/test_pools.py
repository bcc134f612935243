"""Pools through the state machine, without sockets: a keeper and a holder, every message signed by
its sender's certificate and carried by a small in-test overlay (which can cut an agent off), time
passed in. Never more runs than slots, priority then arrival, the final status gives the slot
back, a silent holder's slot comes back after the lease and the holder stops using it first, a
replay decides the same, forged messages change nothing."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from agents import pools
from agents.events import (
    Delivered,
    Effect,
    Emit,
    Event,
    Finished,
    Incoming,
    Result,
    Run,
    Start,
    Stop,
    TimePassed,
)
from agents.state import Agent
from agents.trust import Trust
from broker.language import Publication
from tests.agents.test_trust import CA, NOW
from tests.signing import signed
from wfm.security.acl import load_policy
from wfm.signing import Deployer
from wfm.workflow import loads, translate
from workflow_messages import JOBSTATUS, job_status
from workflow_messages.pools import POOL, pool_advertisement, pool_message, pool_subscription

DEFINITION = """<workflow name="W">
  <pool name="db" slots="SLOTS" lease="8"/>
  <job name="A" agent="k" pool="db"><command>a</command></job>
  <job name="B" agent="h" pool="db"><command>b</command></job>
  <job name="C" agent="h" pool="db" priority="9"><command>c</command></job>
  <job name="D" agent="h" pool="db"><command>d</command></job>
  <job name="E" agent="h"><command>e</command></job>
</workflow>"""
T0 = NOW.timestamp()  # the certificates' validity is around NOW
LEASE = 8.0


@dataclass
class Net:
    """Agents ``k`` (the keeper, and the coordinator) and ``h``, with one CA; what each publishes
    is signed by it and delivered as the brokers would: a POOL message to its ``to``, a status to
    the keeper's subscription of it. Messages to or from an agent in ``cut`` wait in ``held``
    (custody) until it is joined again."""

    slots: int = 1
    ca: CA = field(default_factory=CA)
    agents: dict[str, Agent] = field(default_factory=dict)
    authors: dict[str, Deployer] = field(default_factory=dict)
    started: list[tuple[float, str, str]] = field(default_factory=list)  # (time, gid, job)
    stopped: list[tuple[float, str, str]] = field(default_factory=list)
    running: dict[tuple[str, str], Run] = field(default_factory=dict)
    cut: set[str] = field(default_factory=set)
    held: list[tuple[str, Publication]] = field(default_factory=list)
    events: dict[str, list[tuple[Event, float]]] = field(default_factory=dict)  # each agent's journal
    emitted: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # each agent's POOL ops, jobs

    def __post_init__(self) -> None:
        plan = translate(loads(DEFINITION.replace("SLOTS", str(self.slots))))
        self.version = plan.version
        deployer = self.ca.issue("alice", "deployer")
        for name in ("k", "h"):
            self.agents[name] = Agent(name, max_jobs=10, trust=Trust(ca=self.ca.certificate))
            self.authors[name] = self.ca.issue(name, "agent")
            self.events[name] = []
        for envelope in plan.publications():
            self.handle(str(envelope["agentname"]), Incoming(deployer.sign(envelope)), T0)
        self.trigger_author = deployer

    def handle(self, name: str, event: Event, now: float) -> list[Effect]:
        effects = self.agents[name].handle(event, now)
        if effects or not isinstance(event, TimePassed):  # what the adapter journals
            self.events[name].append((event, now))
            self.emitted.setdefault(name, []).extend(pool_ops(effects))
        for effect in effects:
            if isinstance(effect, Start):
                self.started.append((now, effect.run.gid, effect.run.job))
                self.running[effect.run.gid, effect.run.job] = effect.run
            elif isinstance(effect, Stop):
                assert effect.kill
                self.stopped.append((now, effect.run.gid, effect.run.job))
            elif isinstance(effect, Emit) and effect.publication.cls in (POOL, JOBSTATUS):
                self.send(name, self.authors[name].sign_publication(effect.publication), now)
        return effects

    def send(self, sender: str, publication: Publication, now: float) -> None:
        for to in self.to(publication):
            if {sender, to} & self.cut:
                self.held.append((to, publication))
            else:
                self.deliver(to, publication, now)

    def to(self, publication: Publication) -> list[str]:
        if publication.cls == POOL:
            return [str(publication["to"])]
        key = f"{pools.KEY}status W {publication['jobname']}"
        return [name for name, agent in self.agents.items() if key in agent.wanted]

    def deliver(self, to: str, publication: Publication, now: float) -> None:
        if publication.cls == POOL:
            key = pools.KEY + "requests"
        else:
            key = f"{pools.KEY}status W {publication['jobname']}"
        self.handle(to, Delivered(key, (publication,)), now)

    def join(self, name: str, now: float) -> None:
        self.cut.discard(name)
        held, self.held = self.held, []
        for to, publication in held:
            self.deliver(to, publication, now)

    def fire(self, job: str, gid: str, now: float) -> None:
        name = "k" if job == "A" else "h"
        agent = self.agents[name]
        key = next(k for k, owner in agent.owners.items() if owner.job == job and owner.version)
        trigger = Publication("Trigger", {"applname": "W", "GID": gid, "schedule": "2026.11.23"})
        signed_trigger = self.trigger_author.signer.sign_publication(trigger, int(now * 1e6))
        start = job_status("W", "APPL_START", gid, "SUCCESS", "", version=self.version, agent="k")
        self.handle(name, Delivered(key, (signed_trigger, self.authors["k"].sign_publication(start))), now)

    def finish(self, gid: str, job: str, now: float, ok: bool = True) -> None:
        run = self.running.pop((gid, job))
        name = "k" if job == "A" else "h"
        self.handle(name, Finished(run, Result(ok, "exit 0" if ok else "killed", now, 1.0)), now)

    def tick(self, until: float, step: float = 0.25) -> None:
        now = self.now = getattr(self, "now", T0)
        while now < until:
            now = min(until, now + step)
            for name in self.agents:
                self.handle(name, TimePassed(), now)
        self.now = until

    def busy(self) -> list[str]:
        return sorted(job for (_, job) in self.running)


def test_one_slot_runs_one_job_at_a_time_by_priority_then_arrival() -> None:
    net = Net()
    for at, job in enumerate("ABCDE"):
        net.fire(job, "g1", T0 + at)
    assert net.busy() == ["A", "E"]  # E is in no pool; A asked first, the slot was free
    waiting = net.agents["h"].generations["W", "g1"].jobs
    assert (waiting["B"], waiting["E"]) == ("waiting for pool db", "running")  # wfm runs shows it
    net.finish("g1", "E", T0 + 6)
    net.tick(T0 + 20)  # renewals and requests go on meanwhile: no one else starts
    assert net.busy() == ["A"]
    net.finish("g1", "A", T0 + 21)  # its status gives the slot back: C (priority 9) before B and D
    assert net.busy() == ["C"]
    net.finish("g1", "C", T0 + 22)
    assert net.busy() == ["B"]
    net.finish("g1", "B", T0 + 23, ok=False)  # a failure is final too (no retries)
    assert net.busy() == ["D"]
    net.finish("g1", "D", T0 + 24)
    assert [job for _, _, job in net.started] == ["A", "E", "C", "B", "D"]
    assert net.agents["k"].keeping["db"] == {} and net.agents["h"].asking == {}


def test_two_slots_run_two_jobs_at_once() -> None:
    net = Net(slots=2)
    for at, job in enumerate("ABCD"):
        net.fire(job, "g1", T0 + at)
    assert net.busy() == ["A", "B"]
    net.finish("g1", "B", T0 + 5)
    assert net.busy() == ["A", "C"]


def test_a_silent_holder_stops_its_run_before_the_keeper_gives_its_slot_away() -> None:
    net = Net()
    net.fire("B", "g1", T0)
    net.fire("A", "g1", T0 + 0.5)
    assert net.busy() == ["B"]
    net.cut.add("h")  # partitioned: its renewals wait in custody, no renewal comes back
    net.tick(T0 + 20)
    [(killed_at, _, job)] = net.stopped
    granted_again = next(at for at, _, started in net.started if started == "A")
    # h's window: half a lease from its last request the keeper answered (at most T0 + lease/8
    # + half a lease); the keeper's: a lease from the last it heard
    assert job == "B" and killed_at <= T0 + LEASE / 8 + LEASE / 2 + 0.25
    assert granted_again >= killed_at + LEASE / 2 - LEASE / 8 - 0.25
    assert net.busy() == ["A", "B"]  # (B's supervisor is killing it: Stop(kill=True))
    net.finish("g1", "B", T0 + 20.5, ok=False)
    net.join("h", T0 + 21)  # its late renewals are answered "revoked"; nothing more starts
    assert net.busy() == ["A"] and [job for _, _, job in net.started] == ["B", "A"]


def test_a_grant_that_comes_after_the_holder_s_window_starts_nothing_until_renewed() -> None:
    net = Net()
    net.fire("A", "g1", T0)
    net.cut.add("h")
    net.fire("B", "g1", T0 + 1)  # its acquire waits in custody
    net.tick(T0 + 30)
    assert net.busy() == ["A"]
    net.finish("g1", "A", T0 + 30)
    net.join("h", T0 + 31)  # the acquires arrive, all at once: one grant, echoing B's last request
    net.tick(T0 + 32)
    assert net.busy() == ["B"]
    [(started_at, _, _)] = [s for s in net.started if s[2] == "B"]
    assert started_at >= T0 + 31


def test_replaying_the_keeper_s_events_gives_the_same_holds_and_grants() -> None:
    net = Net()
    for at, job in enumerate("ABCD"):
        net.fire(job, "g1", T0 + at)
    net.tick(T0 + 9)
    net.finish("g1", "A", T0 + 9)
    again = Agent("k", max_jobs=10, trust=Trust(ca=net.ca.certificate))
    emitted = [e for event, now in net.events["k"] for e in again.handle(event, now)]
    grants = [p for e in emitted if isinstance(e, Emit) and (p := e.publication).get("op") == "grant"]
    assert [p["jobname"] for p in grants] == ["A", "C"]
    assert again.keeping == net.agents["k"].keeping
    restored = Agent("k", trust=Trust(ca=net.ca.certificate))
    restored.restore(json.loads(json.dumps(again.snapshot())))
    assert restored.keeping == again.keeping and restored.released == again.released
    holder = Agent("h", trust=Trust(ca=net.ca.certificate))
    holder.restore(json.loads(json.dumps(net.agents["h"].snapshot())))
    assert holder.asking == net.agents["h"].asking


def pool_ops(effects: list[Effect]) -> list[tuple[str, str]]:
    return [
        (str(e.publication["op"]), str(e.publication["jobname"]))
        for e in effects
        if isinstance(e, Emit) and e.publication.cls == POOL
    ]


def test_a_replay_decides_as_the_first_run_when_a_lease_lapsed_at_an_unjournaled_tick() -> None:
    """B's lease lapses with nobody waiting (a tick that emits nothing is not journaled); its late
    renewals then come: the keeper answered "revoked", and so does its replay."""
    net = Net()
    net.fire("B", "g1", T0)
    net.cut.add("h")
    net.tick(T0 + 20)
    net.finish("g1", "B", T0 + 20, ok=False)  # killed by its agent's fencing
    net.join("h", T0 + 21)
    assert ("revoked", "B") in net.emitted["k"]
    again = Agent("k", max_jobs=10, trust=Trust(ca=net.ca.certificate))
    replayed = [op for event, now in net.events["k"] for op in pool_ops(again.handle(event, now))]
    assert replayed == net.emitted["k"] and again.keeping == net.agents["k"].keeping


def test_forged_grants_releases_and_statuses_change_nothing() -> None:
    net = Net()
    net.fire("A", "g1", T0)
    net.fire("B", "g1", T0 + 1)
    keeper, holder = net.agents["k"], net.agents["h"]
    now = T0 + 2
    mallory = net.ca.issue("mallory", "agent")
    hold = ("db", "W", "g1", "B")
    forged = [
        # a grant signed by someone who is not the keeper, claiming to be it or not
        mallory.sign_publication(pool_message("grant", "k", "h", hold, net.version, now)),
        mallory.sign_publication(pool_message("grant", "mallory", "h", hold, net.version, now)),
        net.authors["h"].sign_publication(pool_message("grant", "h", "h", hold, net.version, now)),
        pool_message("grant", "k", "h", hold, net.version, now),  # unsigned
    ]
    for publication in forged:
        net.deliver("h", publication, now)
    assert net.busy() == ["A"] and holder.asking["W", "g1", "B"].confirmed is None
    a_hold = ("db", "W", "g1", "A")
    status_a = job_status("W", "A", "g1", "SUCCESS", "", version=net.version, agent="k")
    for publication in (
        net.authors["h"].sign_publication(pool_message("release", "h", "k", a_hold, net.version, now)),
        mallory.sign_publication(pool_message("release", "k", "k", a_hold, net.version, now)),
        net.authors["h"].sign_publication(replace_agent(status_a, "h")),  # h signs a status of A
        mallory.sign_publication(status_a),  # signed by someone else than A's agent
        status_a,  # unsigned
    ):
        net.deliver("k", publication, now)
    assert keeper.keeping["db"]["W", "g1", "A"].granted is not None and net.busy() == ["A"]
    assert keeper.refused["pool message"] == 2 and keeper.refused["pool release"] == 3
    net.finish("g1", "A", now + 1)  # the real one
    assert net.busy() == ["B"]


def replace_agent(status: Publication, agent: str) -> Publication:
    return Publication(status.cls, {**status.fields, "agentname": agent})


def test_a_second_workflow_may_not_declare_the_pool_otherwise() -> None:
    net = Net()
    other = translate(loads(DEFINITION.replace('name="W"', 'name="V"').replace("SLOTS", "3")))
    deployer = net.ca.issue("alice", "deployer")
    effects = net.agents["k"].handle(Incoming(deployer.sign(other.publications()[0])), T0 + 1)
    [ack] = [e.publication for e in effects if isinstance(e, Emit)]
    assert ack["result"] == "ERROR"
    assert ack["detail"] == (
        "pool 'db' is declared by W with 1 slots kept by k (lease 8 s), here with 3 kept by k"
        " (lease 8 s): a pool has one limit and one keeper"
    )
    same = translate(loads(DEFINITION.replace('name="W"', 'name="V"').replace("SLOTS", "1")))
    effects = net.agents["k"].handle(Incoming(deployer.sign(same.publications()[0])), T0 + 2)
    assert [e.publication["result"] for e in effects if isinstance(e, Emit)] == ["OK"]


def test_an_agent_without_pools_registers_nothing_for_them() -> None:
    plain = translate(
        loads(DEFINITION.replace(' pool="db"', "").replace('<pool name="db" slots="SLOTS" lease="8"/>', ""))
    )
    agent = Agent("h")
    for envelope in signed(plain.publications()):
        if envelope["agentname"] == "h":
            agent.handle(Incoming(envelope), T0)
    assert agent.deployments and not any(key.startswith(pools.KEY) for key in agent.wanted)
    assert "pools" not in agent.snapshot()


def test_the_default_acl_lets_an_agent_send_pool_messages_as_itself_and_read_those_to_it() -> None:
    policy = load_policy()
    mine = pool_advertisement("a1")
    assert policy.may_advertise("a1", "agent", mine) is None
    assert policy.may_subscribe("a1", "agent", pool_subscription("a1")) is None
    assert policy.may_subscribe("a1", "agent", pool_subscription("a2")) is not None
    grant = pool_message("grant", "a2", "a1", ("db", "W", "g1", "B"), "v", 1.0)
    assert policy.may_publish("a2", "agent", grant, 0.0) is None
    assert policy.may_publish("a1", "agent", grant, 0.0) is not None  # as someone else
    assert policy.may_publish("c", "client", grant, 0.0) is not None


def test_a_held_job_asks_for_no_slot_until_released() -> None:
    net = Net()
    holder = net.agents["h"]
    holder.holds = {("W", "B", "g1")}  # wfm hold: B of g1 may not start
    net.fire("B", "g1", T0)
    net.fire("A", "g1", T0 + 1)
    assert net.busy() == ["A"] and ("acquire", "B") not in net.emitted["h"]
    holder.holds = set()
    net.finish("g1", "A", T0 + 2)
    net.handle("h", TimePassed(), T0 + 3)
    assert net.busy() == ["B"]
