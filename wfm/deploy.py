"""The deployer: publish a plan's AGENT_CTL envelopes and collect every agent's acknowledgement.

Each envelope is signed (:mod:`wfm.signing`) and acknowledged by its agent with AGENT_ACK (result
OK, UNCHANGED, ERROR, or REFUSED when the agent does not take it from this deployer), matched by
(agent, digest of the signed envelope). Envelopes not yet acknowledged are sent again with
backoff: right after the deployer advertises, the agents' subscriptions may not have reached its
broker yet, and a repeated envelope only costs an UNCHANGED. The coordinator's envelopes go last,
once every other agent has acknowledged: the coordinator starts generations, so it must not start
one on a version some agent does not have yet.

A new version may leave out agents that hold an older one (its jobs moved elsewhere, a new
coordinator): :func:`deploy` (with ``retire``) asks the agents which hold the workflow while it deploys,
and once every agent of the plan has it, retires the others (UNDEPLOY ``{"retire": true}``): they
finish their generations in flight and start no new one. Left alone, an old coordinator would go
on starting generations of the old version beside the new one's, and a job on both versions
would run twice. An agent that does not answer the question (down during the deploy) is not
found: ``wfm undeploy`` with the old file reaches it later.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from broker.client import Brokers, Client, Subscription
from broker.errors import ConnectError, LinkClosed, NoAnswer, RemoteError
from broker.language import Publication
from wfm.operations import Session
from wfm.workflow import Plan
from workflow_messages import AGENT_CTL, ack_subscription, envelope_digest

__all__ = [
    "AgentReport",
    "deploy",
    "ordered_batches",
    "retire_publications",
    "undeploy_publications",
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


def undeploy_publications(plan: Plan) -> list[Publication]:
    """One UNDEPLOY envelope per agent of ``plan``: each agent removes every version of the workflow."""
    return [_undeploy(plan, agent, "") for agent in plan.by_agent()]


def retire_publications(plan: Plan, agents: Iterable[str]) -> list[Publication]:
    """One UNDEPLOY ``{"retire": true}`` per agent of ``agents``, which ``plan`` leaves out: each
    finishes its generations of the workflow in flight, starts none, then removes the workflow."""
    return [_undeploy(plan, agent, RETIRE) for agent in agents]


RETIRE = '{"retire": true}'


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
    that hold the workflow but are not in ``plan`` are then retired (reported with ``retired``
    set); nobody is, unless every agent of the plan acknowledged: until then the old version must
    go on."""
    named = {str(envelope["agentname"]) for batch in batches for envelope in batch}
    reports = {a: AgentReport(a) for a in dict.fromkeys([*plan.by_agent(), *sorted(named)]) if a in named}
    deadline = time.monotonic() + timeout
    total, answered = sum(map(len, batches)), 0
    finding = asyncio.create_task(_holders(uri, plan.workflow, timeout)) if retire else None

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

    try:
        async with await Client.connect(uri, timeout=max(1.0, timeout)) as client:
            await client.advertise(plan.deployer_advertisement())
            acks = await client.subscribe(ack_subscription(plan.workflow, plan.version))
            for number, batch in enumerate(batches):
                if number and (time.monotonic() >= deadline or not all(r.ok for r in reports.values())):
                    for envelope in batch:  # later batches are not sent once one is incomplete
                        reports[str(envelope["agentname"])].unsent += 1
                    continue
                await publish(client, acks, batch)
            if retire is None or finding is None or not all(r.ok and not r.unsent for r in reports.values()):
                return list(reports.values())
            try:
                left_out = sorted(await finding - named)
            except (ConnectError, LinkClosed, NoAnswer, RemoteError, OSError) as error:
                retire(f"cannot tell which agents left out of {plan.version} hold {plan.workflow}: {error}")
                left_out = []
            for agent in left_out:
                reports[agent] = AgentReport(agent, retired=True)
            total += len(left_out)
            if left_out:
                say(f"retiring {', '.join(left_out)} from {plan.workflow} (left out of {plan.version})")
                await publish(client, acks, retire_publications(plan, left_out))
    finally:
        if finding is not None:
            finding.cancel()
    return list(reports.values())


async def _holders(uri: Brokers, workflow: str, timeout: float) -> set[str]:
    """The agents that answer having any version of ``workflow`` deployed."""
    async with Session.connect(uri, timeout) as session:
        return await session.holders(workflow)


def _waiting(answered: int, total: int, waiting: Iterable[Publication]) -> str:
    agents = ", ".join(dict.fromkeys(str(envelope["agentname"]) for envelope in waiting))
    return f"{answered}/{total} acknowledged, waiting for {agents}"
