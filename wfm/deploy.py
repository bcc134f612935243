"""The deployer: publish a plan's AGENT_CTL envelopes and collect every agent's acknowledgement.

Each envelope is signed (:mod:`wfm.signing`) and acknowledged by its agent with AGENT_ACK (result
OK, UNCHANGED, ERROR, or REFUSED when the agent does not take it from this deployer), matched by
(agent, digest of the signed envelope). Envelopes not yet acknowledged are sent again with
backoff: right after the deployer advertises, the agents' subscriptions may not have reached its
broker yet, and a repeated envelope only costs an UNCHANGED. The coordinator's envelopes go last,
once every other agent has acknowledged: the coordinator starts generations, so it must not start
one on a version some agent does not have yet.

A new version may leave out agents that hold an older one (its jobs moved elsewhere, a new
coordinator): :func:`deploy` (with ``retire``) asks the agents which hold the workflow while it
deploys, and retires the others (UNDEPLOY ``{"retire": [versions they hold]}``): they finish their
generations in flight and start no new one. Left alone, an old coordinator would go on starting
generations of the old version beside the new one's, and a job on both versions would run twice.
Old coordinators are retired once every other agent of the plan has the new version and before
the new coordinator gets it, so that no trigger starts a generation on both; the other agents
left out are retired last, once no old coordinator starts generations that would need them. An
agent that does not answer the question (down during the deploy) is not found: deploying again
once it is back retires it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from broker.client import Brokers, Client, RefusedError, Subscription
from broker.language import Publication
from wfm.operations import Deployed, NoReply, Session
from wfm.workflow import Plan
from workflow_messages import AGENT_CTL, ack_subscription, envelope_digest, retire_content, withdraw_content

__all__ = [
    "AgentReport",
    "deploy",
    "ordered_batches",
    "retire_publications",
    "silent_agents",
    "undeploy_publications",
    "withdraw",
    "withdraw_publications",
]

Key = tuple[str, str]  # agent, digest of the signed envelope (its signature)


@dataclass
class AgentReport:
    """What one agent answered: counts per result, the errors, envelopes sent and never
    acknowledged (``missing``), and envelopes not sent (``unsent``: a batch is sent only once the
    one before it is complete, so a silent agent leaves the coordinator's unsent, not unanswered)."""

    agent: str
    results: dict[str, int] = field(
        default_factory=lambda: {"OK": 0, "UNCHANGED": 0, "ERROR": 0, "REFUSED": 0}
    )
    errors: list[str] = field(default_factory=list)
    missing: int = 0
    unsent: int = 0
    retired: bool = False  # not in the plan, and asked to retire from the workflow

    @property
    def ok(self) -> bool:
        return not self.errors and not self.missing


def ordered_batches(plan: Plan, coordinator: str) -> list[list[Publication]]:
    """The plan's envelopes in the order :func:`deploy` sends them: every other agent's first, then
    the ``coordinator``'s (see above); an empty batch is left out."""
    agents = plan.by_agent()
    first = [plan.publication(e) for agent, es in agents.items() if agent != coordinator for e in es]
    last = [plan.publication(e) for e in agents[coordinator]]
    return [batch for batch in (first, last) if batch]


def undeploy_publications(plan: Plan, agents: Iterable[str] | None = None) -> list[Publication]:
    """One UNDEPLOY envelope per agent of ``plan`` (or of ``agents``): each agent removes every
    version of the workflow."""
    return [_undeploy(plan, agent, "") for agent in (plan.by_agent() if agents is None else agents)]


def retire_publications(plan: Plan, held: Mapping[str, Iterable[str]]) -> list[Publication]:
    """One UNDEPLOY ``{"retire": [versions]}`` per agent of ``held`` (agent -> the versions of
    the workflow it holds), which ``plan`` leaves out: each finishes its generations of those
    versions in flight, starts none, then removes them."""
    return [_undeploy(plan, agent, retire_content(versions)) for agent, versions in held.items()]


def withdraw_publications(plan: Plan, agents: Iterable[str]) -> list[Publication]:
    """One UNDEPLOY ``{"withdraw": true}`` of ``plan``'s version per agent of ``agents``."""
    return [_undeploy(plan, agent, withdraw_content()) for agent in agents]


def _undeploy(plan: Plan, agent: str, content: str) -> Publication:
    values = {"agentname": agent, "command": "UNDEPLOY", "content": content}
    return Publication(
        AGENT_CTL, {**values, "applname": plan.workflow, "jobname": "*", "version": plan.version}
    )


async def deploy(
    uri: Brokers,
    plan: Plan,
    batches: Sequence[Sequence[Publication]],
    timeout: float,
    sign: Callable[[Publication], Publication],
    say: Callable[[str], None] = lambda _: None,
    retire: Callable[[str], None] | None = None,
) -> list[AgentReport]:
    """Publish each batch in turn, waiting for all its acknowledgements (or ``timeout`` overall);
    ``say`` hears how many are acknowledged and which agents are waited for, as that changes.

    Every sending of an envelope is signed anew by ``sign`` (:meth:`wfm.signing.Deployer.sign`):
    agents refuse a sequence they have seen, so a repeat must carry a new one. An acknowledgement
    names the signed envelope (:func:`workflow_messages.envelope_digest`): one of someone else's
    copy, or of an earlier sending, is not taken for the answer to this one.

    With ``retire`` (which hears why, if the holders of the workflow cannot be told), the agents
    that hold the workflow but are not in ``plan`` are retired (reported with ``retired`` set):
    those that coordinated an old version before the last batch (the coordinator's, as
    :func:`ordered_batches` orders them), the others after it; each only if every envelope before
    it was acknowledged, for until then the old version must go on."""
    named = {str(envelope["agentname"]) for batch in batches for envelope in batch}
    reports = {a: AgentReport(a) for a in dict.fromkeys([*plan.by_agent(), *sorted(named)]) if a in named}
    deadline = time.monotonic() + timeout
    total, answered = sum(map(len, batches)), 0
    finding = asyncio.create_task(_ask_holders(uri, plan.workflow, timeout)) if retire else None

    def sendable() -> bool:
        return time.monotonic() < deadline and all(r.ok and not r.unsent for r in reports.values())

    async def publish(client: Client, acks: Subscription, batch: Sequence[Publication]) -> None:
        nonlocal answered
        waiting = dict(enumerate(batch))
        sent: dict[Key, int] = {}  # every signed sending -> the envelope of the batch it carries
        pause = 0.5
        while waiting and time.monotonic() < deadline and all(r.ok for r in reports.values()):
            say(_waiting(answered, total, waiting.values()))
            for index, envelope in waiting.items():
                signed = sign(envelope)
                sent[str(signed["agentname"]), envelope_digest(signed)] = index
                client.publish_nowait(signed)
            resend = min(time.monotonic() + pause, deadline)
            while waiting and time.monotonic() < resend:
                try:
                    delivery = await acks.next(max(0.0, resend - time.monotonic()))
                except TimeoutError:
                    break
                ack = delivery.publication
                acked = sent.get((str(ack.get("agentname")), str(ack.get("digest"))))
                if acked is None or waiting.pop(acked, None) is None:
                    continue  # a repeat, or not ours
                answered += 1
                if waiting:
                    say(_waiting(answered, total, waiting.values()))
                report = reports.setdefault(str(ack["agentname"]), AgentReport(str(ack["agentname"])))
                result = str(ack.get("result"))
                report.results[result] = report.results.get(result, 0) + 1
                if result in ("ERROR", "REFUSED"):
                    report.errors.append(
                        f"{result} {ack.get('command')} {ack.get('jobname')}: {ack.get('detail')}"
                    )
            pause = min(pause * 2, 4.0)
        for envelope in waiting.values():
            reports[str(envelope["agentname"])].missing += 1

    async def left_out(coordinators: bool) -> dict[str, set[str]]:
        """The holders not in the plan, of old coordinators or of the others, not asked yet."""
        assert finding is not None and retire is not None
        try:
            described = await finding
        except Exception as error:  # any failure to ask costs the retirement only
            if coordinators:  # said once
                retire(f"cannot tell which agents left out of {plan.version} hold {plan.workflow}: {error}")
            return {}
        return {
            agent: versions
            for agent, versions in sorted(described.held.items())
            if agent not in named and (agent in described.coordinators) == coordinators
        }

    async def retirement(client: Client, acks: Subscription, held: dict[str, set[str]]) -> None:
        nonlocal total
        if not held:
            return
        total += len(held)
        batch = retire_publications(plan, held)
        for agent in held:
            reports[agent] = AgentReport(agent, retired=True)
        if not sendable():
            for agent in held:
                reports[agent].unsent += 1
            return
        say(f"retiring {', '.join(held)} from {plan.workflow} (left out of {plan.version})")
        await publish(client, acks, batch)

    try:
        async with await Client.connect(uri, timeout=max(1.0, timeout)) as client:
            await client.advertise(plan.deployer_advertisement())
            acks = await client.subscribe(ack_subscription(plan.workflow, plan.version))
            for number, batch in enumerate(batches):
                if retire is not None and number == len(batches) - 1 and sendable():
                    await retirement(client, acks, await left_out(coordinators=True))
                if number and not sendable():
                    for envelope in batch:  # later batches are not sent once one is incomplete
                        reports[str(envelope["agentname"])].unsent += 1
                    continue
                await publish(client, acks, batch)
            if retire is not None and sendable():
                await retirement(client, acks, await left_out(coordinators=False))
    finally:
        if finding is not None:
            finding.cancel()
            await asyncio.gather(finding, return_exceptions=True)
    return list(reports.values())


async def withdraw(
    uri: Brokers,
    plan: Plan,
    reports: Sequence[AgentReport],
    timeout: float,
    sign: Callable[[Publication], Publication],
    say: Callable[[str], None] = lambda _: None,
) -> list[AgentReport]:
    """Roll back a deployment of ``plan`` that did not complete (``reports``: what :func:`deploy`
    said): every agent that installed an envelope of it is asked to withdraw the version, so the
    versions deployed before go on as if it never came (``agents.catalogue``). Not the retired
    ones (nothing of the plan went to them) nor the silent ones (they cannot answer; what they
    hold of it stays inert without the rest). The agents' answers, as :func:`deploy` gives them."""
    reached = [r.agent for r in reports if not r.retired and r.results.get("OK")]
    if not reached:
        return []
    return await deploy(uri, plan, [withdraw_publications(plan, reached)], timeout, sign, say)


async def silent_agents(uri: Brokers, agents: Iterable[str], timeout: float) -> list[str]:
    """The ``agents`` that do not answer a question (WORKFLOWS, by name) within ``timeout``:
    asked before a deployment sends anything, so that one naming an agent that is down (or
    mistyped) is refused whole rather than left half-deployed, its coordinator never sent to.
    Done as soon as every one answered. Empty also when this identity may not ask (the broker
    refuses the question): the deployment then goes on as it did before it asked."""
    try:
        async with Session.connect(uri, timeout) as session:
            await session.ask("WORKFLOWS", {}, agents)
    except NoReply as error:
        return error.agents
    except RefusedError:
        return []
    return []


async def _ask_holders(uri: Brokers, workflow: str, timeout: float) -> Deployed:
    """``workflow`` as the agents that answer describe it, whether or not its coordinator does."""
    async with Session.connect(uri, timeout) as session:
        return await session.describe(workflow)


def _waiting(answered: int, total: int, waiting: Iterable[Publication]) -> str:
    agents = ", ".join(dict.fromkeys(str(envelope["agentname"]) for envelope in waiting))
    return f"{answered}/{total} acknowledged, waiting for {agents}"
